package run

import (
	"sync"
)

// executions are the runs this runner executes now, by run id: the one
// place that knows whether a run is this runner's, so a stale copy of a
// run is never started twice and a cancel reaches the steps at once.
type executions struct {
	inbox *inbox

	mu        sync.Mutex
	executing map[string]*execution
	// rehand holds runs handed over (a Deliver, an Approve) while this
	// runner was still ending their previous execution (parking them): they
	// are handed again the moment that execution ends, not at the next poll.
	rehand map[string]candidate
}

func newExecutions(in *inbox) *executions {
	return &executions{inbox: in, executing: map[string]*execution{}, rehand: map[string]candidate{}}
}

func (ex *executions) isExecuting(runID string) bool {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	_, ok := ex.executing[runID]
	return ok
}

// register makes x the execution of runID, unless one is registered
// already (a stale copy of a run this runner executes): then false.
func (ex *executions) register(runID string, x *execution) bool {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if _, busy := ex.executing[runID]; busy {
		return false
	}
	ex.executing[runID] = x
	return true
}

// unregister forgets the execution of runID, and hands the run over again
// if that was asked for while it executed.
func (ex *executions) unregister(runID string) {
	ex.mu.Lock()
	delete(ex.executing, runID)
	c, again := ex.rehand[runID]
	delete(ex.rehand, runID)
	ex.mu.Unlock()
	if again {
		ex.inbox.hand(c)
	}
}

// holdIfBusy keeps c, handed over (a Deliver, an Approve) while this
// runner still ends the run's last execution (it parks), to hand it again
// when that execution ends; false when the run is not executing here.
func (ex *executions) holdIfBusy(runID string, c candidate) bool {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if _, busy := ex.executing[runID]; !busy {
		return false
	}
	ex.rehand[runID] = c
	return true
}

// stop stops the execution of runID with cause, and tells whether there
// was one.
func (ex *executions) stop(runID string, cause error) bool {
	ex.mu.Lock()
	x := ex.executing[runID]
	ex.mu.Unlock()
	if x == nil {
		return false
	}
	x.stop(cause)
	return true
}
