// Package testlog is a log sink for tests: a buffer that the goroutines of
// the code under test may write while the test reads it.
package testlog

import (
	"strings"
	"sync"
)

// Buffer collects log lines, safely for concurrent use. The zero value is
// ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Count counts the non-overlapping occurrences of substr written so far.
func (b *Buffer) Count(substr string) int {
	return strings.Count(b.String(), substr)
}
