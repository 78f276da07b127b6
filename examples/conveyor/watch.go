package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
)

// watch follows a run until it ends: a progress line at every change it
// sees on the event stream, then the final status. Client.Wait runs beside
// the stream and decides when the run has ended: it re-reads the status
// once its own stream is open, so a run that ends before this one's opens
// is not waited on for ever; without a stream it polls.
func (c *command) watch(ctx context.Context, runID string) error {
	st, err := c.c.Status(ctx, runID)
	if err != nil {
		return err
	}
	c.progress(st)
	if lifecycle.RunFinished(st.Machine, st.Status) {
		return c.end(st)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	type result struct {
		st  lifecycle.RunStatus
		err error
	}
	ended := make(chan result, 1)
	go func() {
		st, err := c.c.Wait(sctx, runID)
		ended <- result{st, err}
		stop() // ends the stream below
	}()
	last := st.Status + fmt.Sprint(st.StepsCompleted)
	for ev, err := range c.c.Events(sctx, "", runID) {
		if err != nil {
			break // ended by Wait, or broken: Wait goes on polling
		}
		var d struct {
			RunID string `json:"runId"`
		}
		if json.Unmarshal(ev.Data, &d) != nil || d.RunID != runID {
			continue
		}
		// The event says what changed; the status says where the run is.
		if now, err := c.c.Status(sctx, runID); err == nil && now.Status+fmt.Sprint(now.StepsCompleted) != last {
			last = now.Status + fmt.Sprint(now.StepsCompleted)
			c.progress(now)
		}
	}
	r := <-ended
	if r.err != nil {
		return r.err
	}
	if r.st.Status+fmt.Sprint(r.st.StepsCompleted) != last {
		c.progress(r.st)
	}
	return c.end(r.st)
}

// progress prints one line: time, state, a bar of steps done, the step.
func (p printer) progress(st lifecycle.RunStatus) {
	const width = 20
	done := 0
	if st.StepsTotal > 0 {
		done = min(width, st.StepsCompleted*width/st.StepsTotal)
	}
	bar := strings.Repeat("█", done) + strings.Repeat("░", width-done)
	fmt.Fprintf(p.out, "%s  %-18s %s %d/%d  %s\n", time.Now().Format("15:04:05"), st.Status, bar, st.StepsCompleted, st.StepsTotal, st.CurrentStep)
}

func (p printer) end(st lifecycle.RunStatus) error {
	p.compensation(st)
	if st.Error != nil {
		return fmt.Errorf("run %s %s: %s", st.RunID, st.Status, *st.Error)
	}
	fmt.Fprintf(p.out, "run %s %s\n", st.RunID, st.Status)
	return nil
}
