// Package miniotest starts a real MinIO server for tests: on a free
// 127.0.0.1 port, with data in a temporary directory, stopped (and waited
// for) when the test or package is done.
//
// The binary is found through $MINIO_BIN, then PATH, then
// $(go env GOPATH)/bin/minio. Without one, tests skip with a message saying
// how to install it, unless CONVEYOR_REQUIRE_MINIO is set (as in CI), in
// which case they fail: a skipped s3store suite must not pass CI.
package miniotest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// RequireEnv names the variable that turns a missing binary into a failure.
const RequireEnv = "CONVEYOR_REQUIRE_MINIO"

// InstallHint is what a skipped test says.
const InstallHint = "MinIO server binary not found: install it with scripts/install-tools.sh " +
	"(go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c, about 8 minutes once) " +
	"or set MINIO_BIN to its path"

// Server is one running MinIO process.
type Server struct {
	// Endpoint is the S3 API URL, e.g. http://127.0.0.1:41234.
	Endpoint string
	// AccessKey and SecretKey are the root credentials.
	AccessKey, SecretKey string
	// Region is the region clients should sign for.
	Region string

	cmd      *exec.Cmd
	dir      string
	logPath  string
	waitErr  chan error
	stopOnce sync.Once
	stopErr  error

	// What Halt and Resume need to start the same server again.
	bin     string
	args    []string
	restart sync.Mutex
	halted  bool

	// readyPath is the health check Start and Resume wait for (empty: the
	// liveness check); a cluster's node waits for its cluster check, which
	// answers 200 only once that node serves writes with quorum.
	readyPath string
	// resumeLimit bounds Resume's wait (0: 30 s).
	resumeLimit time.Duration
}

// FindBinary returns the path of the MinIO server binary, or an error
// carrying InstallHint.
func FindBinary() (string, error) {
	if p := os.Getenv("MINIO_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("MINIO_BIN=%s: %w; %s", p, err, InstallHint)
		}
		return p, nil
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p, nil
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gopath = strings.TrimSpace(string(out))
		}
	}
	for _, gp := range filepath.SplitList(gopath) {
		p := filepath.Join(gp, "bin", "minio")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", errors.New(InstallHint)
}

// Require returns the binary's path, or ends the test: t.Fatal when
// CONVEYOR_REQUIRE_MINIO is set, t.Skip otherwise.
func Require(t testing.TB) string {
	t.Helper()
	bin, err := FindBinary()
	if err == nil {
		return bin
	}
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("%s is set but: %v", RequireEnv, err)
	}
	t.Skip(err)
	return ""
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Start launches bin with its data in a new directory under parent (see
// DataParent) and waits until it is live. The caller must call Stop, which
// also removes that directory.
func Start(ctx context.Context, bin, parent string) (*Server, error) {
	return withPortRetries(ctx, func() (*Server, error) { return start(ctx, bin, parent) })
}

// withPortRetries calls start up to three times: a free port can be taken
// between its probe and the server's bind.
func withPortRetries[T any](ctx context.Context, start func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for range 3 {
		if v, err = start(); err == nil || ctx.Err() != nil {
			break
		}
	}
	return v, err
}

func start(ctx context.Context, bin, parent string) (*Server, error) {
	apiPort, err := freePort()
	if err != nil {
		return nil, err
	}
	consolePort, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "minio-")
	if err != nil {
		return nil, err
	}
	s := &Server{
		Endpoint:  fmt.Sprintf("http://127.0.0.1:%d", apiPort),
		AccessKey: "conveyor-" + randomHex(4),
		SecretKey: randomHex(16),
		Region:    "us-east-1",
		dir:       dir,
		logPath:   filepath.Join(dir, "minio.log"),
		waitErr:   make(chan error, 1),
	}
	logf, err := os.Create(s.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child keeps its own descriptor
	s.bin = bin
	s.args = []string{"server", filepath.Join(dir, "data"),
		"--address", fmt.Sprintf("127.0.0.1:%d", apiPort),
		"--console-address", fmt.Sprintf("127.0.0.1:%d", consolePort),
		"--quiet"}
	s.cmd = exec.Command(bin, s.args...)
	s.cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+s.AccessKey,
		"MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_UPDATE=off",
		"MINIO_BROWSER=off",
		"MINIO_REGION="+s.Region,
	)
	// *os.File outputs: no copying goroutines, so goleak stays quiet.
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	dieWithParent(s.cmd)
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	go func() { s.waitErr <- s.cmd.Wait() }()
	if err := s.waitLive(ctx, 60*time.Second); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Server) waitLive(ctx context.Context, limit time.Duration) error {
	path := s.readyPath
	if path == "" {
		path = "/minio/health/live"
	}
	return s.waitPath(ctx, path, limit)
}

