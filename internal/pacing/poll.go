package pacing

import "time"

// BusyPoll is how soon an adaptive Poll looks again after a look that
// found work: a stream of work from other processes is found within tens
// of milliseconds of its arrival.
const BusyPoll = 25 * time.Millisecond

// BusyLooks is how many looks in a row that find nothing a Poll still
// makes BusyPoll apart after one that found work, before it backs off: a
// stream of work whose arrivals are a few tens of milliseconds apart leaves
// gaps longer than one BusyPoll, and doubling at the first empty look would
// make the next arrivals wait for the longer waits (at 20 arrivals a second,
// p99 about 180 ms instead of 35 ms in a model of random arrivals). It
// costs BusyLooks looks after work stops.
const BusyLooks = 10

// Poll is the schedule of a loop that looks in the store for work other
// processes made, over a store that cannot signal it (S3 has no watch):
// BusyPoll after a look that found work and after the BusyLooks looks
// that follow it finding nothing, then twice as long after every further
// look that found none, up to Idle. A loop whose first looks find nothing
// backs off at once. An idle loop so costs one look per Idle, and Idle is
// the worst case before work arriving after idleness is found. Work this
// process makes wakes its loops at once, without a look; Busy makes the
// next waits short again when such work suggests more may follow. The
// Runner, the job Worker and the NLM processor each keep one; one
// schedule for them all, so an idle Worker's cost is the sum of their
// Idles (docs/performance.md). A Poll is not safe for concurrent use.
type Poll struct {
	// Idle is the longest wait. Required (positive).
	Idle  time.Duration
	wait  time.Duration
	empty int // looks in a row that found nothing since work was seen
}

// Next returns the wait before the next look, given whether the last one
// found work.
func (p *Poll) Next(found bool) time.Duration {
	switch {
	case found:
		p.wait, p.empty = BusyPoll, 0
	case p.wait <= 0: // the first look found nothing: no stream to keep pace with
		p.wait, p.empty = BusyPoll, BusyLooks
	default:
		if p.empty++; p.empty > BusyLooks {
			p.wait *= 2
		}
	}
	p.wait = min(p.wait, p.Idle)
	return p.wait
}

// Busy makes the next waits BusyPoll, as if the last look had found work.
func (p *Poll) Busy() { p.wait, p.empty = BusyPoll, 0 }
