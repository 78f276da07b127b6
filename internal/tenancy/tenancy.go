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
