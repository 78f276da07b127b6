package jsonenc_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/internal/jsonenc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestString: every byte value alone and in a UTF-8 sequence, and the
// runes with special cases, come out as json.Marshal writes them.
func TestString(t *testing.T) {
	t.Parallel()
	in := []string{"", "plain", "\u2028\u2029", "\xe2\x80", "é\xffü", "a\x00b\x1fc\x7f", "<>&\"\\/"}
	for c := range 256 {
		in = append(in, string([]byte{byte(c)}), "x"+string([]byte{byte(c)})+"é")
	}
	for _, s := range in {
		want, _ := json.Marshal(s)
		if got := jsonenc.String([]byte("p"), s); !bytes.Equal(got, append([]byte("p"), want...)) {
			t.Errorf("String(%q) = %s, json.Marshal %s", s, got[1:], want)
		}
	}
}

// TestTime: times in and out of MarshalJSON's range.
func TestTime(t *testing.T) {
	t.Parallel()
	for _, tm := range []time.Time{
		{}, time.Date(2026, 2, 24, 10, 0, 0, 1, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", 23*3600+59*60)),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", -24*3600)),
	} {
		want, werr := tm.MarshalJSON()
		got, gerr := jsonenc.Time(nil, tm)
		if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
			t.Errorf("Time(%v) = %s, %v; MarshalJSON %s, %v", tm, got, gerr, want, werr)
		}
	}
}

// TestRaw: raw JSON values compacted and escaped as json.Marshal does.
func TestRaw(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{`{"a":1}`, ` { "a" : [ 1 , "<&>" ] } `, `"\u2028"`, "\"\u2028\"", `{`, `1 2`, `null`} {
		want, werr := json.Marshal(json.RawMessage(raw))
		got, gerr := jsonenc.Raw(nil, json.RawMessage(raw))
		if (werr != nil) != (gerr != nil) || (werr == nil && !bytes.Equal(got, want)) {
			t.Errorf("Raw(%s) = %s, %v; json.Marshal %s, %v", raw, got, gerr, want, werr)
		}
	}
}
