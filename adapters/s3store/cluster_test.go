package s3store_test

import (
	"context"
	"iter"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
	"github.com/runconveyor/conveyor/storage/storetest"
)

// One 4-node cluster for the package, started by the first test that
// needs it (about 5 s), stopped by TestMain.
var (
	cluster           miniotest.SharedCluster
	clusterBucketOnce sync.Once
	clusterBucket     string
	clusterBucketErr  error
)

func clusterEnv(tb testing.TB) (*miniotest.Cluster, string) {
	tb.Helper()
	c := cluster.Get(tb)
	clusterBucketOnce.Do(func() { clusterBucket, clusterBucketErr = c.CreateBucket(context.Background()) })
	if clusterBucketErr != nil {
		tb.Fatalf("creating bucket: %v", clusterBucketErr)
	}
	return c, clusterBucket
}

// spread is one store over every node of a cluster: each call goes to the
// next node, so that a read or a conditional write meets a node other than
// the one that took the write before it, as it does behind a load balancer
// or with several Workers on several nodes.
type spread struct {
	nodes []driver.Store
	next  atomic.Uint64
}

func (s *spread) pick() driver.Store {
	return s.nodes[s.next.Add(1)%uint64(len(s.nodes))]
}

func (s *spread) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	return s.pick().Get(ctx, key)
}

func (s *spread) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	return s.pick().Put(ctx, key, value, cond)
}

func (s *spread) Delete(ctx context.Context, key string, cond storage.Condition) error {
	return s.pick().Delete(ctx, key, cond)
}

func (s *spread) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	return s.pick().ListAfter(ctx, prefix, after)
}

// clusterSlots bounds how many checks of the suite use the cluster at
// once. The suite runs its checks side by side; on a 2-core machine that
// also runs other packages' tests, all of them at once (1,000-key lists,
// 8 MB values, racing writers) on four MinIO processes cost the cluster
// its write quorum for tens of seconds (CI: 503 SlowDownWrite from every
// check, every node up). The checks are about the store's semantics, not
// about load, which the Worker scenarios cover.
var clusterSlots = make(chan struct{}, 4)

func newClusterStore(t *testing.T) *spread {
	t.Helper()
	c, bkt := clusterEnv(t)
	clusterSlots <- struct{}{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster logs:\n%s", c.Logs())
		}
		<-clusterSlots
	})
	if err := c.Writable(t.Context(), time.Minute); err != nil {
		t.Fatalf("the cluster lost write quorum and did not regain it in a minute: %v", err)
	}
	prefix := randomPrefix()
	sp := &spread{}
	for i := range c.Nodes {
		s, err := openWithClient(c.Client(i, &http.Client{Transport: transport}), bkt, prefix)
		if err != nil {
			t.Fatal(err)
		}
		sp.nodes = append(sp.nodes, s.d)
	}
	return sp
}

// TestConformanceCluster runs the conformance suite on a 4-node MinIO
// cluster (one erasure set of 8 drives, EC:4), every call of a store going
// to the next node. All nodes are up: the faults of a node going down and
// coming back are the Worker scenarios' (examples/chaos).
func TestConformanceCluster(t *testing.T) {
	storetest.TestDriver(t, func(t *testing.T) driver.Store { return newClusterStore(t) }, storetest.Capabilities{ContentVersions: true, NonAtomicConditionalDelete: true})
}
