package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
)

// otlpReceiver is an OTLP/HTTP trace receiver on 127.0.0.1: it decodes
// each export request's protobuf and keeps its spans and the services
// that sent them.
type otlpReceiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	services map[string]bool
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	rcv := &otlpReceiver{services: map[string]bool{}}
	rcv.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		raw, err := io.ReadAll(body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(raw, &req)
		}
		if err != nil {
			t.Errorf("OTLP request: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rcv.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					rcv.services[kv.GetValue().GetStringValue()] = true
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				rcv.spans = append(rcv.spans, ss.GetSpans()...)
			}
		}
		rcv.mu.Unlock()
		resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	}))
	t.Cleanup(rcv.srv.Close)
	return rcv
}

func spanString(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// TestOTLPExport: with OTEL_EXPORTER_OTLP_ENDPOINT set, the Worker exports
// its spans over OTLP/HTTP; a run submitted with a traceparent header
// appears as spans of that trace, with its id, under the Worker's service
// name, by the time the Worker has stopped.
func TestOTLPExport(t *testing.T) {
	// Not parallel: it sets the process's OTEL_ variables, which the
	// exporter reads.
	rcv := newOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "")
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		spanID  = "00f067aa0ba902b7"
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runWorker(ctx, []string{"-addr", "127.0.0.1:0", "-data", t.TempDir(), "-step-pause", "10ms", "-poll", "50ms", "-drain", "5s"},
			io.Discard, io.Discard, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("worker ended before serving: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("worker did not start in 30 s")
	}
	req, err := http.NewRequest("POST", "http://"+addr+"/agents/run", bytes.NewReader([]byte(`{"agent_slug":"`+AgentResearch+`"}`)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+spanID+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sub struct {
		RunID string `json:"run_id"`
	}
	err = decodeJSON(resp, &sub)
	if err != nil || sub.RunID == "" {
		t.Fatalf("submit: %d, %v", resp.StatusCode, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if st, err := (&client.Client{BaseURL: "http://" + addr}).Wait(wctx, sub.RunID); err != nil || st.Status != "completed" {
		t.Fatalf("Wait: %+v, %v", st, err)
	}
	cancel() // the drain flushes the spans
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("worker: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("worker did not stop")
	}

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if !rcv.services[serviceName] {
		t.Errorf("services %v, want %s", rcv.services, serviceName)
	}
	byName := map[string]int{}
	for _, s := range rcv.spans {
		if spanString(s, "conveyor.run.id") != sub.RunID && s.GetName() != "POST /agents/run" {
			continue // the demo's other work
		}
		if got := hex.EncodeToString(s.GetTraceId()); got != traceID {
			t.Errorf("span %s of run %s in trace %s, want %s", s.GetName(), sub.RunID, got, traceID)
		}
		if s.GetName() == "POST /agents/run" && hex.EncodeToString(s.GetParentSpanId()) != spanID {
			t.Errorf("server span's parent %x, want the caller's %s", s.GetParentSpanId(), spanID)
		}
		byName[s.GetName()]++
	}
	if byName["POST /agents/run"] != 1 || byName["conveyor.submit"] != 1 || byName["conveyor.run"] != 1 || byName["conveyor.step"] != 3 {
		t.Errorf("exported spans of the run %v; want the server's, the submit's, one execution and 3 step attempts", byName)
	}
}

func decodeJSON(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
