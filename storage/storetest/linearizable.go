package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/runconveyor/conveyor/storage"
)

// opKind is one kind of operation in a recorded history.
type opKind uint8

const (
	opGet opKind = iota
	opPut
	opCreate
	opCAS
	opDelete
)

func (k opKind) String() string {
	return [...]string{"get", "put", "create", "cas", "delete"}[k]
}

// result is how an operation ended.
type result uint8

const (
	resOK result = iota
	resNotFound
	resPrecondition
)

// regInput is the input of one operation on the single key.
type regInput struct {
	Op     opKind
	Value  string          // put, create, cas
	Expect storage.Version // cas
	// Commit: the write (put, create, cas, delete) is made by a Commit
	// that also writes a key of its own, unconditionally: to the key
	// under test it is the same write, so the model is the same.
	Commit bool
}

// regOutput is what the store answered.
type regOutput struct {
	Result  result
	Value   string          // get
	Version storage.Version // get, and every successful write
}

// regState is the sequential specification's state of one key.
type regState struct {
	Exists  bool
	Value   string
	Version storage.Version
}

// registerModel is the sequential specification of one key of a Store, for
// porcupine: Get sees the latest write, writes with a failed condition change
// nothing, and every successful write gets a version other than the one it
// replaced. The suite's histories never write the bytes a key already
// holds (every written value is unique), so adapters with ContentVersions
// meet this model too.
var registerModel = porcupine.Model{
	Init: func() any { return regState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(regState), input.(regInput), output.(regOutput)
		write := func(cond bool) (bool, any) {
			if !cond {
				return out.Result == resPrecondition, st
			}
			if out.Result != resOK || (st.Exists && out.Version == st.Version) {
				return false, st
			}
			return true, regState{Exists: true, Value: in.Value, Version: out.Version}
		}
		switch in.Op {
		case opGet:
			if !st.Exists {
				return out.Result == resNotFound, st
			}
			return out.Result == resOK && out.Value == st.Value && out.Version == st.Version, st
		case opPut:
			return write(true)
		case opCreate:
			return write(!st.Exists)
		case opCAS:
			return write(st.Exists && st.Version == in.Expect)
		case opDelete:
			return out.Result == resOK, regState{}
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		op := in.Op.String()
		if in.Commit {
			op = "commit " + op
		}
		return fmt.Sprintf("%s(%q, expect %q) -> %d %q %q", op, in.Value, in.Expect, out.Result, out.Value, out.Version)
	},
}

// checkRegisterHistory reports whether ops, recorded on one key, are
// linearizable against registerModel.
func checkRegisterHistory(ops []porcupine.Operation, timeout time.Duration) porcupine.CheckResult {
	return porcupine.CheckOperationsTimeout(registerModel, ops, timeout)
}

// testLinearizable records a history of concurrent Get, Put, create-only,
// compare-and-swap and Delete calls on one key and checks it with porcupine.
// On a store that can commit, half the writes are made by Commits that
// also write another key: a commit's write of the key is held to the same
// model. (Whether a commit's writes of several keys land together is not
// this single-key model's to say: the AtomicVisibility and AllOrNothing
// checks of Commit say it.)
func testLinearizable(t *testing.T, s *storage.Store) {
	const clients, opsPerClient = 4, 40
	const key = "linearizable/register"
	ctx := t.Context()
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	commits := s.CanCommit()

	var mu sync.Mutex
	var history []porcupine.Operation
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), uint64(start.UnixNano())))
			var lastSeen storage.Version = "never-issued"
			for i := range opsPerClient {
				in := regInput{Value: fmt.Sprintf("c%d-%d", c, i)}
				switch p := rng.IntN(100); {
				case p < 35:
					in.Op = opGet
				case p < 45:
					in.Op = opPut
				case p < 55:
					in.Op = opCreate
				case p < 90:
					in.Op = opCAS
					in.Expect = lastSeen
				default:
					in.Op = opDelete
				}
				in.Commit = in.Op != opGet && commits && rng.IntN(2) == 0
				call := now()
				out, err := applyOp(ctx, s, key, in)
				ret := now()
				if err != nil {
					errc <- fmt.Errorf("%s: %w", in.Op, err)
					return
				}
				if out.Version != "" {
					lastSeen = out.Version
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if err := checkHistory(history, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// checkHistory is the suite's verdict on a history recorded on one key: nil
// only when porcupine proved it linearizable. A check that timed out
// (porcupine.Unknown) proved nothing, so it fails too: a suite that passes
// on "don't know" would pass an adapter whose histories are too tangled to
// check.
func checkHistory(ops []porcupine.Operation, timeout time.Duration) error {
	switch res := checkRegisterHistory(ops, timeout); res {
	case porcupine.Ok:
		return nil
	case porcupine.Illegal:
		return fmt.Errorf("history of %d operations on one key is not linearizable", len(ops))
	default:
		return fmt.Errorf("linearizability of %d operations on one key not proven: the check gave %s (timed out after %s)", len(ops), res, timeout)
	}
}

func applyOp(ctx context.Context, s *storage.Store, key string, in regInput) (regOutput, error) {
	classify := func(err error) (result, error) {
		switch {
		case err == nil:
			return resOK, nil
		case errors.Is(err, storage.ErrNotFound):
			return resNotFound, nil
		case errors.Is(err, storage.ErrPreconditionFailed):
			return resPrecondition, nil
		}
		return 0, err
	}
	var out regOutput
	var err error
	if in.Commit {
		out.Version, err = commitOp(ctx, s, key, in)
		out.Result, err = classify(err)
		return out, err
	}
	switch in.Op {
	case opGet:
		var b []byte
		b, out.Version, err = s.Get(ctx, key)
		out.Value = string(b)
	case opPut:
		out.Version, err = s.Put(ctx, key, []byte(in.Value), storage.Condition{})
	case opCreate:
		out.Version, err = s.Put(ctx, key, []byte(in.Value), storage.IfNotExists())
	case opCAS:
		out.Version, err = s.Put(ctx, key, []byte(in.Value), storage.IfMatch(in.Expect))
	case opDelete:
		err = s.Delete(ctx, key, storage.Condition{})
	}
	out.Result, err = classify(err)
	return out, err
}

// commitOp makes the write in on key by a Commit that also writes a key of
// its own, and returns the write's version.
func commitOp(ctx context.Context, s *storage.Store, key string, in regInput) (storage.Version, error) {
	w := storage.Write{Key: key, Value: []byte(in.Value)}
	switch in.Op {
	case opCreate:
		w.Cond = storage.IfNotExists()
	case opCAS:
		w.Cond = storage.IfMatch(in.Expect)
	case opDelete:
		w.Value, w.Delete = nil, true
	}
	vs, err := s.Commit(ctx, []storage.Write{w, {Key: key + "-side/" + in.Value, Value: []byte(in.Value)}})
	if err != nil {
		return "", err
	}
	return vs[0], nil
}
