package conveyor_test

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/runconveyor/conveyor"
)

// TestSetAges: the ages of a command line are set, over those set before,
// and a bad pair, age or kind is refused saying which.
func TestSetAges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      []string
		want    map[string]time.Duration
		wantErr string
	}{
		{in: []string{"runs=168h"}, want: map[string]time.Duration{"runs": 168 * time.Hour}},
		{in: []string{" audit=720h, artifacts=forever ,inbox=0s"}, want: map[string]time.Duration{
			"audit": 720 * time.Hour, "artifacts": -1, "inbox": 0}},
		{in: []string{"runs=1h,jobs=2h", "runs=3h"}, want: map[string]time.Duration{"runs": 3 * time.Hour, "jobs": 2 * time.Hour}},
		{in: []string{"runs"}, wantErr: `"runs": want kind=age`},
		{in: []string{"runs=soon"}, wantErr: "want a duration"},
		{in: []string{"runs=-1h"}, wantErr: "want a duration of at least 0"},
		{in: []string{"trash=1h"}, wantErr: `unknown kind "trash" (want one of [runs audit`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.in, " "), func(t *testing.T) {
			var r conveyor.RetentionConfig
			var err error
			for _, s := range tt.in {
				if err = r.SetAges(s); err != nil {
					break
				}
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("SetAges = %v, want an error saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !maps.Equal(r.Ages, tt.want) {
				t.Fatalf("SetAges: %v, %v; want %v", r.Ages, err, tt.want)
			}
		})
	}
}
