// Package codes is the SDK's one table of error codes: each code, the HTTP
// status an API answers it with, the error_code values of a job record, and
// the limits of the text and documents a caller hands the SDK (with the
// checks that enforce them, CheckText, CheckBytes, CheckList, CheckJSON and
// CheckContext, whose error is lifecycle.InputError).
//
// It imports only the types package, lifecycle, whose errors carry their
// own codes: lifecycle imports nothing, so it spells them itself, and a test
// here holds each to this table. No other package spells a code. See
// docs/design.md#layers-and-packages for the layers.
package codes
