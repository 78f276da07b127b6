package records

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"sync"

	"github.com/runconveyor/conveyor/internal/jsonenc"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// MaxUnknown bounds the unknown members (lifecycle.Meta.Unknown) one record
// carries: a newer release's few new fields fit many times over, and a
// record holding more is garbage, not a release's, which is quarantined
// rather than carried on by every rewrite.
const MaxUnknown = 64 << 10

// ErrUnknownTooLarge is the error of a record quarantined for holding more
// than MaxUnknown bytes of members its type does not know.
var ErrUnknownTooLarge = errors.New("records: unknown members over 64 KiB")

// Decode decodes the stored bytes b of the record at key into doc (a
// zero document), with the members its type does not know kept (Keep);
// either failing gives a *lifecycle.QuarantinedError. A document whose
// decoder is a KnownDecoder that read the record whole costs no look for
// unknown members. (doc is the caller's so that a decode costs the one
// document a caller allocates.)
func Decode[T any, P Doc[T]](key string, b []byte, ver storage.Version, doc P) error {
	var err error
	known := false
	if k, ok := any(doc).(KnownDecoder); ok {
		known, err = k.DecodeKnown(b)
	} else {
		err = jsonenc.Unmarshal(b, doc)
	}
	if err != nil {
		return &lifecycle.QuarantinedError{Key: key, Version: string(ver), Data: b, Reason: "cannot decode", Err: err}
	}
	if known {
		return nil
	}
	return Keep[T, P](key, b, ver, doc)
}

// KnownDecoder is a jsonenc.Decoder that also tells whether the record it
// decoded held only members of its type, by their exact names (its own
// reader read it whole), so there is nothing to keep.
type KnownDecoder interface {
	DecodeKnown(b []byte) (allKnown bool, err error)
}

// Keep sets doc's lifecycle.Meta.Unknown to the top-level members of b,
// the stored bytes doc was just decoded from, whose names doc's type does
// not know (as json.Unmarshal matches them, case folded), in their stored
// order. Members nested in a known one are not kept: the known member is
// the code's to write, whole. A record with more than MaxUnknown bytes of
// them gives a *lifecycle.QuarantinedError.
func Keep[T any, P Doc[T]](key string, b []byte, ver storage.Version, doc P) error {
	m := doc.StorageMeta()
	m.Unknown = ""
	n := namesOf(reflect.TypeFor[T]())
	if n.opaque {
		return nil
	}
	u, ok := n.scan(b)
	if !ok {
		u = n.slow(b)
	}
	if len(u) > MaxUnknown {
		return &lifecycle.QuarantinedError{Key: key, Version: string(ver), Data: b, Reason: "unknown members too large", Err: ErrUnknownTooLarge}
	}
	m.Unknown = u
	return nil
}

// Encode is the JSON of doc for a rewrite: its own members, then the
// unknown members its lifecycle.Meta kept, byte for byte as read. A doc
// with none encodes as jsonenc.Marshal does.
func Encode[T any, P Doc[T]](doc P) ([]byte, error) {
	b, err := jsonenc.Marshal(doc)
	if err != nil {
		return nil, err
	}
	u := doc.StorageMeta().Unknown
	if u == "" {
		return b, nil
	}
	n := len(b)
	if n < 2 || b[n-1] != '}' {
		return nil, errors.New("records: a document with unknown members encodes as no object")
	}
	out := make([]byte, 0, n+1+len(u))
	out = append(out, b[:n-1]...)
	if n > 2 {
		out = append(out, ',')
	}
	out = append(out, u...)
	return append(out, '}'), nil
}

// names are the member names a struct type decodes.
type names struct {
	exact map[string]bool
	all   []string
	// opaque: the type decodes itself, its names are its own business and
	// nothing is kept.
	opaque bool
}

var nameCache sync.Map // reflect.Type -> *names

func namesOf(t reflect.Type) *names {
	if n, ok := nameCache.Load(t); ok {
		return n.(*names)
	}
	n := &names{exact: map[string]bool{}}
	if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		n.opaque = true
	} else {
		n.collect(t, 0)
	}
	for k := range n.exact {
		n.all = append(n.all, k)
	}
	slices.Sort(n.all)
	v, _ := nameCache.LoadOrStore(t, n)
	return v.(*names)
}

// collect adds the names encoding/json gives t's fields, those of its
// untagged embedded structs included.
func (n *names) collect(t reflect.Type, depth int) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := bytes.Cut([]byte(tag), []byte(","))
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && len(name) == 0 && ft.Kind() == reflect.Struct {
			if depth < 16 {
				n.collect(ft, depth+1)
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if len(name) == 0 {
			name = []byte(f.Name)
		}
		n.exact[string(name)] = true
	}
}

func (n *names) knows(name []byte) bool {
	if n.exact[string(name)] {
		return true
	}
	for _, k := range n.all {
		if bytes.EqualFold(name, []byte(k)) {
			return true
		}
	}
	return false
}

// scan returns the unknown members of the object b without decoding it
// (jsonenc's reader, passing over the values); ok is false for what it
// leaves to slow (a name with an escape, anything not plainly an object).
// b decoded already, so its values are valid JSON.
func (n *names) scan(b []byte) (u string, ok bool) {
	r := jsonenc.NewReader(b)
	if !r.Open('{') {
		return "", false
	}
	var out []byte
	for first := true; r.More('}', first); first = false {
		name := r.Key()
		start, end := r.Skip()
		if !r.OK() {
			return "", false
		}
		if n.knows(name) {
			continue
		}
		if len(out) > 0 {
			out = append(out, ',')
		}
		out = append(append(append(out, '"'), name...), '"', ':')
		out = append(out, b[start:end]...)
	}
	return string(out), r.End()
}

// slow is scan for any object json.Unmarshal reads, with names in
// sorted order.
func (n *names) slow(b []byte) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	var out []byte
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if n.knows([]byte(k)) {
			continue
		}
		if len(out) > 0 {
			out = append(out, ',')
		}
		kb, _ := json.Marshal(k)
		out = append(append(append(out, kb...), ':'), m[k]...)
	}
	return string(out)
}
