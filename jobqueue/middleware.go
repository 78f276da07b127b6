package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/deadline"
	"github.com/runconveyor/conveyor/lifecycle"
)

// inserts runs Config.InsertMiddleware around the queue's own insert
// (admission): Enqueue and EnqueueMany come through it, and so every call
// built on them.
type inserts struct {
	admit *admission
	mw    []func(next InsertFunc) InsertFunc // Config.InsertMiddleware
}

// one is Queue.Enqueue: a batch of one through the middleware, whose
// innermost call enqueues it alone (or, if a middleware made it several,
// as EnqueueMany would).
func (q *inserts) one(ctx context.Context, actor lifecycle.Actor, n NewJob) (lifecycle.Job, error) {
	if len(q.mw) == 0 {
		return q.admit.enqueue(ctx, actor, n)
	}
	jobs, err := q.run(ctx, actor, []NewJob{n}, func(ctx context.Context, jobs []NewJob) ([]lifecycle.Job, error) {
		if len(jobs) != 1 {
			return q.admit.enqueueMany(ctx, actor, jobs)
		}
		j, err := q.admit.enqueue(ctx, actor, jobs[0])
		if err != nil {
			return nil, err
		}
		return []lifecycle.Job{j}, nil
	})
	switch {
	case err != nil && len(jobs) == 0:
		return lifecycle.Job{}, err
	case len(jobs) == 0:
		return lifecycle.Job{}, errNoJobBack
	}
	return jobs[0], err
}

// errNoJobBack: the insert middleware returned no job and no error for
// an Enqueue, which returns one.
var errNoJobBack = errors.New("jobqueue: the insert middleware returned no job and no error")

// many is Queue.EnqueueMany through the middleware.
func (q *inserts) many(ctx context.Context, actor lifecycle.Actor, jobs []NewJob) ([]lifecycle.Job, error) {
	if len(q.mw) == 0 || len(jobs) == 0 {
		return q.admit.enqueueMany(ctx, actor, jobs)
	}
	return q.run(ctx, actor, jobs, func(ctx context.Context, jobs []NewJob) ([]lifecycle.Job, error) {
		return q.admit.enqueueMany(ctx, actor, jobs)
	})
}

// run calls the middleware around inner, once the actor may create jobs
// (a middleware sees only inserts the authority matrix allows). A panic in
// a middleware is returned as an error, as a handler's is.
func (q *inserts) run(ctx context.Context, actor lifecycle.Actor, jobs []NewJob, inner InsertFunc) (out []lifecycle.Job, err error) {
	if err := authority.Check(actor, authority.Jobs, authority.Create, authority.Scope{}); err != nil {
		return nil, err
	}
	f := inner
	for i := len(q.mw) - 1; i >= 0; i-- {
		f = q.mw[i](f)
	}
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, &deadline.PanicError{Unit: "insert middleware", Value: p, Stack: debug.Stack()}
		}
	}()
	// The middleware gets its own copy: what it changes is not the caller's.
	return f(ctx, append([]NewJob(nil), jobs...))
}

// wrapWork wraps h, the Handler of a job of a user type, in
// Config.WorkMiddleware, first outermost.
func wrapWork(h Handler, mw []func(next Handler) Handler) Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
		if h == nil {
			return HandlerFunc(func(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) {
				return lifecycle.JobOutput{}, fmt.Errorf("jobqueue: Config.WorkMiddleware[%d] returned no Handler", i)
			})
		}
	}
	return h
}
