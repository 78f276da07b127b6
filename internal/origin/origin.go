// Package origin marks a store write, and a watch, with the writer they
// serve: a watch marked with an origin may leave out the changes of writes
// marked with the same one, which that writer applies to its own view as
// it makes them (the job queue's lanes). A driver that ignores the marks
// signals every change, as the Store's contract allows (spurious signals),
// so the mark is an economy, never a promise a caller may rely on.
package origin

import "context"

// Origin is one writer within a process (a job queue). Its pointer is the
// identity: two Queues on one Store have two, so neither's watch leaves
// out the other's writes.
type Origin struct{ _ byte } // not empty: distinct allocations, distinct pointers

// New returns a new origin.
func New() *Origin { return new(Origin) }

type key struct{}

// With returns ctx marked with o: a write made under it is o's, and a
// watch opened under it may leave out o's writes.
func With(ctx context.Context, o *Origin) context.Context {
	return context.WithValue(ctx, key{}, o)
}

// Of returns the origin ctx is marked with, or nil.
func Of(ctx context.Context) *Origin {
	o, _ := ctx.Value(key{}).(*Origin)
	return o
}
