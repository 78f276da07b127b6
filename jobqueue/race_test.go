//go:build race

package jobqueue

// raceEnabled: the race detector makes sync.Pool drop buffers at random,
// so allocation budgets that count on reuse are not checked under it.
const raceEnabled = true
