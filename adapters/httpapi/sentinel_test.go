package httpapi_test

import "github.com/runconveyor/conveyor/authority"

func authorityErrForbidden() error { return authority.ErrForbidden }
