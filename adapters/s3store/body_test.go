package s3store

import (
	"bytes"
	"io"
	"testing"
	"testing/iotest"
)

// TestBodyReader: the header+value reader reads, seeks and re-reads like
// one byte slice, which the SDK relies on to sign and to retry.
func TestBodyReader(t *testing.T) {
	for _, value := range [][]byte{nil, []byte("v"), bytes.Repeat([]byte("0123456789"), 1000)} {
		const token = "0123456789abcdef0123456789abcdef"
		want := append([]byte(magic+token+"\n"), value...)
		if err := iotest.TestReader(body(token, value), want); err != nil {
			t.Fatalf("value of %d bytes: %v", len(value), err)
		}
		r := body(token, value)
		if _, err := io.ReadAll(r); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(r)
		if !bytes.Equal(got, want) || !bytes.Equal(stripHeader(got), value) {
			t.Fatalf("re-read after rewind differs")
		}
	}
	// WriteTo from the middle of the header and of the value.
	for _, off := range []int64{0, 3, int64(headerLen), int64(headerLen) + 5} {
		r := body("0123456789abcdef0123456789abcdef", []byte("0123456789"))
		if _, err := r.Seek(off, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		n, err := r.(io.WriterTo).WriteTo(&buf)
		want := append([]byte(magic+"0123456789abcdef0123456789abcdef\n"), "0123456789"...)[off:]
		if err != nil || n != int64(len(want)) || !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("WriteTo from %d = %q, %d, %v", off, buf.Bytes(), n, err)
		}
	}
	if _, err := body("t", nil).Seek(-1, io.SeekStart); err == nil {
		t.Fatal("negative seek accepted")
	}
}
