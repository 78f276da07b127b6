package httpapi_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/lifecycle"
)

func TestParseTokens(t *testing.T) {
	t.Parallel()
	got, err := httpapi.ParseTokens(" tok1=gateway, tok2=admin,tok3=owner,,tok4=memory-backend ")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]lifecycle.Actor{"tok1": "gateway", "tok2": "admin", "tok3": "gateway", "tok4": "memory-backend"}
	if len(got) != len(want) {
		t.Fatalf("ParseTokens = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("token %s: %s, want %s", k, got[k], v)
		}
	}
	for _, bad := range []string{"tok1", "tok1=wizard", "=admin", "tok1=admin,tok1=gateway"} {
		if _, err := httpapi.ParseTokens(bad); !errors.Is(err, httpapi.ErrInvalidConfig) {
			t.Errorf("ParseTokens(%q) = %v, want ErrInvalidConfig", bad, err)
		}
	}
}

func TestLoadTokens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	if err := os.WriteFile(path, []byte("# operators\nabc admin\n\n  def owner  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := httpapi.LoadTokens(path)
	if err != nil || len(got) != 2 || got["abc"] != lifecycle.ActorAdmin || got["def"] != lifecycle.ActorGateway {
		t.Fatalf("LoadTokens = %v, %v", got, err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("abc admin extra\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := httpapi.LoadTokens(bad); !errors.Is(err, httpapi.ErrInvalidConfig) {
		t.Errorf("LoadTokens(bad) = %v, want ErrInvalidConfig", err)
	}
}

func TestCheckListen(t *testing.T) {
	t.Parallel()
	toks := map[string]lifecycle.Actor{"t": lifecycle.ActorAdmin}
	tests := []struct {
		addr   string
		tokens map[string]lifecycle.Actor
		ok     bool
	}{
		{"127.0.0.1:8080", nil, true},
		{"[::1]:8080", nil, true},
		{"localhost:8080", nil, true},
		{"0.0.0.0:8080", nil, false},
		{":8080", nil, false},
		{"10.1.2.3:8080", nil, false},
		{"0.0.0.0:8080", toks, true},
		{":8080", toks, true},
	}
	for _, tt := range tests {
		err := httpapi.CheckListen(tt.addr, tt.tokens)
		if (err == nil) != tt.ok {
			t.Errorf("CheckListen(%q, %d tokens) = %v, want ok %v", tt.addr, len(tt.tokens), err, tt.ok)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	if _, err := httpapi.New(httpapi.Config{}); !errors.Is(err, httpapi.ErrInvalidConfig) {
		t.Errorf("New without Runner = %v", err)
	}
}
