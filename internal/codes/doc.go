// Package codes is the SDK's one table of error codes: each code, the HTTP
// status an API answers it with, the error_code values of a job record, and
// the limits of the text and documents a caller hands the SDK (with the
// checks that enforce them, CheckText, CheckBytes, CheckList, CheckJSON and
// CheckContext, whose error is lifecycle.InputError).
//
// It imports only the types package, lifecycle, whose errors carry their
// own codes (the codes a step fails with are exported there, the rest of
// its codes spelled once there and held to this table by a test). Every
// other code is spelled here and nowhere else. See
// docs/design.md#layers-and-packages for the layers.
package codes
