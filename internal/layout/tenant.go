package layout

import (
	"time"

	"github.com/runconveyor/conveyor/internal/storekey"
)

// A tenant's run lists (docs/design.md#tenants): the default tenant's
// (tenant "") are the keys written before tenants, so an upgrade moves
// nothing; another tenant's are the same lists under a tenant folder,
// index/run-history/@{tenant}/{slug}/... and
// index/run-status/@{tenant}/{slug}/{status}/..., so a tenant's page costs
// its own entries. No slug starts with "@" (storekey.ValidateID), so no
// agent's list of the default tenant holds them, and the prefixes the
// retention rules name cover them.

// tenantSegment is the folder of tenant's lists under a list prefix: ""
// for the default tenant.
func tenantSegment(tenant string) (string, error) {
	if tenant == "" {
		return "", nil
	}
	if err := storekey.ValidateID("tenant", tenant); err != nil {
		return "", err
	}
	return "@" + tenant + "/", nil
}

// TenantRunHistoryAgentPrefix is RunHistoryAgentPrefix of tenant's runs.
func TenantRunHistoryAgentPrefix(tenant, slug string) (string, error) {
	seg, err := tenantSegment(tenant)
	if err != nil {
		return "", err
	}
	p, err := RunHistoryAgentPrefix(slug)
	if err != nil {
		return "", err
	}
	return RunHistoryPrefix + seg + p[len(RunHistoryPrefix):], nil
}

// TenantRunHistoryKey is RunHistoryKey of tenant's run.
func TenantRunHistoryKey(tenant, slug string, startedAt time.Time, runID string) (string, error) {
	p, err := TenantRunHistoryAgentPrefix(tenant, slug)
	if err != nil {
		return "", err
	}
	return newestFirstKey(p, "run id", startedAt, runID)
}

// TenantRunStatusIndexAgentPrefix is RunStatusIndexAgentPrefix of
// tenant's runs.
func TenantRunStatusIndexAgentPrefix(tenant, slug, status string) (string, error) {
	seg, err := tenantSegment(tenant)
	if err != nil {
		return "", err
	}
	p, err := RunStatusIndexAgentPrefix(slug, status)
	if err != nil {
		return "", err
	}
	return RunStatusIndexPrefix + seg + p[len(RunStatusIndexPrefix):], nil
}

// TenantRunStatusIndexKey is RunStatusIndexKey of tenant's run.
func TenantRunStatusIndexKey(tenant, slug, status string, startedAt time.Time, runID string) (string, error) {
	p, err := TenantRunStatusIndexAgentPrefix(tenant, slug, status)
	if err != nil {
		return "", err
	}
	return newestFirstKey(p, "run id", startedAt, runID)
}

// TenantRunIndexKeys is RunIndexKeys of tenant's run.
func TenantRunIndexKeys(tenant, slug, runID, status string, startedAt time.Time) ([]string, error) {
	keys, err := RunIndexKeys(slug, runID, status, startedAt)
	if err != nil || tenant == "" {
		return keys, err
	}
	hist, err := TenantRunHistoryKey(tenant, slug, startedAt, runID)
	if err != nil {
		return nil, err
	}
	st, err := TenantRunStatusIndexKey(tenant, slug, status, startedAt, runID)
	if err != nil {
		return nil, err
	}
	return []string{keys[0], keys[1], hist, st}, nil
}
