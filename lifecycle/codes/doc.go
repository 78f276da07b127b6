// Package codes is the SDK's one table of error codes: each code, the HTTP
// status an API answers it with, the error_code values of a job record, and
// the limits of the text and documents a caller hands the SDK (with the
// checks that enforce them, CheckText, CheckBytes and CheckList, and their
// error, *InputError).
//
// It imports nothing of Conveyor: every layer, the storage adapters
// included, takes its codes from here, so no code is spelled as a string
// literal anywhere else. See docs/design.md#layers-and-packages for the layers.
package codes
