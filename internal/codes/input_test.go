package codes_test

import (
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/testkit/inputtest"
)

func TestCheckText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		s        string
		limit    int
		kind     codes.TextKind
		wantCode string // "" for no error
	}{
		{"empty", "", 4, codes.OneLine, ""},
		{"at the limit", "abcd", 4, codes.OneLine, ""},
		{"over the limit", "abcde", 4, codes.OneLine, codes.InputTooLarge},
		{"multi-byte at the limit", "żż", 4, codes.OneLine, ""},
		{"multi-byte over the limit", "żżż", 4, codes.OneLine, codes.InputTooLarge},
		{"invalid UTF-8", "a\xffb", 10, codes.MultiLine, codes.InvalidInput},
		{"truncated rune", "\xc5", 10, codes.MultiLine, codes.InvalidInput},
		{"NUL one-line", "a\x00b", 10, codes.OneLine, codes.InvalidInput},
		{"NUL multi-line", "a\x00b", 10, codes.MultiLine, codes.InvalidInput},
		{"newline one-line", "a\nb", 10, codes.OneLine, codes.InvalidInput},
		{"newline multi-line", "a\r\n\tb", 10, codes.MultiLine, ""},
		{"escape multi-line", "a\x1b[2Jb", 10, codes.MultiLine, codes.InvalidInput},
		{"DEL", "a\x7f", 10, codes.MultiLine, codes.InvalidInput},
		{"10 MB reason", strings.Repeat("x", 10<<20), codes.MaxTextBytes, codes.MultiLine, codes.InputTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := codes.CheckText("field", tt.s, tt.limit, tt.kind)
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
		{"over the limit", strings.Repeat("x", 17), codes.InputTooLarge},
		{"invalid UTF-8", "{\"a\":\"\xff\"}", codes.InvalidInput},
		{"NUL", "{\"a\":\"\x00\"}", codes.InvalidInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inputtest.Check(t, codes.CheckBytes("input", []byte(tt.b), 16), "input", 16, tt.wantCode)
		})
	}
}

func TestCheckList(t *testing.T) {
	t.Parallel()
	inputtest.Check(t, codes.CheckList("tags", codes.MaxListLen), "tags", codes.MaxListLen, "")
	inputtest.Check(t, codes.CheckList("tags", codes.MaxListLen+1), "tags", codes.MaxListLen, codes.InputTooLarge)
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
		{"invalid UTF-8", "{\"a\":\"\xc3\x28\"}", codes.InvalidInput},
		{"invalid UTF-8 key", "{\"\xff\":1}", codes.InvalidInput},
		{"lone high surrogate", `{"a":"\ud800"}`, codes.InvalidInput},
		{"lone high surrogate at the end", `"\ud800`, codes.InvalidInput},
		{"high then not low", `{"a":"\ud800\u0041"}`, codes.InvalidInput},
		{"lone low surrogate", `{"a":"x\udc00"}`, codes.InvalidInput},
		{"lone surrogate in a key", `{"\uDBFF":1}`, codes.InvalidInput},
		{"two highs", `["\ud800\ud800"]`, codes.InvalidInput},
		{"over the limit", `"` + strings.Repeat("x", 64) + `"`, codes.InputTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inputtest.Check(t, codes.CheckJSON("input", []byte(tt.b), 64), "input", 64, tt.wantCode)
		})
	}
}
