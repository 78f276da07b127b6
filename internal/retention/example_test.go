package retention_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/retention"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// The bucket lifecycle rules for a week's retention, audit days kept for
// 30 days, in a bucket whose store lives under conveyor/.
func ExampleS3Lifecycle() {
	cfg := retention.Config{Age: 7 * 24 * time.Hour, Ages: map[retention.Kind]time.Duration{retention.Audit: 30 * 24 * time.Hour}}
	b, err := retention.S3Lifecycle(cfg, "conveyor/", []string{"research"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(b))
	// Output:
	// {
	//   "Rules": [
	//     {
	//       "ID": "conveyor-runs-research",
	//       "Status": "Enabled",
	//       "Filter": {
	//         "Prefix": "conveyor/agents/research/runs/"
	//       },
	//       "Expiration": {
	//         "Days": 7
	//       }
	//     },
	//     {
	//       "ID": "conveyor-run-index",
	//       "Status": "Enabled",
	//       "Filter": {
	//         "Prefix": "conveyor/index/runs/"
	//       },
	//       "Expiration": {
	//         "Days": 7
	//       }
	//     },
	//     {
	//       "ID": "conveyor-run-history",
	//       "Status": "Enabled",
	//       "Filter": {
	//         "Prefix": "conveyor/index/run-history/"
	//       },
	//       "Expiration": {
	//         "Days": 7
	//       }
	//     },
	//     {
	//       "ID": "conveyor-run-status",
	//       "Status": "Enabled",
	//       "Filter": {
	//         "Prefix": "conveyor/index/run-status/"
	//       },
	//       "Expiration": {
	//         "Days": 7
	//       }
	//     },
	//     {
	//       "ID": "conveyor-repo-runs",
	//       "Status": "Enabled",
	//       "Filter": {
	//         "Prefix": "conveyor/index/repo-runs/"
	//       },
	//       "Expiration": {
	//         "Days": 7
	//       }
	//     },
	//     {
	//       "ID": "conveyor-audit",
	//       "Status": "Enabled",
	//       "Filter": {
	//         "Prefix": "conveyor/audit/"
	//       },
	//       "Expiration": {
	//         "Days": 30
	//       }
	//     },
	//     {
	//       "ID": "conveyor-idempotency",
	//       "Status": "Enabled",
	//       "Filter": {
	//         "Prefix": "conveyor/idempotency/"
	//       },
	//       "Expiration": {
	//         "Days": 1
	//       }
	//     },
	//     {
	//       "ID": "conveyor-idempotency-expiry",
	//       "Status": "Enabled",
	//       "Filter": {
	//         "Prefix": "conveyor/index/idempotency-expiry/"
	//       },
	//       "Expiration": {
	//         "Days": 1
	//       }
	//     },
	//     {
	//       "ID": "conveyor-inbox-expired",
	//       "Status": "Enabled",
	//       "Filter": {
	//         "Prefix": "conveyor/inbox/expired/"
	//       },
	//       "Expiration": {
	//         "Days": 7
	//       }
	//     },
	//     {
	//       "ID": "conveyor-stats-hours",
	//       "Status": "Enabled",
	//       "Filter": {
	//         "Prefix": "conveyor/stats/jobs/hours/"
	//       },
	//       "Expiration": {
	//         "Days": 2
	//       }
	//     },
	//     {
	//       "ID": "conveyor-stats-days",
	//       "Status": "Enabled",
	//       "Filter": {
	//         "Prefix": "conveyor/stats/jobs/days/"
	//       },
	//       "Expiration": {
	//         "Days": 90
	//       }
	//     }
	//   ]
	// }
}

// A janitor with a week's retention: a job that completed 30 days ago is
// deleted, one that completed yesterday is kept. Every process sharing the
// store runs one (Start or Run); one of them makes each hourly pass.
func ExampleJanitor() {
	ctx := context.Background()
	store := memstore.New()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for id, done := range map[string]time.Time{"old": now.AddDate(0, 0, -30), "new": now.AddDate(0, 0, -1)} {
		key := "jobs/" + id + ".json" // the job record's key
		b, _ := json.Marshal(lifecycle.Job{JobID: id, Status: lifecycle.JobComplete, CreatedAt: done, UpdatedAt: done})
		_, _ = store.Put(ctx, key, b, storage.IfNotExists())
	}
	j, err := retention.New(retention.Config{
		Store: store, Owner: "worker-1", Age: 7 * 24 * time.Hour,
		Clock: clock.NewFake(now), Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	r, ran, err := j.Pass(ctx)
	fmt.Println(ran, r.Done, r.Deleted, err)
	_, _, err = store.Get(ctx, "jobs/new.json")
	fmt.Println("jobs/new.json kept:", err == nil)
	// Output:
	// true true map[jobs:1] <nil>
	// jobs/new.json kept: true
}
