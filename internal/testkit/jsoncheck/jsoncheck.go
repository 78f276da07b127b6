// Package jsoncheck holds a hand-written JSON encoder (a jsonenc.Appender)
// to what encoding/json writes for the same value.
package jsoncheck

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/runconveyor/conveyor/internal/jsonenc"
)

// Same fails tb unless v.AppendJSON writes exactly what json.Marshal(v)
// writes, or both fail. v must not implement json.Marshaler, so that
// json.Marshal is the reflective reference.
func Same(tb testing.TB, name string, v jsonenc.Appender) {
	tb.Helper()
	if _, ok := v.(json.Marshaler); ok {
		tb.Fatalf("%s: %T implements json.Marshaler: no reference to compare with", name, v)
	}
	want, werr := json.Marshal(v)
	got, gerr := v.AppendJSON([]byte("prefix"))
	switch {
	case werr != nil || gerr != nil:
		if werr == nil || gerr == nil {
			tb.Errorf("%s: json.Marshal error %v, AppendJSON error %v", name, werr, gerr)
		}
	case !bytes.HasPrefix(got, []byte("prefix")):
		tb.Errorf("%s: AppendJSON dropped what it was appending to: %s", name, got)
	case !bytes.Equal(got[len("prefix"):], want):
		tb.Errorf("%s: AppendJSON\n%s\njson.Marshal\n%s", name, got[len("prefix"):], want)
	}
}

// ZeroFields lists the fields of the struct v points to, nested structs
// and the structs their pointers and slices hold included, that are zero:
// a value built to exercise every field of an encoder must have none, so
// that a field added to the type later fails the test until the encoder
// writes it too.
func ZeroFields(v any) []string {
	var out []string
	walk(reflect.ValueOf(v).Elem(), reflect.TypeOf(v).Elem().Name(), &out)
	return out
}

func walk(v reflect.Value, path string, out *[]string) {
	if v.IsZero() {
		*out = append(*out, path)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		walk(v.Elem(), path, out)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Struct {
			for i := range v.Len() {
				walk(v.Index(i), path+"[]", out)
			}
		}
	case reflect.Struct:
		if v.Type().PkgPath() == "time" {
			return
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.Tag.Get("json") == "-" {
				continue
			}
			walk(v.Field(i), path+"."+f.Name, out)
		}
	}
}
