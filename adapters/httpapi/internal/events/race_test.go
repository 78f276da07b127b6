//go:build race

package events_test

// raceEnabled: the race detector slows the replays several times, so the
// tests of many clients run fewer of them under it.
const raceEnabled = true
