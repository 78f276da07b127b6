package jobqueue

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/jsonenc"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/jsoncheck"
	"github.com/runconveyor/conveyor/lifecycle"
)

// fullJobDoc has every field of a job record set, in a zone other than
// UTC, with strings that need escaping.
func fullJobDoc() *jobDoc {
	at := time.Date(2026, 2, 24, 10, 0, 0, 123456789, time.FixedZone("X", 5*3600+1800))
	due := at.Add(time.Minute)
	msg := "boom <b>&</b> \"quoted\"\n\t\x01\u2028\xff"
	return &jobDoc{
		Meta: lifecycle.Meta{Version: 7},
		Job: lifecycle.Job{
			JobID: "job-1", RunID: "run_2026-02-24_abc123", JobType: lifecycle.JobBrief, AgentSlug: "agent-1",
			Status: lifecycle.JobRetryBackoff, Attempt: 2, MaxAttempts: 5,
			Payload:  json.RawMessage(`{ "a" : "<x>" }`),
			Context:  lifecycle.JobContext{MemorySnapshotURL: "s3://b/k?x=1&y=2", EntityRefs: []string{"e1", "é2"}},
			Callback: "https://example.com/cb?a=1&b=2", CreatedAt: at, UpdatedAt: at.Add(time.Second),
			ArtifactID: "art-1", Error: &msg, Machine: lifecycle.JobMachineGeneral, TenantID: "acme", CancelRequestedAt: &due, CancelRequestedBy: lifecycle.ActorAdmin,
			ProjectID: "p1", ErrorCode: "HANDLER_ERROR",
			FailedStep: lifecycle.JobNotebookLMCall, QueuedAt: &at, NextAttemptAt: &due, Priority: 8, ScheduledAt: &due,
			ReadyKey: "queue/lanes/agent-1/x", Lease: &lifecycle.Lease{Owner: "w1", Epoch: 3, ExpiresAt: due, Slot: 2},
			Trail: []lifecycle.JobMove{
				{From: lifecycle.JobQueued, To: lifecycle.JobContextAssembly, Event: "pick_up", Actor: lifecycle.ActorOrchestration, At: at,
					ErrorCode: "HANDLER_ERROR", Error: "boom"},
				{From: lifecycle.JobNotebookLMCall, To: lifecycle.JobRetryBackoff, Event: "fail", Actor: lifecycle.ActorOrchestration, At: due,
					ErrorCode: "TIMEOUT", Error: "step \"x\" timed out"},
			},
			TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Duplicate: true,
		},
		AuditArtifact: "art-1",
		RanEpoch:      3,
	}
}

// TestJobDocJSON: the hand-written encoder of the job record writes what
// json.Marshal writes, on a record with every field set (a field added to
// the record fails here until AppendJSON writes it), on one with none set,
// and on the values whose encoding has special cases.
func TestJobDocJSON(t *testing.T) {
	t.Parallel()
	full := fullJobDoc()
	if zero := jsoncheck.ZeroFields(full); len(zero) > 0 {
		t.Fatalf("fullJobDoc leaves fields unset, so their encoding goes untested: %v", zero)
	}
	cases := map[string]func(d *jobDoc){
		"full":              func(*jobDoc) {},
		"empty":             func(d *jobDoc) { *d = jobDoc{} },
		"compact payload":   func(d *jobDoc) { d.Payload = json.RawMessage(`{"a":[1,2.5,null,true]}`) },
		"invalid payload":   func(d *jobDoc) { d.Payload = json.RawMessage(`{"a":`) },
		"only refs":         func(d *jobDoc) { d.Context.MemorySnapshotURL = "" },
		"only url":          func(d *jobDoc) { d.Context.EntityRefs = []string{} },
		"move without time": func(d *jobDoc) { d.Trail[0].At = time.Time{} },
		"utc whole seconds": func(d *jobDoc) {
			d.CreatedAt = time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)
			d.UpdatedAt = time.Date(2026, 2, 24, 10, 0, 0, 1000, time.Local)
		},
		"year 10000":       func(d *jobDoc) { d.UpdatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
		"negative year":    func(d *jobDoc) { d.Lease.ExpiresAt = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC) },
		"offset of a day":  func(d *jobDoc) { d.CreatedAt = d.CreatedAt.In(time.FixedZone("Y", 24*3600)) },
		"negative offset":  func(d *jobDoc) { d.CreatedAt = d.CreatedAt.In(time.FixedZone("Z", -(23*3600 + 59*60))) },
		"nil error, epoch": func(d *jobDoc) { d.Error, d.RanEpoch, d.Version = nil, -1, -5 },
	}
	for name, mod := range cases {
		d := fullJobDoc()
		mod(d)
		jsoncheck.Same(t, name, d)
	}
}

