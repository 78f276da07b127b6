package conveyortest_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// fakeTB records a helper's failure; Fatal ends the goroutine, as
// testing's does.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	msgs     []string
	cleanups []func()
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

// failure runs fn with a fakeTB and returns the message it failed with.
func failure(fn func(tb testing.TB)) string {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	return strings.Join(f.msgs, "\n")
}

// exampleT stands in for a test's *testing.T in these examples: it panics
// where a test would fail.
func exampleT() testing.TB { return panicTB{} }

type panicTB struct{ testing.TB }

func (panicTB) Helper()                           {}
func (panicTB) Cleanup(func())                    {}
func (panicTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
