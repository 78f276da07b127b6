// Package s3proxy puts a reverse proxy on 127.0.0.1 in front of an S3
// server that drops the conditional headers (If-Match, If-None-Match) of
// every request and signs it again with the server's credentials, as a
// gateway that does not pass them on would: through it, the server ignores
// every condition of a write. It is the store the start-up probe and the
// conformance check must refuse.
package s3proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
)

// Target is the server behind the proxy and what signs for it.
type Target struct {
	Endpoint             string // e.g. http://127.0.0.1:9000
	AccessKey, SecretKey string
	Region               string
}

// Proxy is a running header-stripping proxy.
type Proxy struct {
	// Endpoint is the proxy's S3 API URL, on 127.0.0.1.
	Endpoint string
	// Stripped counts the requests that lost a conditional header.
	Stripped atomic.Int64

	srv       *httptest.Server
	transport *http.Transport
}

// Dropped are the headers the proxy drops.
var Dropped = []string{"If-Match", "If-None-Match"}

// emptyHash is the SHA-256 of no bytes, a bodiless request's payload hash.
var emptyHash = func() string { s := sha256.Sum256(nil); return hex.EncodeToString(s[:]) }()

// Start starts a proxy in front of target. Close stops it.
func Start(target Target) (*Proxy, error) {
	u, err := url.Parse(target.Endpoint)
	if err != nil {
		return nil, err
	}
	p := &Proxy{transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	// S3 signs the path as sent, not escaped again.
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	creds := aws.Credentials{AccessKeyID: target.AccessKey, SecretAccessKey: target.SecretKey}
	rp := &httputil.ReverseProxy{
		Transport: p.transport,
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			dropped := false
			for _, h := range Dropped {
				if r.Out.Header.Get(h) != "" {
					r.Out.Header.Del(h)
					dropped = true
				}
			}
			if dropped {
				p.Stripped.Add(1)
			}
			// The client signed for the proxy's host and the headers it
			// sent: sign again for the server and what is left.
			hash := r.Out.Header.Get("X-Amz-Content-Sha256")
			if hash == "" {
				hash = emptyHash
			}
			r.Out.Header.Del("Authorization")
			// Signing reads only the headers and clock: it cannot fail
			// here, and a request it did not sign is refused by the server.
			_ = signer.SignHTTP(context.Background(), creds, r.Out, hash, "s3", target.Region, time.Now())
		},
	}
	p.srv = httptest.NewServer(rp)
	p.Endpoint = p.srv.URL
	return p, nil
}

// Close stops the proxy and closes its connections to the server.
func (p *Proxy) Close() {
	p.srv.Close()
	p.transport.CloseIdleConnections()
}

// New starts a proxy in front of the MinIO server srv for one test, and
// stops it when the test ends.
func New(t testing.TB, srv *miniotest.Server) *Proxy {
	t.Helper()
	p, err := Start(Target{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}
