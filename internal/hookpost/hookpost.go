// Package hookpost makes one attempt to deliver a callback: a JSON body
// POSTed to a URL the caller gave, as one unit of the core under a
// deadline. The job queue's callbacks and the NLM processor's share it, so
// both count a 2xx as delivery, follow what their client follows, and
// read at most 64 KiB of an answer.
package hookpost

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/runconveyor/conveyor/internal/deadline"
)

// Doer sends a request: an *http.Client, or a caller's own.
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// Post sends body to target with client, as the unit name of u under
// limit (the unit is left behind, counted, if client ignores its
// context). An answer other than 2xx is an error naming its status.
func Post(ctx context.Context, u *deadline.Units, name string, limit time.Duration, client Doer, target string, body []byte) error {
	_, err := deadline.Do(ctx, u, name, limit, func(ctx context.Context) (struct{}, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
		if err != nil {
			return struct{}{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return struct{}{}, err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return struct{}{}, fmt.Errorf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
		}
		return struct{}{}, nil
	})
	return err
}
