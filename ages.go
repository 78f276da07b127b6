package conveyor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/retention"
)

// SetAges sets the ages of the kinds s names in r.Ages, in the form of a
// command line, "kind=age,...": each age a Go duration of at least 0, or
// "forever" (-1, kept). It refuses an unknown kind, naming the kinds; a
// program gives it to flag.Func as it is.
func (r *RetentionConfig) SetAges(s string) error {
	if r.Ages == nil {
		r.Ages = map[string]time.Duration{}
	}
	for pair := range strings.SplitSeq(s, ",") {
		kind, age, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return fmt.Errorf("%q: want kind=age", pair)
		}
		if !slices.Contains(retention.Kinds(), retention.Kind(kind)) {
			return fmt.Errorf("unknown kind %q (want one of %v)", kind, retention.Kinds())
		}
		if age == "forever" {
			r.Ages[kind] = retention.Forever
			continue
		}
		d, err := time.ParseDuration(age)
		if err != nil || d < 0 {
			return fmt.Errorf("%q: want a duration of at least 0 or \"forever\"", pair)
		}
		r.Ages[kind] = d
	}
	return nil
}
