// Package tenancy answers which records a call may see and which tenant
// what it creates belongs to (docs/design.md#tenants), from the tenant its
// context acts for (lifecycle.WithTenant).
package tenancy

import (
	"context"

	"github.com/runconveyor/conveyor/lifecycle"
)

// Sees tells whether a call under ctx may see a record of tenant (the
// empty default tenant included): its own tenant's, or any with
// lifecycle.AllTenants.
func Sees(ctx context.Context, tenant string) bool {
	t := lifecycle.TenantOf(ctx)
	return t == lifecycle.AllTenants || t == tenant
}

// Creating is the tenant a record created under ctx belongs to: the
// context's, except that lifecycle.AllTenants creates in the default
// tenant.
func Creating(ctx context.Context) string {
	if t := lifecycle.TenantOf(ctx); t != lifecycle.AllTenants {
		return t
	}
	return ""
}

type namingKey struct{}

// Naming returns ctx marked as the operator's own configuration creating
// records in a named tenant (a schedule's slot): it may give a job's id,
// which a named tenant's caller may not (ids are one namespace, and a
// caller's choice would tell whether another tenant holds one), and a
// run's idempotency key is kept as given, not scoped by the tenant, so a
// slot is one key whatever tenant a process fires it for. The mark is not
// reachable from outside the module.
func Naming(ctx context.Context) context.Context {
	return context.WithValue(ctx, namingKey{}, true)
}

// NamesIDs tells whether ctx carries Naming's mark.
func NamesIDs(ctx context.Context) bool {
	named, _ := ctx.Value(namingKey{}).(bool)
	return named
}
