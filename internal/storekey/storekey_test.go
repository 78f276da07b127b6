package storekey_test

import (
	"errors"
	"path"
	"strings"
	"testing"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/internal/storekey"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidateKey(t *testing.T) {
	t.Parallel()
	valid := []string{
		"a", "agents/archivist-violin/runs/run_2026-02-14_080000_abc123/status.json",
		"audit/20260224/x.json", "with space", "ключ", "..a", "a..", "a/.b", "x:y",
		strings.Repeat("s", storekey.MaxSegmentLen),
	}
	for _, k := range valid {
		if err := storekey.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
		if err := storekey.ValidatePrefix(k); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v, want nil (a key is a prefix)", k, err)
		}
	}
	for _, k := range storekey.InvalidKeys() {
		err := storekey.ValidateKey(k)
		var ke *storekey.KeyError
		if !errors.Is(err, storekey.ErrInvalidKey) || !errors.As(err, &ke) || ke.Reason == "" {
			t.Errorf("ValidateKey(%q) = %v, want a *KeyError", k, err)
		}
	}
}

func TestValidatePrefix(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "a/", "a", "agents/x/runs/", "a/b", "a/.", "a/.."} {
		if err := storekey.ValidatePrefix(p); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"/", "/a", "a//", "../", "a/../b", "./", "a\x00", "\xff", ".cnv/", strings.Repeat("p", storekey.MaxKeyLen+1)} {
		if err := storekey.ValidatePrefix(p); !errors.Is(err, storekey.ErrInvalidKey) {
			t.Errorf("ValidatePrefix(%q) = %v, want ErrInvalidKey", p, err)
		}
	}
}

func TestKeyErrorMessage(t *testing.T) {
	t.Parallel()
	err := storekey.ValidateKey("a/../b\n")
	if got := err.Error(); !strings.Contains(got, `"a/../b\n"`) {
		t.Errorf("message %q does not quote the key", got)
	}
}

// FuzzValidateKey: whatever ValidateKey accepts is a clean relative path
// that cannot leave a directory, is valid UTF-8 without control characters,
// fits the length limits, and is also a valid List prefix.
func FuzzValidateKey(f *testing.F) {
	for _, s := range append([]string{"a/b", "agents/x/runs/r/status.json", "..", "a/./b", "é/ü"}, storekey.InvalidKeys()...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if storekey.ValidateKey(key) != nil {
			return
		}
		if path.Clean(key) != key || path.IsAbs(key) || key == "." || key == ".." ||
			strings.HasPrefix(key, "../") || !utf8.ValidString(key) || len(key) > storekey.MaxKeyLen {
			t.Fatalf("accepted unsafe key %q", key)
		}
		for _, r := range key {
			if r < 0x20 || r == 0x7f || r == '\\' {
				t.Fatalf("accepted key with %U: %q", r, key)
			}
		}
		for seg := range strings.SplitSeq(key, "/") {
			if seg == "" || seg == "." || seg == ".." || len(seg) > storekey.MaxSegmentLen || strings.HasPrefix(seg, ".cnv") {
				t.Fatalf("accepted bad segment %q in %q", seg, key)
			}
		}
		if err := storekey.ValidatePrefix(key); err != nil {
			t.Fatalf("valid key %q is not a valid prefix: %v", key, err)
		}
	})
}
