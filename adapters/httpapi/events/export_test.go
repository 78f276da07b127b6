package events

// OnPoll makes f call fn after each poll, once the next one is scheduled,
// so a test on a fake clock knows when to advance it.
func OnPoll(f *Feed, fn func()) { f.polled = fn }

// EncodeFrame exposes the wire encoder to the tests.
func EncodeFrame(e Event) []byte { return appendFrame(nil, e) }

// OnReplayWait makes f call fn when a replay waits for its turn to read a
// page, so a test sees the cap on concurrent replays hold one back.
func OnReplayWait(f *Feed, fn func()) { f.replayWaits = fn }
