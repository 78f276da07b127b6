package httpapi_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"testing"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/lifecycle"
)

// TestJobCountsTenants: two tenants' jobs, queued and cancelled over
// HTTP; each tenant's token sees only its own counts and cancels in the
// activity (whatever ?tenant= it sends), the default tenant's token none
// of them, a token of every tenant both (rows naming their tenant) or one
// with ?tenant=.
func TestJobCountsTenants(t *testing.T) {
	t.Parallel()
	all := maps.Clone(tokens)
	maps.Copy(all, tenantTokens)
	g := newRig(t, rigOpts{tokens: all, types: emailTypes()})
	// acme: 2 jobs, 1 cancelled; bolt: 3 jobs, 2 cancelled.
	for tenant, n := range map[string][2]int{"acme": {2, 1}, "bolt": {3, 2}} {
		for i := range n[0] {
			tok := "tok-" + tenant + "-gw"
			code, _, body := g.raw("POST", "/jobs", tok, "application/json", []byte(`{"job_type":"`+string(emailType)+`","agent_slug":"m"}`), nil)
			var j lifecycle.Job
			if code != http.StatusCreated || json.Unmarshal(body, &j) != nil {
				t.Fatalf("enqueue as %s: %d %s", tok, code, body)
			}
			if i < n[1] {
				tok := "tok-" + tenant + "-admin"
				if code, _, body := g.raw("POST", "/jobs/"+j.JobID+"/cancel", tok, "", nil, nil); code != http.StatusOK {
					t.Fatalf("cancel as %s: %d %s", tok, code, body)
				}
			}
		}
	}
	type want struct {
		rows      map[string]int64 // tenant/state → count
		cancelled int              // in the last hour's minutes
	}
	acme := want{map[string]int64{"acme/QUEUED": 1, "acme/CANCELLED": 1}, 1}
	bolt := want{map[string]int64{"bolt/QUEUED": 1, "bolt/CANCELLED": 2}, 2}
	both := want{map[string]int64{"acme/QUEUED": 1, "acme/CANCELLED": 1, "bolt/QUEUED": 1, "bolt/CANCELLED": 2}, 3}
	for _, c := range []struct {
		token, query string
		want         want
	}{
		{"tok-acme-gw", "", acme},
		{"tok-acme-admin", "?tenant=bolt", acme}, // its own, whatever it asks
		{"tok-bolt-gw", "", bolt},
		{"tok-gateway", "", want{map[string]int64{}, 0}}, // the default tenant's: none
		{"tok-all-admin", "", both},
		{"tok-all-admin", "?tenant=bolt", bolt},
	} {
		t.Run(c.token+c.query, func(t *testing.T) {
			code, _, body := g.raw("GET", "/stats/jobs/counts"+c.query, c.token, "", nil, nil)
			var counts lifecycle.JobCounts
			if code != http.StatusOK || json.Unmarshal(body, &counts) != nil || counts.Partial {
				t.Fatalf("counts: %d %s", code, body)
			}
			got, total := map[string]int64{}, int64(0)
			for _, r := range counts.Rows {
				for st, n := range r.Counts {
					got[r.TenantID+"/"+string(st)] += n
				}
			}
			for _, n := range counts.Total {
				total += n
			}
			var wantTotal int64
			for _, n := range c.want.rows {
				wantTotal += n
			}
			if !maps.Equal(got, c.want.rows) || total != wantTotal {
				t.Errorf("counts %v (total %d), want %v (%d)", got, total, c.want.rows, wantTotal)
			}
			code, _, body = g.raw("GET", "/stats/jobs/activity"+c.query, c.token, "", nil, nil)
			var act lifecycle.JobActivity
			if code != http.StatusOK || json.Unmarshal(body, &act) != nil {
				t.Fatalf("activity: %d %s", code, body)
			}
			cancelled := 0
			for _, m := range act.Minutes {
				cancelled += m.Cancelled
			}
			if cancelled != c.want.cancelled {
				t.Errorf("activity: %d cancelled, want %d", cancelled, c.want.cancelled)
			}
		})
	}
	// The Go client: a token of every tenant picks one with Operator.Tenant.
	op := client.Operator{Client: &client.Client{BaseURL: g.srv.URL, HTTP: g.srv.Client(), Token: "tok-all-admin"}, Tenant: "acme"}
	if c, err := op.JobCounts(context.Background()); err != nil || len(c.Rows) != 1 || c.Rows[0].TenantID != "acme" || c.Total[lifecycle.JobQueued] != 1 {
		t.Errorf("the client's counts of acme: %+v, %v", c, err)
	}
	if a, err := op.JobActivity(context.Background()); err != nil || len(a.Minutes) != 60 {
		t.Errorf("the client's activity of acme: %d minutes, %v", len(a.Minutes), err)
	}
	if code, _, body := g.raw("GET", "/stats/jobs/counts?tenant=bad/one", "tok-all-admin", "", nil, nil); code != http.StatusBadRequest {
		t.Errorf("a tenant that is no key segment: %d %s, want 400", code, body)
	}
}