// FuzzJobDocJSON: the same with strings from the fuzzer in the fields
// that take anything (the error, the callback, a reference, the payload).
func FuzzJobDocJSON(f *testing.F) {
	f.Add("plain", "https://x/?a=1&b=<2>", "ref", []byte(`{"k":"v"}`))
	f.Add("\xff\xfe\u2029\x00", "\"\\", "\u2028", []byte(" [ 1 , 2 ] "))
	f.Fuzz(func(t *testing.T, msg, callback, ref string, payload []byte) {
		d := fullJobDoc()
		d.Error, d.Callback, d.Context.EntityRefs, d.Payload = &msg, callback, []string{ref, msg}, payload
		jsoncheck.Same(t, "fuzz", d)
	})
}

// TestJobDocJSONAllocs: encoding a job record allocates its buffer only.
func TestJobDocJSONAllocs(t *testing.T) {
	// Not parallel: AllocsPerRun counts every goroutine's allocations.
	if raceEnabled {
		t.Skip("sync.Pool drops buffers at random under the race detector")
	}
	d := fullJobDoc()
	d.Payload = json.RawMessage(`{"a":1}`)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := jsonenc.Marshal(d); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Fatalf("%v allocations to encode a job record, want 1", n)
	}
}

// BenchmarkJobDocJSON: the job record's encoding, hand-written and by
// reflection.
func BenchmarkJobDocJSON(b *testing.B) {
	d := fullJobDoc()
	d.Payload = json.RawMessage(`{"a":1}`)
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jsonenc.Marshal(d); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(d); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzJobDocDecode: DecodeJSON gives what json.Unmarshal gives (the same
// document, or an error where it errs) on job records as AppendJSON and
// json.Marshal write them, reordered, spaced, with unknown, repeated or
// differently cased names, nulls, escapes and broken syntax.
func FuzzJobDocDecode(f *testing.F) {
	full, _ := jsonenc.Marshal(fullJobDoc())
	f.Add(full)
	empty, _ := json.Marshal(&jobDoc{})
	f.Add(empty)
	for _, s := range []string{
		`{"status":"QUEUED","version":1,"job_id":"a","error":null,"payload":null}`,
		`{ "job_id" : "a\u0026b" , "Status":"QUEUED", "x": 1 }`,
		`{"job_id":"a","job_id":"b"}`,
		`{"lease":{"owner":"w","epoch":1,"expires_at":"2026-02-24T10:00:00Z"},"lease":{"epoch":2}}`,
		`{"attempt":1.0}`, `{"attempt":1e3}`, `{"attempt":-0}`, `{"attempt":01}`, `{"version":123456789012345678901}`,
		`{"trail":[]}`, `{"trail":null}`, `{"trail":[{"from":"A","to":"B","at":"2026-02-24T10:00:00.5+01:00"}]}`,
		`{"context":{"entity_refs":[],"memory_snapshot_url":"\ud800"}}`, `{"queued_at":null}`, `{"error":"\"x\"\n"}`,
		`{"payload":[1,{"a":"]"}] ,"job_id":"é"}`, `{"payload":{"a":}}`, `{"created_at":"2026-02-24T10:00:00Z"} x`,
		"{\"job_id\":\"a\x01\"}", `{"job_id":"a"`, `[]`, ``, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast, slow jobDoc
		ferr := fast.DecodeJSON(b)
		serr := json.Unmarshal(b, &slow)
		if (ferr == nil) != (serr == nil) {
			t.Fatalf("%s: DecodeJSON error %v, json.Unmarshal error %v", b, ferr, serr)
		}
		if serr == nil && !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%s:\nDecodeJSON     %+v\njson.Unmarshal %+v", b, fast, slow)
		}
		// Read whole by the fast reader, the record has no member for
		// records.Keep to keep: Decode skips the look on that word.
		var again, kept jobDoc
		if known, _ := again.DecodeKnown(b); known {
			if err := records.Keep("k", b, "", &kept); err != nil || kept.Unknown != "" {
				t.Fatalf("%s: read whole, yet Keep keeps %s (%v)", b, kept.Unknown, err)
			}
		}
	})
}

