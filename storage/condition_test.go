package storage_test

import (
	"testing"

	"github.com/runconveyor/conveyor/storage"
)

func TestConditionHolds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cond    storage.Condition
		current storage.Version
		want    bool
	}{
		{storage.Condition{}, "", true},
		{storage.Condition{}, "v1", true},
		{storage.IfNotExists(), "", true},
		{storage.IfNotExists(), "v1", false},
		{storage.IfMatch("v1"), "v1", true},
		{storage.IfMatch("v1"), "v2", false},
		{storage.IfMatch("v1"), "", false}, // a missing key fails If-Match
	}
	for _, tt := range tests {
		if got := tt.cond.Holds(tt.current); got != tt.want {
			t.Errorf("%s.Holds(%q) = %v, want %v", tt.cond, tt.current, got, tt.want)
		}
	}
}
