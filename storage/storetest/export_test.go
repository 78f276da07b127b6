package storetest

import "github.com/runconveyor/conveyor/storage"

// CheckHistoryForTest is the verdict testLinearizable gives a history.
var CheckHistoryForTest = checkHistory

// RegInputForTest builds a history input for the model's own tests.
func RegInputForTest(op, value, expect string) any {
	k := map[string]opKind{"get": opGet, "put": opPut, "create": opCreate, "cas": opCAS, "delete": opDelete}[op]
	return regInput{Op: k, Value: value, Expect: storage.Version(expect)}
}

// RegOutputForTest builds a history output for the model's own tests.
func RegOutputForTest(res, value, version string) any {
	r := map[string]result{"ok": resOK, "nf": resNotFound, "pf": resPrecondition}[res]
	return regOutput{Result: r, Value: value, Version: storage.Version(version)}
}

// ListAfterMismatchesForTest is what the ListAfter subtest reports of a store.
var ListAfterMismatchesForTest = listAfterMismatches

// ConditionalDeleteRacesForTest is what the ConditionalDeleteIsAtomic check reports of a store.
var ConditionalDeleteRacesForTest = conditionalDeleteRaces

// CheckRegisterHistoryForTest is whether a history of one key is
// linearizable against the register model.
var CheckRegisterHistoryForTest = checkRegisterHistory

// CommitProblemsForTest is what the Commit checks that report problems
// find on a store, by check name.
var CommitProblemsForTest = commitProblems
