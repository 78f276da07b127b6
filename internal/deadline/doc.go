// Package deadline runs units of user code (a step, a job handler, an NLM
// stage) under deadlines for every engine. At the deadline the caller gets
// an *OverrunError whether or not the code returns; the goroutine left
// behind is counted and logged, its result is discarded, and shutdown
// waits for such goroutines only as long as its context allows.
package deadline
