package miniotest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// The shape of a cluster: ClusterNodes processes with DrivesPerNode drives
// each, 8 drives in one erasure set with 4 parity drives (EC:4), the
// smallest distributed layout that keeps writing with one node down.
const (
	ClusterNodes  = 4
	DrivesPerNode = 2
)

// Cluster is a distributed MinIO deployment on one machine: ClusterNodes
// server processes on 127.0.0.1, each on its own free port and with its own
// drives under one data directory, sharing root credentials. Any node
// serves the whole bucket namespace.
type Cluster struct {
	// Nodes are the server processes, in the order of the server command
	// line. Each one's Halt and Resume stop and restart that node alone
	// (Cluster.Halt and Cluster.Resume name them by index).
	Nodes []*Server
	// AccessKey, SecretKey and Region are the same on every node.
	AccessKey, SecretKey, Region string

	dir      string
	stopOnce sync.Once
	stopErr  error
}

// StartCluster launches a cluster with its data in a new directory under
// parent (see DataParent) and waits until every node serves writes with
// quorum. The caller must call Stop, which also removes that directory.
func StartCluster(ctx context.Context, bin, parent string) (*Cluster, error) {
	return withPortRetries(ctx, func() (*Cluster, error) { return startCluster(ctx, bin, parent) })
}

