package retention

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// SetAges sets the ages of the kinds s names in c.Ages, in the form of a
// command line, "kind=age,...": each age a Go duration of at least 0, or
// "forever" (Forever). It refuses an unknown kind, naming the kinds; a
// program gives it to flag.Func as it is.
func (c *Config) SetAges(s string) error {
	if c.Ages == nil {
		c.Ages = map[Kind]time.Duration{}
	}
	for pair := range strings.SplitSeq(s, ",") {
		kind, age, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return fmt.Errorf("%q: want kind=age", pair)
		}
		if !slices.Contains(Kinds(), Kind(kind)) {
			return fmt.Errorf("unknown kind %q (want one of %v)", kind, Kinds())
		}
		if age == "forever" {
			c.Ages[Kind(kind)] = Forever
			continue
		}
		d, err := time.ParseDuration(age)
		if err != nil || d < 0 {
			return fmt.Errorf("%q: want a duration of at least 0 or \"forever\"", pair)
		}
		c.Ages[Kind(kind)] = d
	}
	return nil
}
