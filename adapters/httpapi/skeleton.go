package httpapi

import (
	"context"
	"net/http"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/codes"
)

// handlerFunc is a route's handler: an error it returns is answered in the
// JSON error form.
type handlerFunc = func(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error

// jsonRoute is the skeleton most routes share: parse the request (path id,
// query, body), make the call, answer its result as JSON with status.
func jsonRoute[In, Out any](status int, parse func(*http.Request, lifecycle.Actor) (In, error),
	call func(context.Context, lifecycle.Actor, In) (Out, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
		in, err := parse(r, actor)
		if err != nil {
			return err
		}
		out, err := call(r.Context(), actor, in)
		if err != nil {
			return err
		}
		return writeJSON(w, status, out)
	}
}

// needs answers absent(what) before anything else when an optional part of
// the Config is not served; the Config is fixed once New has returned.
func needs(present bool, what string, h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, actor lifecycle.Actor) error {
		if !present {
			return absent(what)
		}
		return h(w, r, actor)
	}
}

// noInput is the parse of a route that reads nothing of the request.
func noInput(*http.Request, lifecycle.Actor) (struct{}, error) { return struct{}{}, nil }

// pathParam parses the path id name (checked as field).
func pathParam(name, field string) func(*http.Request, lifecycle.Actor) (string, error) {
	return func(r *http.Request, _ lifecycle.Actor) (string, error) {
		return pathID(r, name, field)
	}
}

// pathNoBody parses the path id name of a route that takes no body; a body
// is refused with msg.
func pathNoBody(name, field, msg string) func(*http.Request, lifecycle.Actor) (string, error) {
	return func(r *http.Request, _ lifecycle.Actor) (string, error) {
		id, err := pathID(r, name, field)
		if err != nil {
			return "", err
		}
		if r.ContentLength > 0 {
			return "", apiErr(codes.InvalidRequest, "%s", msg)
		}
		return id, nil
	}
}

// idBody is a path id and the decoded body of a request.
type idBody[B any] struct {
	id   string
	body B
}

// pathBody parses the path id name, then reads and decodes the body.
func pathBody[B any](name, field string, decode func([]byte) (B, error)) func(*http.Request, lifecycle.Actor) (idBody[B], error) {
	return func(r *http.Request, actor lifecycle.Actor) (idBody[B], error) {
		id, err := pathID(r, name, field)
		if err != nil {
			return idBody[B]{}, err
		}
		b, err := jsonBody(decode)(r, actor)
		return idBody[B]{id: id, body: b}, err
	}
}

// jsonBody reads and decodes the body.
func jsonBody[B any](decode func([]byte) (B, error)) func(*http.Request, lifecycle.Actor) (B, error) {
	return func(r *http.Request, _ lifecycle.Actor) (B, error) {
		var b B
		data, err := readBody(r)
		if err != nil {
			return b, err
		}
		return decode(data)
	}
}

// optionalBody decodes a body whose every field is optional (an empty body
// is allowed).
func optionalBody[B any](data []byte) (B, error) {
	var b B
	err := decodeStrict(data, &b, true)
	return b, err
}
