package lifecycle_test

import (
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/internal/inputtest"
	"github.com/runconveyor/conveyor/lifecycle"
)

func TestCheckText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		s        string
		limit    int
		kind     lifecycle.TextKind
		wantCode string // "" for no error
	}{
		{"empty", "", 4, lifecycle.OneLine, ""},
		{"at the limit", "abcd", 4, lifecycle.OneLine, ""},
		{"over the limit", "abcde", 4, lifecycle.OneLine, lifecycle.CodeInputTooLarge},
		{"multi-byte at the limit", "żż", 4, lifecycle.OneLine, ""},
		{"multi-byte over the limit", "żżż", 4, lifecycle.OneLine, lifecycle.CodeInputTooLarge},
		{"invalid UTF-8", "a\xffb", 10, lifecycle.MultiLine, lifecycle.CodeInvalidInput},
		{"truncated rune", "\xc5", 10, lifecycle.MultiLine, lifecycle.CodeInvalidInput},
		{"NUL one-line", "a\x00b", 10, lifecycle.OneLine, lifecycle.CodeInvalidInput},
		{"NUL multi-line", "a\x00b", 10, lifecycle.MultiLine, lifecycle.CodeInvalidInput},
		{"newline one-line", "a\nb", 10, lifecycle.OneLine, lifecycle.CodeInvalidInput},
		{"newline multi-line", "a\r\n\tb", 10, lifecycle.MultiLine, ""},
		{"escape multi-line", "a\x1b[2Jb", 10, lifecycle.MultiLine, lifecycle.CodeInvalidInput},
		{"DEL", "a\x7f", 10, lifecycle.MultiLine, lifecycle.CodeInvalidInput},
		{"10 MB reason", strings.Repeat("x", 10<<20), lifecycle.MaxTextBytes, lifecycle.MultiLine, lifecycle.CodeInputTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := lifecycle.CheckText("field", tt.s, tt.limit, tt.kind)
			inputtest.Check(t, err, "field", tt.limit, tt.wantCode)
		})
	}
}

func TestCheckBytes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		b        string
		wantCode string
	}{
		{"empty", "", ""},
		{"JSON", `{"a":"ż\n"}`, ""},
		{"over the limit", strings.Repeat("x", 17), lifecycle.CodeInputTooLarge},
		{"invalid UTF-8", "{\"a\":\"\xff\"}", lifecycle.CodeInvalidInput},
		{"NUL", "{\"a\":\"\x00\"}", lifecycle.CodeInvalidInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inputtest.Check(t, lifecycle.CheckBytes("input", []byte(tt.b), 16), "input", 16, tt.wantCode)
		})
	}
}

func TestCheckList(t *testing.T) {
	t.Parallel()
	inputtest.Check(t, lifecycle.CheckList("tags", lifecycle.MaxListLen), "tags", lifecycle.MaxListLen, "")
	inputtest.Check(t, lifecycle.CheckList("tags", lifecycle.MaxListLen+1), "tags", lifecycle.MaxListLen, lifecycle.CodeInputTooLarge)
}

func TestCheckJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		b        string
		wantCode string
	}{
		{"empty", "", ""},
		{"plain", `{"a":"ż"}`, ""},
		{"escaped BMP", `{"a":"\u00e9\u0041"}`, ""},
		{"surrogate pair", `{"a":"\ud83d\ude00"}`, ""},
		{"surrogate pair upper case", `["\uD83D\uDE00"]`, ""},
		{"escaped backslash before u", `{"a":"\\ud800"}`, ""},
		{"surrogate-like text outside a string", `{"\\":1}`, ""},
		{"invalid UTF-8", "{\"a\":\"\xc3\x28\"}", lifecycle.CodeInvalidInput},
		{"invalid UTF-8 key", "{\"\xff\":1}", lifecycle.CodeInvalidInput},
		{"lone high surrogate", `{"a":"\ud800"}`, lifecycle.CodeInvalidInput},
		{"lone high surrogate at the end", `"\ud800`, lifecycle.CodeInvalidInput},
		{"high then not low", `{"a":"\ud800\u0041"}`, lifecycle.CodeInvalidInput},
		{"lone low surrogate", `{"a":"x\udc00"}`, lifecycle.CodeInvalidInput},
		{"lone surrogate in a key", `{"\uDBFF":1}`, lifecycle.CodeInvalidInput},
		{"two highs", `["\ud800\ud800"]`, lifecycle.CodeInvalidInput},
		{"over the limit", `"` + strings.Repeat("x", 64) + `"`, lifecycle.CodeInputTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inputtest.Check(t, lifecycle.CheckJSON("input", []byte(tt.b), 64), "input", 64, tt.wantCode)
		})
	}
}
