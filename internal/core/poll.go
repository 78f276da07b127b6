package core

import "time"

// BusyPoll is how soon an adaptive Poll looks again after a look that
// found work: a stream of work from other processes is found within tens
// of milliseconds of its arrival.
const BusyPoll = 25 * time.Millisecond

// Poll is the schedule of a loop that looks in the store for work other
// processes made, over a store that cannot signal it (S3 has no watch):
// BusyPoll after a look that found work, then twice as long after every
// look that found none, up to Idle. An idle loop so costs one look per
// Idle, and Idle is the worst case before work arriving after idleness is
// found. Work this process makes wakes its loops at once, without a look;
// Busy makes the next waits short again when such work suggests more may
// follow. The Runner, the job Worker and the NLM processor each keep one;
// one schedule for them all, so an idle Worker's cost is the sum of their
// Idles (docs/performance.md). A Poll is not safe for concurrent use.
type Poll struct {
	// Idle is the longest wait. Required (positive).
	Idle time.Duration
	wait time.Duration
}

// Next returns the wait before the next look, given whether the last one
// found work.
func (p *Poll) Next(found bool) time.Duration {
	if found || p.wait <= 0 {
		p.wait = BusyPoll
	} else {
		p.wait *= 2
	}
	p.wait = min(p.wait, p.Idle)
	return p.wait
}

// Busy makes the next wait BusyPoll, as if the last look had found work.
func (p *Poll) Busy() { p.wait = 0 }
