// Package pacing paces the loops that look in the store for work other
// processes made (the Runner's active runs, the job lanes, NLM jobs in
// flight, the event feed without a watch): one adaptive schedule, Poll,
// for them all.
package pacing
