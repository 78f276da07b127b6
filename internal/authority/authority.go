// Package authority is the CRUD authority matrix as a table
// (docs/spec.md#authority-matrix): which component may create, read,
// update the status of and delete jobs; write, read, modify and delete
// artifacts; and read the Memory Backend's two layers or write to it
// through a proposal. The job queue, the artifact store and the proposal
// records check it on every call that takes an actor, before any write, so
// a refusal is a clear FORBIDDEN error that leaves the store untouched.
package authority

import (
	"fmt"
	"slices"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// ActorMemoryBackend is the platform's Memory Backend
// (docs/spec.md#platform-names), which reads artifacts for context. It moves no lifecycle,
// so package lifecycle does not define it.
const ActorMemoryBackend lifecycle.Actor = "memory-backend"

// Actors lists every actor the matrix knows: lifecycle's actors and
// ActorMemoryBackend. An actor outside this list is refused everything.
func Actors() []lifecycle.Actor {
	return []lifecycle.Actor{lifecycle.ActorGateway, lifecycle.ActorOrchestration, lifecycle.ActorNLMBackend,
		lifecycle.ActorMastra, lifecycle.ActorAdmin, lifecycle.ActorFrontend, lifecycle.ActorSystem, ActorMemoryBackend}
}

// Resource is a table of the matrix.
type Resource string

// The resources: the matrix's three tables.
const (
	Jobs      Resource = "jobs"      // the job queue
	Artifacts Resource = "artifacts" // the artifact store
	Memory    Resource = "memory"    // the Memory Backend, written only through proposals
)

// Operation is a column of the matrix.
type Operation string

// Operations on jobs and on artifacts. Read and Delete appear
// in both tables.
const (
	Create       Operation = "create"        // jobs
	Read         Operation = "read"          // jobs, artifacts
	UpdateStatus Operation = "update_status" // jobs
	Delete       Operation = "delete"        // jobs, artifacts
	WriteNew     Operation = "write_new"     // artifacts
	Modify       Operation = "modify"        // artifacts
	ReadLayer1   Operation = "read_layer1"   // memory: the first layer
	ReadLayer2   Operation = "read_layer2"   // memory: the second layer
	Write        Operation = "write"         // memory: a proposal's content, applied
)

// Operations lists the columns of a resource's table in the spec's order.
func Operations(r Resource) []Operation {
	switch r {
	case Jobs:
		return []Operation{Create, Read, UpdateStatus, Delete}
	case Artifacts:
		return []Operation{WriteNew, Read, Modify, Delete}
	case Memory:
		return []Operation{ReadLayer1, ReadLayer2, Write}
	}
	return nil
}

// Permission is one cell of the matrix.
type Permission uint8

// Cell values. The platform's qualified cells become their own values:
// "own job only" is OwnOnly, "admin cleanup only" is AdminCleanup,
// "registry metadata only" is RegistryMetadata
// (docs/spec.md#authority-matrix).
const (
	// Denied: ❌, or a component the table does not list.
	Denied Permission = iota
	// Allowed: ✅.
	Allowed
	// OwnOnly: allowed on the caller's own job only (NLM backend, jobs).
	OwnOnly
	// AdminCleanup: deleting is allowed only as the retention cleanup of
	// artifacts older than N days and of finished jobs past their age
	// (admin, artifacts and, amended, jobs).
	AdminCleanup
	// RegistryMetadata: the component writes registry metadata about
	// artifacts, never an artifact itself (admin, artifacts),
	// so writing a new artifact is refused.
	RegistryMetadata
	// ViaTool: Mastra reads the first layer of memory only through a tool
	// a step calls (memory).
	ViaTool
	// ViaExplicitTool: Mastra reads the second layer only through a tool
	// the step names explicitly (memory).
	ViaExplicitTool
	// ViaProposal: the component writes memory only by creating a
	// proposal, which the gateway applies (Mastra, memory).
	ViaProposal
	// ViaGateway: the component writes memory only by asking the gateway,
	// never itself, not even a proposal (orchestration, memory).
	ViaGateway
)

// String renders a cell.
func (p Permission) String() string {
	switch p {
	case Denied:
		return "denied"
	case Allowed:
		return "allowed"
	case OwnOnly:
		return "own job only"
	case AdminCleanup:
		return "admin cleanup only"
	case RegistryMetadata:
		return "registry metadata only"
	case ViaTool:
		return "via tool"
	case ViaExplicitTool:
		return "via explicit tool"
	case ViaProposal:
		return "via proposal"
	case ViaGateway:
		return "via gateway"
	}
	return fmt.Sprintf("Permission(%d)", uint8(p))
}

// Row is one component's line of a table.
type Row struct {
	Actor lifecycle.Actor
	Cells map[Operation]Permission
}

// matrix is the matrix of docs/spec.md#authority-matrix, row by row.
// Components map onto actors as docs/spec.md#actors says: Gateway (Owner via
// Frontend) is gateway, Orchestration Layer is orchestration, Membridge
// Control Plane is admin, the Apply Engine (Gateway) is gateway. Mastra,
// system and, for jobs, the memory backend have no row: everything is
// denied to them; the memory backend has no row in its own table either.
var matrix = map[Resource][]Row{
	Jobs: {
		{lifecycle.ActorGateway, map[Operation]Permission{Create: Allowed, Read: Allowed, UpdateStatus: Denied, Delete: Denied}},
		{lifecycle.ActorOrchestration, map[Operation]Permission{Create: Allowed, Read: Allowed, UpdateStatus: Allowed, Delete: Denied}},
		{lifecycle.ActorNLMBackend, map[Operation]Permission{Create: Denied, Read: OwnOnly, UpdateStatus: OwnOnly, Delete: Denied}},
		{lifecycle.ActorMastra, map[Operation]Permission{Create: Denied, Read: Denied, UpdateStatus: Denied, Delete: Denied}},
		// The admin's delete is amended from the spec's denied to its
		// cleanup of finished jobs past their retention age
		// (docs/spec.md#authority-matrix): without it a year of jobs never goes.
		{lifecycle.ActorAdmin, map[Operation]Permission{Create: Denied, Read: Allowed, UpdateStatus: Allowed, Delete: AdminCleanup}},
		{lifecycle.ActorFrontend, map[Operation]Permission{Create: Denied, Read: Allowed, UpdateStatus: Denied, Delete: Denied}},
	},
	Artifacts: {
		{lifecycle.ActorNLMBackend, map[Operation]Permission{WriteNew: Allowed, Read: Allowed, Modify: Denied, Delete: Denied}},
		{lifecycle.ActorOrchestration, map[Operation]Permission{WriteNew: Denied, Read: Allowed, Modify: Denied, Delete: Denied}},
		{ActorMemoryBackend, map[Operation]Permission{WriteNew: Denied, Read: Allowed, Modify: Denied, Delete: Denied}},
		{lifecycle.ActorAdmin, map[Operation]Permission{WriteNew: RegistryMetadata, Read: Allowed, Modify: Denied, Delete: AdminCleanup}},
		{lifecycle.ActorFrontend, map[Operation]Permission{WriteNew: Denied, Read: Allowed, Modify: Denied, Delete: Denied}},
		{lifecycle.ActorGateway, map[Operation]Permission{WriteNew: Denied, Read: Allowed, Modify: Denied, Delete: Denied}},
	},
	Memory: {
		{lifecycle.ActorOrchestration, map[Operation]Permission{ReadLayer1: Allowed, ReadLayer2: Denied, Write: ViaGateway}},
		{lifecycle.ActorMastra, map[Operation]Permission{ReadLayer1: ViaTool, ReadLayer2: ViaExplicitTool, Write: ViaProposal}},
		{lifecycle.ActorNLMBackend, map[Operation]Permission{ReadLayer1: Allowed, ReadLayer2: Denied, Write: Denied}},
		{lifecycle.ActorFrontend, map[Operation]Permission{ReadLayer1: Denied, ReadLayer2: Denied, Write: Denied}},
		{lifecycle.ActorGateway, map[Operation]Permission{ReadLayer1: Allowed, ReadLayer2: Allowed, Write: Allowed}},
	},
}

// Table returns a copy of a resource's table, rows in the spec's order.
func Table(r Resource) []Row {
	rows := make([]Row, 0, len(matrix[r]))
	for _, row := range matrix[r] {
		cells := make(map[Operation]Permission, len(row.Cells))
		for op, p := range row.Cells {
			cells[op] = p
		}
		rows = append(rows, Row{Actor: row.Actor, Cells: cells})
	}
	return rows
}

// Lookup returns the cell for actor, resource and operation: Denied for an
// actor without a row or an operation the resource does not have.
func Lookup(actor lifecycle.Actor, r Resource, op Operation) Permission {
	for _, row := range matrix[r] {
		if row.Actor == actor {
			return row.Cells[op] // missing column: Denied
		}
	}
	return Denied
}

// Scope tells Check what the call is about, for the qualified cells.
type Scope struct {
	// Own: the job is the caller's own (OwnOnly cells).
	Own bool
	// Cleanup: the call is the admin's retention cleanup of old artifacts
	// or finished jobs (AdminCleanup cells).
	Cleanup bool
	// Tool: the read is a tool's a step called (ViaTool cells), explicitly
	// named for the second layer (ViaExplicitTool cells).
	Tool, ExplicitTool bool
	// Proposal: the write is the creation of a proposal (ViaProposal
	// cells), not the write of its content.
	Proposal bool
}

// ErrForbidden matches every refusal of the matrix. It is
// lifecycle.ErrForbiddenActor, the SDK's one sentinel for a refused actor,
// so a caller (the Go client's errors among them) handles refused
// transitions and refused operations alike.
var ErrForbidden = lifecycle.ErrForbiddenActor

// Code is the error code of a refusal (codes.Forbidden).
const Code = codes.Forbidden

// ForbiddenError is a refusal. It matches ErrForbidden and
// lifecycle.ErrForbiddenActor.
type ForbiddenError struct {
	Actor      lifecycle.Actor
	Resource   Resource
	Operation  Operation
	Permission Permission // the cell that refused
	// Reason says why a qualified cell refused ("not the caller's own job").
	Reason string
}

// Error names the actor, the operation and the cell.
func (e *ForbiddenError) Error() string {
	msg := fmt.Sprintf("FORBIDDEN: actor %q may not %s %s (authority matrix: %s)", e.Actor, e.Operation, e.Resource, e.Permission)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Code returns "FORBIDDEN".
func (e *ForbiddenError) Code() string { return Code }

// Is matches ErrForbidden (lifecycle.ErrForbiddenActor).
func (e *ForbiddenError) Is(target error) bool { return target == ErrForbidden }

// Check returns nil when the matrix lets actor perform op on r within
// scope, and a *ForbiddenError otherwise. OwnOnly cells need scope.Own,
// AdminCleanup cells need scope.Cleanup, ViaTool and ViaExplicitTool
// cells scope.Tool and scope.ExplicitTool, ViaProposal cells
// scope.Proposal; RegistryMetadata and ViaGateway never allow.
func Check(actor lifecycle.Actor, r Resource, op Operation, scope Scope) error {
	p := Lookup(actor, r, op)
	reason, ok := qualified(p, scope)
	if ok {
		return nil
	}
	return &ForbiddenError{Actor: actor, Resource: r, Operation: op, Permission: p, Reason: reason}
}

// qualified tells whether cell p allows a call within scope, and if not,
// why (empty for a plain denial).
func qualified(p Permission, scope Scope) (reason string, ok bool) {
	switch p {
	case Allowed:
		return "", true
	case OwnOnly:
		return "not the caller's own job", scope.Own
	case AdminCleanup:
		return "only the retention cleanup of old records may delete", scope.Cleanup
	case ViaTool:
		return "only through a step's tool", scope.Tool
	case ViaExplicitTool:
		return "only through a tool the step names explicitly", scope.ExplicitTool
	case ViaProposal:
		return "only by creating a proposal", scope.Proposal
	case ViaGateway:
		return "only through the gateway", false
	}
	return "", false
}

// Known tells whether the matrix has a row for actor in r.
func Known(actor lifecycle.Actor, r Resource) bool {
	return slices.ContainsFunc(matrix[r], func(row Row) bool { return row.Actor == actor })
}
