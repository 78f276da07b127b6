package webhook_test

import (
	"context"
	"strings"
	"testing"
)

// A delivery with a traceparent header starts a run that keeps the
// sender's trace (its status.json's traceparent); one without, or with a
// malformed one, starts a run that keeps none.
func TestDeliveryContinuesTrace(t *testing.T) {
	t.Parallel()
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	tests := []struct {
		name, header string
		want         string
	}{
		{"traceparent", "00-" + traceID + "-00f067aa0ba902b7-01", "00-" + traceID + "-00f067aa0ba902b7-01"},
		{"none", "", ""},
		{"malformed", "00-xyz-01", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			d := gh("d-trace-"+tt.name, "pull_request", ghPR("opened", 10+i)).with(func(d *delivery) {
				if tt.header != "" {
					d.header["traceparent"] = tt.header
				}
			})
			rep := r.send(d)
			if !rep.started || rep.runID == "" {
				t.Fatalf("delivery not started: %d %s", rep.status, rep.raw)
			}
			st, err := r.runner.Status(context.Background(), rep.runID)
			if err != nil {
				t.Fatal(err)
			}
			if st.TraceParent != tt.want || (tt.want != "" && !strings.Contains(st.TraceParent, traceID)) {
				t.Errorf("run's traceparent %q, want %q", st.TraceParent, tt.want)
			}
		})
	}
}