func startCluster(ctx context.Context, bin, parent string) (*Cluster, error) {
	dir, err := os.MkdirTemp(parent, "minio-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{AccessKey: "conveyor-" + randomHex(4), SecretKey: randomHex(16), Region: "us-east-1", dir: dir}
	apiPorts := make([]int, ClusterNodes)
	consolePorts := make([]int, ClusterNodes)
	for i := range apiPorts {
		if apiPorts[i], err = freePort(); err == nil {
			consolePorts[i], err = freePort()
		}
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	// Every node gets the same command line: all 8 drives, each named by
	// its node's host:port, so that a node finds itself by its address (and
	// by _MINIO_SERVER_LOCAL, which MinIO uses instead in a container, where
	// a 127.0.0.1 endpoint would otherwise wait to resolve forever). The
	// drives are listed one by one, not with ellipses: each argument with
	// ellipses would be a pool of its own, and one pool of 8 drives makes
	// one erasure set of 8.
	var layout []string
	for i, p := range apiPorts {
		for d := range DrivesPerNode {
			layout = append(layout, fmt.Sprintf("http://127.0.0.1:%d%s", p, filepath.Join(dir, fmt.Sprintf("n%d", i+1), fmt.Sprintf("d%d", d+1))))
		}
	}
	for i := range ClusterNodes {
		n, err := c.node(bin, i, apiPorts[i], consolePorts[i], layout)
		if err == nil {
			c.Nodes = append(c.Nodes, n)
			err = n.launch()
		}
		if err != nil {
			_ = c.Stop()
			return nil, err
		}
	}
	// The nodes wait for each other: only once all are up does any of
	// them have quorum.
	errs := make([]error, len(c.Nodes))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Go(func() {
			if errs[i] = n.waitLive(wctx, 90*time.Second); errs[i] != nil {
				cancel() // one node failed: the others will never be ready
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// node prepares (does not start) node i of the cluster.
func (c *Cluster) node(bin string, i, apiPort, consolePort int, layout []string) (*Server, error) {
	host := fmt.Sprintf("127.0.0.1:%d", apiPort)
	s := &Server{
		Endpoint:  "http://" + host,
		AccessKey: c.AccessKey,
		SecretKey: c.SecretKey,
		Region:    c.Region,
		dir:       filepath.Join(c.dir, fmt.Sprintf("n%d", i+1)),
		waitErr:   make(chan error, 1),
		bin:       bin,
		// 200 only once this node has joined and the cluster has write
		// quorum.
		readyPath:   "/minio/health/cluster",
		resumeLimit: 60 * time.Second,
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	s.logPath = filepath.Join(c.dir, fmt.Sprintf("n%d.log", i+1))
	s.args = append([]string{"server", "--address", host,
		"--console-address", fmt.Sprintf("127.0.0.1:%d", consolePort), "--quiet"}, layout...)
	s.cmd = exec.Command(bin, s.args...)
	s.cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+s.AccessKey,
		"MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_UPDATE=off",
		"MINIO_BROWSER=off",
		"MINIO_REGION="+s.Region,
		// Drives on one file system, possibly the root disk: allowed
		// for tests only.
		"MINIO_CI_CD=1",
		"_MINIO_SERVER_LOCAL="+host,
		"MINIO_STORAGE_CLASS_STANDARD=EC:4",
	)
	return s, nil
}

// launch starts the prepared process, its output going to its log.
func (s *Server) launch() error {
	logf, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child keeps its own descriptor
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	dieWithParent(s.cmd)
	if err := s.cmd.Start(); err != nil {
		return err
	}
	go func() { s.waitErr <- s.cmd.Wait() }()
	return nil
}

// Endpoints are the nodes' S3 API URLs, in node order.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		eps[i] = n.Endpoint
	}
	return eps
}

// Halt stops node i (SIGKILL when kill is set, else SIGINT) and waits for
// it, keeping its drives, port and credentials for Resume. The other nodes
// go on serving: with one node of four down, 6 of 8 drives remain, above
// both read (4) and write (5) quorum.
func (c *Cluster) Halt(i int, kill bool) error { return c.Nodes[i].Halt(kill) }

// Resume restarts halted node i and waits until it has rejoined: its
// cluster health check answers 200 and, when every other node is running,
// it sees all of their drives online (the check with maintenance=true,
// which leaves the node's own drives out). Server.Resume on c.Nodes[i]
// returns at the first of these, when a load balancer would send it
// requests again. Neither ends the node's false answers: for an object
// written while it was down it can still answer 404 for a while (up to
// 14 s measured in TestCluster), a fault of the store that tests provoke
// on purpose.
func (c *Cluster) Resume(ctx context.Context, i int) error {
	n := c.Nodes[i]
	if err := n.Resume(ctx); err != nil {
		return err
	}
	for j, o := range c.Nodes {
		if j != i && o.isHalted() {
			return nil
		}
	}
	return n.waitPath(ctx, "/minio/health/cluster?maintenance=true", n.resumeLimit)
}

// Writable waits, up to limit, until every running node's cluster health
// check answers 200: each of them sees write quorum. A loaded machine can
// take quorum away for a while (internode calls time out and drives are
// counted offline; seen in CI as 503 SlowDownWrite with every node up),
// and a test about the store's semantics rather than about that waits
// here first.
func (c *Cluster) Writable(ctx context.Context, limit time.Duration) error {
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		if n.isHalted() {
			continue
		}
		wg.Go(func() { errs[i] = n.waitPath(ctx, "/minio/health/cluster", limit) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Client returns an S3 client talking to node i (see Server.Client).
func (c *Cluster) Client(i int, httpClient *http.Client) *s3.Client {
	return c.Nodes[i].Client(httpClient)
}

// CreateBucket creates a bucket with a fresh random name through the first
// running node and returns it.
func (c *Cluster) CreateBucket(ctx context.Context) (string, error) {
	var lastErr error
	for _, n := range c.Nodes {
		if n.isHalted() {
			continue
		}
		name, err := n.CreateBucket(ctx)
		if err == nil {
			return name, nil
		}
		lastErr = err
	}
	if lastErr == nil {
		lastErr = errors.New("miniotest: every node is halted")
	}
	return "", lastErr
}

// Dir is the directory holding every node's drives and logs.
func (c *Cluster) Dir() string { return c.dir }

// Logs returns the tail of every node's log, for a failing test's message.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for i, n := range c.Nodes {
		fmt.Fprintf(&b, "--- node %d (%s)\n%s\n", i, n.Endpoint, n.logTail())
	}
	return b.String()
}

// Stop ends every node (at once: a node shutting down waits for its peers
// otherwise), waits for them and removes the data directory. It is safe to
// call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var wg sync.WaitGroup
		for _, n := range c.Nodes {
			wg.Go(func() { _ = n.Stop() })
		}
		wg.Wait()
		c.stopErr = os.RemoveAll(c.dir)
	})
	return c.stopErr
}

func (s *Server) isHalted() bool {
	s.restart.Lock()
	defer s.restart.Unlock()
	return s.halted
}

// NewCluster starts a cluster for one test (skipping or failing per
// Require) and stops it when the test ends. Starting one costs seconds
// (4 processes that find each other): prefer SharedCluster for a package.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	bin := Require(t)
	start := time.Now()
	c, err := StartCluster(context.Background(), bin, DataParent())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("MinIO cluster of %d nodes started in %v: %s", ClusterNodes, time.Since(start).Round(10*time.Millisecond), strings.Join(c.Endpoints(), " "))
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// SharedCluster starts one cluster lazily on first use and hands the same
// one to every caller. The package's TestMain must call Stop after m.Run.
type SharedCluster struct {
	once sync.Once
	c    *Cluster
	err  error
}

// Get returns the shared cluster, starting it on first call; it skips or
// fails t per Require when no binary is found.
func (sh *SharedCluster) Get(t testing.TB) *Cluster {
	t.Helper()
	bin := Require(t)
	sh.once.Do(func() {
		start := time.Now()
		sh.c, sh.err = StartCluster(context.Background(), bin, DataParent())
		if sh.err == nil {
			t.Logf("MinIO cluster of %d nodes started in %v", ClusterNodes, time.Since(start).Round(10*time.Millisecond))
		}
	})
	if sh.err != nil {
		t.Fatalf("starting a MinIO cluster: %v", sh.err)
	}
	return sh.c
}

// Stop stops the shared cluster if it was started.
func (sh *SharedCluster) Stop() error {
	if sh.c == nil {
		return nil
	}
	return sh.c.Stop()
}