// waitPath polls path on the server until it answers 200, the process
// exits, or limit passes.
func (s *Server) waitPath(ctx context.Context, path string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+path, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-s.waitErr:
			s.waitErr <- err // Stop reads it again
			return fmt.Errorf("minio exited before it was live (%v); log:\n%s", err, s.logTail())
		case <-ctx.Done():
			return fmt.Errorf("minio not ready at %s%s: %w; log:\n%s", s.Endpoint, path, ctx.Err(), s.logTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(bytes.TrimSpace(b))
}

// Stop ends the process, waits for it and removes its directory. It is
// safe to call more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.restart.Lock()
		defer s.restart.Unlock()
		if s.cmd.Process != nil && !s.halted {
			_ = s.cmd.Process.Signal(os.Interrupt)
			select {
			case <-s.waitErr:
			case <-time.After(10 * time.Second):
				_ = s.cmd.Process.Kill()
				<-s.waitErr
			}
		}
		s.stopErr = os.RemoveAll(s.dir)
	})
	return s.stopErr
}

// Client returns an S3 client for the server: path-style, static root
// credentials, checksums only when required (as MinIO expects). Pass the
// returned transport's CloseIdleConnections to cleanup so no keep-alive
// goroutines outlive the test.
func (s *Server) Client(httpClient *http.Client) *s3.Client {
	return s3.New(s3.Options{
		Region:                     s.Region,
		BaseEndpoint:               aws.String(s.Endpoint),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		HTTPClient:                 httpClient,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// CreateBucket creates a bucket with a fresh random name and returns it.
func (s *Server) CreateBucket(ctx context.Context) (string, error) {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	name := "conveyor-" + randomHex(6)
	_, err := s.Client(&http.Client{Transport: tr}).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
	return name, err
}

// DirEnv names a variable that sets where servers keep their data.
const DirEnv = "CONVEYOR_MINIO_TMPDIR"

// DataParent is where servers keep their data: $CONVEYOR_MINIO_TMPDIR, else
// /dev/shm when it is a writable directory with at least 2 GiB free (a
// container's default 64 MiB is too small), else os.TempDir(). Memory is
// preferred so that tests and benchmarks measure the client side, not the
// disk's fsync latency, which varies by ±30 % between runs on a VM.
func DataParent() string {
	if d := os.Getenv(DirEnv); d != "" {
		return d
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &fs); err == nil && uint64(fs.Bavail)*uint64(fs.Bsize) >= 2<<30 {
		if f, err := os.CreateTemp("/dev/shm", "conveyor-probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return "/dev/shm"
		}
	}
	return os.TempDir()
}

// New starts a server for one test (skipping or failing per Require) and
// stops it when the test ends. Prefer Shared for a whole package.
func New(t testing.TB) *Server {
	t.Helper()
	bin := Require(t)
	s, err := Start(context.Background(), bin, DataParent())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// Shared starts one server lazily on first use and hands the same one to
// every caller, because starting MinIO costs seconds. The package's
// TestMain must call Stop after m.Run.
type Shared struct {
	once sync.Once
	srv  *Server
	err  error
	dir  string
}

// Get returns the shared server, starting it on first call; it skips or
// fails t per Require when no binary is found.
func (sh *Shared) Get(t testing.TB) *Server {
	t.Helper()
	bin := Require(t)
	sh.once.Do(func() {
		sh.dir, sh.err = os.MkdirTemp(DataParent(), "conveyor-miniotest-")
		if sh.err != nil {
			return
		}
		sh.srv, sh.err = Start(context.Background(), bin, sh.dir)
	})
	if sh.err != nil {
		t.Fatalf("starting MinIO: %v", sh.err)
	}
	return sh.srv
}

// Stop stops the shared server if it was started.
func (sh *Shared) Stop() error {
	var err error
	if sh.srv != nil {
		err = sh.srv.Stop()
	}
	if sh.dir != "" {
		err = errors.Join(err, os.RemoveAll(sh.dir))
	}
	return err
}
