package layout

import (
	"strings"
	"time"
)

// The job queue's rollups of the audit log (docs/spec.md): one record
// set per closed UTC hour, stats/jobs/hours/{YYYYMMDDTHH}/{nnnn}.json,
// and one record per closed UTC day, stats/jobs/days/{YYYYMMDD}.json.
// Both list in time order.
const (
	StatsHoursPrefix = "stats/jobs/hours/"
	StatsDaysPrefix  = "stats/jobs/days/"
)

const (
	statsHourFormat = "20060102T15"
	statsDayFormat  = "20060102"
)

// StatsDayKey is the key of day's rollup.
func StatsDayKey(day time.Time) string {
	return StatsDaysPrefix + day.UTC().Format(statsDayFormat) + ".json"
}

// ParseStatsHourKey returns the hour of a key under StatsHoursPrefix, or
// false for any other key.
func ParseStatsHourKey(key string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(key, StatsHoursPrefix)
	if !ok || len(rest) < len(statsHourFormat)+1 || rest[len(statsHourFormat)] != '/' {
		return time.Time{}, false
	}
	h, err := time.Parse(statsHourFormat, rest[:len(statsHourFormat)])
	return h, err == nil
}

// ParseStatsDayKey returns the day of a day's rollup key, or false for
// any other key.
func ParseStatsDayKey(key string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(key, StatsDaysPrefix)
	if !ok {
		return time.Time{}, false
	}
	name, ok := strings.CutSuffix(rest, ".json")
	if !ok || len(name) != len(statsDayFormat) {
		return time.Time{}, false
	}
	d, err := time.Parse(statsDayFormat, name)
	return d, err == nil
}
