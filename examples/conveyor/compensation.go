package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
)

// compensation prints a run's compensation_log, one line per undone
// step in the order they ran, under a header; nothing when it is empty.
func (p printer) compensation(st lifecycle.RunStatus) {
	if len(st.CompensationLog) == 0 {
		return
	}
	tw := tabwriter.NewWriter(p.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPENSATION\tACTION\tOUTCOME\tATTEMPTS\tDURATION\tERROR")
	for _, e := range st.CompensationLog {
		fmt.Fprintf(tw, "%d-%s\t%s\t%s\t%d\t%s\t%s\n", e.StepNumber, e.Step, e.Action, e.Outcome, e.Attempts,
			e.EndedAt.Sub(e.StartedAt).Round(time.Millisecond), e.Error)
	}
	_ = tw.Flush()
}
