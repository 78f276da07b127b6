package records

import "github.com/runconveyor/conveyor/lifecycle"

// AuditJSON gives the tests the hand-written encoder of an audit event.
func AuditJSON(ev *lifecycle.AuditEvent) interface{ AppendJSON([]byte) ([]byte, error) } {
	return (*auditJSON)(ev)
}
