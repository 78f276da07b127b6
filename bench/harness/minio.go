package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/storage"
)

// MinIO is a private MinIO server on a free loopback port with its data on
// disk. The SDK's internal/testkit/miniotest does the same for the SDK's tests, but
// a nested module cannot import another module's internal packages, and
// the benchmark wants the data on disk (miniotest prefers /dev/shm, to
// measure the client): the numbers are for "MinIO on disk".
type MinIO struct {
	Endpoint, AccessKey, SecretKey string

	cmd  *exec.Cmd
	dir  string
	done chan error
}

// MinIOBinary finds the server: $MINIO_BIN, PATH, then $(go env GOPATH)/bin
// (where scripts/install-tools.sh puts it).
func MinIOBinary() (string, error) {
	if p := os.Getenv("MINIO_BIN"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p, nil
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, gp := range filepath.SplitList(strings.TrimSpace(string(out))) {
			if p := filepath.Join(gp, "bin", "minio"); fileExists(p) {
				return p, nil
			}
		}
	}
	return "", errors.New("no MinIO server binary: run scripts/install-tools.sh or set MINIO_BIN")
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// FreePort returns a loopback TCP port nobody listens on now.
func FreePort() (int, error) {
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

// StartMinIO starts bin with its data in a new directory under parent and
// waits until it answers. Stop ends it and removes the directory.
func StartMinIO(ctx context.Context, bin, parent string) (*MinIO, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	console, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "minio-")
	if err != nil {
		return nil, err
	}
	m := &MinIO{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), AccessKey: "bench-" + randomHex(4),
		SecretKey: randomHex(16), dir: dir, done: make(chan error, 1)}
	logf, err := os.Create(filepath.Join(dir, "minio.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	m.cmd = exec.Command(bin, "server", filepath.Join(dir, "data"),
		"--address", fmt.Sprintf("127.0.0.1:%d", port), "--console-address", fmt.Sprintf("127.0.0.1:%d", console), "--quiet")
	m.cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+m.AccessKey, "MINIO_ROOT_PASSWORD="+m.SecretKey,
		"MINIO_UPDATE=off", "MINIO_BROWSER=off", "MINIO_REGION=us-east-1")
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	// The kernel kills MinIO if the harness dies, so no server outlives it.
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	go func() { m.done <- m.cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(m.Endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return m, nil
			}
		}
		select {
		case err := <-m.done:
			log, _ := os.ReadFile(filepath.Join(dir, "minio.log"))
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("minio exited (%v): %s", err, log)
		case <-ctx.Done():
			_ = m.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = m.Stop()
			return nil, errors.New("minio did not become live in 60 s")
		}
	}
}

// Stop ends the server, waits for it and removes its data.
func (m *MinIO) Stop() error {
	_ = m.cmd.Process.Signal(os.Interrupt)
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
	return os.RemoveAll(m.dir)
}

// CPU is the user+system CPU time the server has used so far.
func (m *MinIO) CPU() (time.Duration, error) {
	return procTreeCPU(m.cmd.Process.Pid)
}

// minioAddr is what another process needs to reach the same bucket.
type minioAddr struct {
	Endpoint, AccessKey, SecretKey, Bucket string
}

func (a minioAddr) store(ctx context.Context) (*storage.Store, error) {
	return s3store.New(ctx, s3store.Config{Bucket: a.Bucket, Endpoint: a.Endpoint, Region: "us-east-1",
		UsePathStyle: true, AccessKeyID: a.AccessKey, SecretAccessKey: a.SecretKey})
}

// NewMinIO is the SDK on s3store against m, each measurement in a new
// bucket.
func NewMinIO(m *MinIO) Driver {
	d := &sdkDriver{name: NameMinIO, server: m.CPU}
	d.fresh = func(ctx context.Context) (*storage.Store, string, error) {
		a := minioAddr{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, Bucket: "bench-" + randomHex(6)}
		client := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(m.Endpoint), UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider(m.AccessKey, m.SecretKey, "")})
		if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(a.Bucket)}); err != nil {
			return nil, "", err
		}
		s, err := a.store(ctx)
		if err != nil {
			return nil, "", err
		}
		b, _ := json.Marshal(a)
		return s, string(b), nil
	}
	return d
}

func openMinIO(ctx context.Context, addr string) (Driver, error) {
	var a minioAddr
	if err := json.Unmarshal([]byte(addr), &a); err != nil {
		return nil, err
	}
	s, err := a.store(ctx)
	if err != nil {
		return nil, err
	}
	d := &sdkDriver{name: NameMinIO}
	return d, d.use(s, addr)
}
