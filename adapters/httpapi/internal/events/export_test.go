package events

import "context"

// OnPoll makes f call fn after each poll, once the next one is scheduled,
// so a test on a fake clock knows when to advance it.
func OnPoll(f *Feed, fn func()) { f.polled = fn }

// EncodeFrame exposes the wire encoder to the tests.
func EncodeFrame(e Event) []byte { return appendFrame(nil, e) }

// OnReplayWait makes f call fn when a replay waits for its turn to read a
// page, so a test sees the cap on concurrent replays hold one back.
func OnReplayWait(f *Feed, fn func()) { f.replayWaits = fn }

// PollOnce runs one poll of f, without Run, from a cursor at the clock's
// now on the first call: a benchmark's operation.
func PollOnce(ctx context.Context, f *Feed) {
	f.mu.Lock()
	if f.cursor.IsZero() {
		f.cursor = f.clock.Now()
	}
	f.mu.Unlock()
	f.poll(ctx)
}
