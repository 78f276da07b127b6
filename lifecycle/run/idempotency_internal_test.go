package run

import (
	"slices"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/internal/idemrecord"
)

func FuzzParseIdempotencyKey(f *testing.F) {
	for _, k := range []string{"github:12345678-1234", "api:cli:req", "slack:T1:1.2", "scheduler:daily:2024-12-19T00:00:00Z", "x", "api:", ":"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		k, err := parseIdempotencyKey(key)
		if err != nil {
			return
		}
		if len(key) > 512 || strings.ContainsAny(key, " \t\n\x00") {
			t.Fatalf("accepted %q", key)
		}
		for _, p := range k.Parts {
			if p == "" {
				t.Fatalf("empty part in %q", key)
			}
		}
		if !slices.Contains([]string{idemrecord.SourceGitHub, idemrecord.SourceAPI, idemrecord.SourceSlack, idemrecord.SourceScheduler}, k.Source) {
			t.Fatalf("source %q for %q", k.Source, key)
		}
	})
}
