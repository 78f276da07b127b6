package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// watch follows a run until it ends: a progress line at every change it
// sees on the event stream, then the final status. When the stream is not
// there (an older Worker, a proxy that buffers), Client.Wait's polling
// takes over.
func (c *command) watch(ctx context.Context, runID string) error {
	st, err := c.c.Status(ctx, runID)
	if err != nil {
		return err
	}
	c.progress(st)
	if httpapi.Terminal(st) {
		return c.end(st)
	}
	last := st.Status + fmt.Sprint(st.StepsCompleted)
	for ev, err := range c.c.Events(ctx, "", runID) {
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Fprintf(c.errOut, "event stream: %v; polling instead\n", err)
			break
		}
		var d struct {
			RunID string `json:"runId"`
		}
		if json.Unmarshal(ev.Data, &d) != nil || d.RunID != runID {
			continue
		}
		// The event says what changed; the status says where the run is.
		if st, err = c.c.Status(ctx, runID); err != nil {
			return err
		}
		if now := st.Status + fmt.Sprint(st.StepsCompleted); now != last {
			last = now
			c.progress(st)
		}
		if httpapi.Terminal(st) {
			return c.end(st)
		}
	}
	st, err = c.c.Wait(ctx, runID)
	if err != nil {
		return err
	}
	c.progress(st)
	return c.end(st)
}

// progress prints one line: time, state, a bar of steps done, the step.
func (c *command) progress(st run.Status) {
	const width = 20
	done := 0
	if st.StepsTotal > 0 {
		done = min(width, st.StepsCompleted*width/st.StepsTotal)
	}
	bar := strings.Repeat("█", done) + strings.Repeat("░", width-done)
	fmt.Fprintf(c.out, "%s  %-18s %s %d/%d  %s\n", time.Now().Format("15:04:05"), st.Status, bar, st.StepsCompleted, st.StepsTotal, st.CurrentStep)
}

func (c *command) end(st run.Status) error {
	if st.Error != nil {
		return fmt.Errorf("run %s %s: %s", st.RunID, st.Status, *st.Error)
	}
	fmt.Fprintf(c.out, "run %s %s\n", st.RunID, st.Status)
	return nil
}
