// Package paging reads a page of an index for every list the engines and
// the HTTP server serve: the limit and cursor checks (Limit, Cursor, a
// refusal as *Error) and the merged, budgeted read of the index (Read).
package paging
