package lifecycle

import "context"

// AllTenants is the tenant of an operator scoped to every tenant (a token
// "tok=admin@*"): its reads and controls see every tenant's records; what
// it creates belongs to the default tenant.
const AllTenants = "*"

type tenantKey struct{}

// WithTenant returns ctx acting for tenant (docs/spec.md#tenants): every
// record a call under it creates carries the tenant, and every read and
// control under it sees only that tenant's records, another tenant's
// answering as missing. The empty tenant is the default tenant, which a
// context without one acts for, and which every record written before
// tenants belongs to.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantOf returns the tenant ctx acts for (WithTenant): the empty
// default tenant when none is set.
func TenantOf(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}
