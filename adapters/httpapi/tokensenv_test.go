package httpapi_test

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestLoadTokensEnv: LoadTokens adds the tokens of TokensEnv to the file's
// (the environment's actor wins for a token in both), reads the
// environment alone for no path, and names the variable of a bad value.
func TestLoadTokensEnv(t *testing.T) {
	// Not parallel: the tokens are read from the environment.
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("abc admin\nboth gateway\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, env string
		want            map[string]lifecycle.Actor
		wantErr         string
	}{
		{name: "neither", want: map[string]lifecycle.Actor{}},
		{name: "file", path: path, want: map[string]lifecycle.Actor{"abc": lifecycle.ActorAdmin, "both": lifecycle.ActorGateway}},
		{name: "env", env: "n=nlm-backend", want: map[string]lifecycle.Actor{"n": lifecycle.ActorNLMBackend}},
		{name: "both", path: path, env: "n=nlm-backend,both=admin",
			want: map[string]lifecycle.Actor{"abc": lifecycle.ActorAdmin, "both": lifecycle.ActorAdmin, "n": lifecycle.ActorNLMBackend}},
		{name: "bad env", path: path, env: "n", wantErr: httpapi.TokensEnv},
		{name: "missing file", path: path + ".none", wantErr: "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(httpapi.TokensEnv, tt.env)
			got, err := httpapi.LoadTokens(tt.path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("LoadTokens = %v, %v; want an error saying %q", got, err, tt.wantErr)
				}
				if tt.env != "" && !errors.Is(err, httpapi.ErrInvalidConfig) {
					t.Errorf("LoadTokens = %v, want ErrInvalidConfig", err)
				}
				return
			}
			if err != nil || !maps.Equal(got, tt.want) {
				t.Fatalf("LoadTokens = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}
