package retention_test

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/lifecycle/retention"
)

// TestSetAges: the ages of a command line are set, over those set before,
// and a bad pair, age or kind is refused saying which.
func TestSetAges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      []string
		want    map[retention.Kind]time.Duration
		wantErr string
	}{
		{in: []string{"runs=168h"}, want: map[retention.Kind]time.Duration{retention.Runs: 168 * time.Hour}},
		{in: []string{" audit=720h, artifacts=forever ,inbox=0s"}, want: map[retention.Kind]time.Duration{
			retention.Audit: 720 * time.Hour, retention.Artifacts: retention.Forever, retention.Inbox: 0}},
		{in: []string{"runs=1h,jobs=2h", "runs=3h"}, want: map[retention.Kind]time.Duration{retention.Runs: 3 * time.Hour, retention.Jobs: 2 * time.Hour}},
		{in: []string{"runs"}, wantErr: `"runs": want kind=age`},
		{in: []string{"runs=soon"}, wantErr: "want a duration"},
		{in: []string{"runs=-1h"}, wantErr: "want a duration of at least 0"},
		{in: []string{"trash=1h"}, wantErr: `unknown kind "trash" (want one of [runs audit`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.in, " "), func(t *testing.T) {
			var c retention.Config
			var err error
			for _, s := range tt.in {
				if err = c.SetAges(s); err != nil {
					break
				}
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("SetAges = %v, want an error saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !maps.Equal(c.Ages, tt.want) {
				t.Fatalf("SetAges: %v, %v; want %v", c.Ages, err, tt.want)
			}
		})
	}
}