// plainJobDoc is fullJobDoc as a Worker writes it: times in UTC, strings
// that need no escape.
func plainJobDoc() *jobDoc {
	d := fullJobDoc()
	d.Error, d.Payload, d.Callback, d.Context.MemorySnapshotURL = nil, json.RawMessage(`{"a":1}`), "https://example.com/cb", "s3://b/k"
	d.Context.EntityRefs = []string{"e1", "e2"}
	utc := func(t *time.Time) { *t = t.UTC() }
	utc(&d.CreatedAt)
	utc(&d.UpdatedAt)
	utc(d.QueuedAt)
	d.NextAttemptAt = new(d.NextAttemptAt.UTC())
	d.CancelRequestedAt, d.CancelRequestedBy = nil, "" // asked of few jobs
	d.Duplicate = false                                // an insert's answer only, never stored
	d.ScheduledAt = new(d.ScheduledAt.UTC())
	utc(&d.Lease.ExpiresAt)
	for i := range d.Trail {
		utc(&d.Trail[i].At)
	}
	return d
}

// TestJobDocDecodeAllocs: reading a job record as AppendJSON writes it
// allocates its strings and slices, far fewer times than json.Unmarshal.
func TestJobDocDecodeAllocs(t *testing.T) {
	// Not parallel: AllocsPerRun counts every goroutine's allocations.
	b, err := jsonenc.Marshal(plainJobDoc())
	if err != nil {
		t.Fatal(err)
	}
	fast := testing.AllocsPerRun(100, func() {
		var got jobDoc
		if err := got.DecodeJSON(b); err != nil {
			t.Fatal(err)
		}
	})
	slow := testing.AllocsPerRun(100, func() {
		var got jobDoc
		_ = json.Unmarshal(b, &got)
	})
	t.Logf("DecodeJSON %v allocations, json.Unmarshal %v", fast, slow)
	// 25 -> 31: the fixture's moves carry a failed attempt's error code
	// and message, a string (an allocation) each. 31 -> 32: its
	// scheduled_at, a *time.Time (a job to run at once has none). 32 ->
	// 33: its tenant_id, a string (a default tenant's job has none).
	if fast > 33 {
		t.Fatalf("DecodeJSON allocates %v times, budget 33", fast)
	}
}

// BenchmarkJobDocDecode: a job record's decoding, hand-written and by
// reflection.
func BenchmarkJobDocDecode(b *testing.B) {
	enc, err := jsonenc.Marshal(plainJobDoc())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("DecodeJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got jobDoc
			if err := got.DecodeJSON(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got jobDoc
			if err := json.Unmarshal(enc, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The engines' read: DecodeJSON, and no look for unknown members when
	// it read the record whole.
	b.Run("records.Decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got jobDoc
			if err := records.Decode("k", enc, "", &got); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The look for unknown members that the above spares.
	b.Run("records.Keep", func(b *testing.B) {
		b.ReportAllocs()
		var got jobDoc
		for b.Loop() {
			if err := records.Keep("k", enc, "", &got); err != nil || got.Unknown != "" {
				b.Fatal(err)
			}
		}
	})
}

// TestLockAndLaneJSON: the hand-written encoders of the agent lock and the
// lane entry write what json.Marshal writes.
func TestLockAndLaneJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 2, 24, 10, 0, 0, 5, time.UTC)
	lock := &agentLock{Meta: lifecycle.Meta{Version: 3}, Agent: "a<1>", Owner: "w&1", Epoch: 4, JobID: "j\u2028", ExpiresAt: at}
	lane := &laneEntry{JobID: "job-1", ReadyAt: at}
	for _, v := range []any{lock, lane} {
		if zero := jsoncheck.ZeroFields(v); len(zero) > 0 {
			t.Fatalf("fields left unset, so their encoding goes untested: %v", zero)
		}
	}
	jsoncheck.Same(t, "lock", lock)
	jsoncheck.Same(t, "free lock", &agentLock{Agent: "a"})
	jsoncheck.Same(t, "lane", lane)
	jsoncheck.Same(t, "lane at year 10000", &laneEntry{ReadyAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
}

// TestLockEncodeKeepsUnknown: the bytes a lock is written as are
// records.Encode's, the members a newer release added included.
func TestLockEncodeKeepsUnknown(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", `"lane_class":"gold"`, `"a":1,"b":{"c":[true]}`} {
		l := &agentLock{Meta: lifecycle.Meta{Version: 2, Unknown: u}, Agent: "a", Epoch: 3}
		got, err := l.encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		want, err := records.Encode(l)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("unknown %q: encode = %s, records.Encode = %s", u, got, want)
		}
		var back agentLock
		if err := records.Decode("k", got, "", &back); err != nil || back.Unknown != u {
			t.Errorf("unknown %q: read back as %q (%v)", u, back.Unknown, err)
		}
	}
}
