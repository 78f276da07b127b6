package jobqueue

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// WriteCountsHistoryForTest writes, as the rollups of a history of jobs
// finished before now would stand, the record of the last closed day and
// a chunk for every closed hour of the day after it, their counts adding
// up to jobs, spread over agents agents of one type: what a count reads
// of a history, whatever its length (BenchmarkCounts's million jobs).
func WriteCountsHistoryForTest(ctx context.Context, s *storage.Store, now time.Time, jobs, agents int) error {
	day := closedDay(now)
	rows := func(n int) []netRow {
		out := make([]netRow, 0, 2*agents)
		for a := range agents {
			name := jobName{JobType: "SEND_EMAIL", AgentSlug: fmt.Sprintf("a-%d", a), Machine: "general-job"}
			share := int64(n / agents)
			out = append(out, netRow{jobName: name, State: lifecycle.JobComplete, N: share - share/20},
				netRow{jobName: name, State: lifecycle.JobDead, N: share / 20})
		}
		return out
	}
	hours := 0
	for h := day.Add(24 * time.Hour); h.Before(closedHour(now).Add(time.Hour)); h = h.Add(time.Hour) {
		hours++
	}
	perHour := jobs / 720 // a month's jobs an hour
	if _, err := s.Put(ctx, statsDayPrefix+day.Format(statsDayFormat)+".json", mustJSON(&dayRecord{Day: day, Net: rows(jobs - hours*perHour)}), storage.IfNotExists()); err != nil {
		return err
	}
	for h := day.Add(24 * time.Hour); h.Before(closedHour(now).Add(time.Hour)); h = h.Add(time.Hour) {
		c := chunkRecord{Through: "audit/x", Last: true, Objects: perHour, Net: rows(perHour)}
		for m := range 60 {
			c.Minutes = append(c.Minutes, minuteRow{M: m, Completed: perHour / 60, Run: make([]int, len(latencyBounds)+1)})
		}
		if _, err := s.Put(ctx, fmt.Sprintf("%s%s/0000.json", statsHourPrefix, h.Format(statsHourFormat)), mustJSON(&c), storage.IfNotExists()); err != nil {
			return err
		}
	}
	return nil
}

// TestPercentile: a percentile is the upper bound of its bucket, at most
// the longest seen, nil for no observation.
func TestPercentile(t *testing.T) {
	t.Parallel()
	hist := func(ms ...int64) (h []int) {
		for _, v := range ms {
			h = observe(h, v)
		}
		return h
	}
	for _, tc := range []struct {
		name    string
		h       []int
		longest int64
		p       float64
		want    int64 // -1: nil
	}{
		{"none", nil, 0, 0.5, -1},
		{"one of 30 ms", hist(30), 30, 0.5, 30},
		{"bucket bound", hist(30, 40, 45, 900), 900, 0.5, 50},
		{"p95 in the last bucket", hist(30, 40, 45, 900), 900, 0.95, 900},
		{"past the last bound", hist(10, 700000), 700000, 0.95, 700000},
		{"exact bound", hist(1, 2, 5), 5, 0.5, 2},
	} {
		got := percentile(tc.h, tc.longest, tc.p)
		switch {
		case tc.want < 0 && got != nil:
			t.Errorf("%s: %d, want none", tc.name, *got)
		case tc.want >= 0 && (got == nil || *got != tc.want):
			t.Errorf("%s: %v, want %d", tc.name, got, tc.want)
		}
	}
}
