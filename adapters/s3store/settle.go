package s3store

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/runconveyor/conveyor/storage/driver"
)

// defaultClusterSettle is Settle on a MinIO cluster when Config.Settle is
// 0. The longest wrong answers measured on a 4-node cluster were false
// 404s for existing keys up to 16 s after a node restarted (14 s in the
// test kit's own run, under 1 s in most); 40 s is that, doubled, with a
// margin for a slower machine (docs/stores.md).
const defaultClusterSettle = 40 * time.Second

var _ driver.Settler = (*Driver)(nil)

// Settle implements driver.Settler: how long the store may answer wrongly
// after a disturbance (see Config.Settle). 0 on a single-drive server and
// on AWS S3.
func (s *Driver) Settle() time.Duration { return time.Duration(s.settle.Load()) }

// healthPath is MinIO's unauthenticated cluster health check; its answer
// carries the write quorum of the erasure set (X-Minio-Write-Quorum): 1 on
// a single drive, more when a write needs several drives.
const healthPath = "/minio/health/cluster"

// detectCluster sets Settle to defaultClusterSettle when Settle is
// automatic and an endpoint says it is a MinIO erasure set that needs
// more than one drive to write. Any other answer (AWS S3, a proxy, an
// error) leaves it as it was.
func (s *Driver) detectCluster(ctx context.Context) {
	if s.pool == nil || s.settleCfg != 0 || s.Settle() > 0 {
		return
	}
	doer, ok := s.client.Options().HTTPClient.(httpDoer)
	if !ok {
		return
	}
	for _, u := range s.pool.urls() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+healthPath, nil)
		if err != nil {
			continue
		}
		resp, err := doer.Do(req)
		if err != nil {
			continue
		}
		_ = resp.Body.Close()
		q, err := strconv.Atoi(resp.Header.Get("X-Minio-Write-Quorum"))
		if err != nil {
			continue
		}
		if q > 1 {
			s.settle.Store(int64(defaultClusterSettle))
		}
		return
	}
}
