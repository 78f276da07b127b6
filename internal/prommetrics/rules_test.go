package prommetrics_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

// ruleFile is a Prometheus rule file, the fields an alerting rule has.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// checkRules parses a rule file strictly (unknown fields are errors) and
// checks that every rule is a complete alert whose expression names only
// metrics in known.
func checkRules(src []byte, known map[string]bool) error {
	var f ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return err
	}
	if len(f.Groups) == 0 {
		return fmt.Errorf("no rule groups")
	}
	var errs []string
	seen := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			switch {
			case r.Alert == "" || r.Expr == "":
				errs = append(errs, fmt.Sprintf("group %s: a rule without alert or expr", g.Name))
				continue
			case seen[r.Alert]:
				errs = append(errs, fmt.Sprintf("alert %s twice", r.Alert))
			case r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "":
				errs = append(errs, fmt.Sprintf("alert %s: needs labels.severity and annotations summary and description", r.Alert))
			}
			seen[r.Alert] = true
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					errs = append(errs, fmt.Sprintf("alert %s: for: %v", r.Alert, err))
				}
			}
			names, err := metricNames(r.Expr)
			if err != nil {
				errs = append(errs, fmt.Sprintf("alert %s: %v", r.Alert, err))
			}
			if len(names) == 0 {
				errs = append(errs, fmt.Sprintf("alert %s: expr names no metric", r.Alert))
			}
			for _, n := range names {
				if !known[n] {
					errs = append(errs, fmt.Sprintf("alert %s: unknown metric %s", r.Alert, n))
				}
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

// PromQL's words that are not metric names: keywords and aggregations
// (functions are recognized by the "(" after them).
var promqlWords = map[string]bool{
	"and": true, "or": true, "unless": true, "by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true, "offset": true, "bool": true, "atan2": true, "start": true, "end": true,
	"inf": true, "nan": true,
	// Aggregations, which may take a by or without clause before their "(".
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
}

// Keywords followed by a parenthesized list of label names.
var labelListWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

var (
	identRE  = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	numberRE = regexp.MustCompile(`^(0x[0-9a-fA-F]+|[0-9][0-9a-zA-Z_.]*([eE][+-]?[0-9]+)?)`)
)

// metricNames returns the metric names a PromQL expression selects, in
// order: identifiers that are not keywords, not functions or aggregations
// (followed by "("), not label names (inside {…} or after by, without, on,
// ignoring, group_left, group_right) and not inside strings, ranges […]
// or numbers and durations. It is a tokenizer, not a parser: it is meant
// for the rules in this package.
func metricNames(expr string) ([]string, error) {
	var names []string
	s := expr
	expectLabels := false // the last word takes a label list
	for len(s) > 0 {
		c := s[0]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			s = s[1:]
		case c == '#': // a comment runs to the end of the line
			i := strings.IndexByte(s, '\n')
			if i < 0 {
				i = len(s) - 1
			}
			s = s[i+1:]
		case c == '"' || c == '\'' || c == '`':
			i := 1
			for i < len(s) && s[i] != c {
				if s[i] == '\\' && c != '`' {
					i++
				}
				i++
			}
			if i >= len(s) {
				return names, fmt.Errorf("unterminated string in %q", expr)
			}
			s = s[i+1:]
		case c == '{' || c == '[':
			closer := map[byte]byte{'{': '}', '[': ']'}[c]
			i, err := skipTo(s, closer)
			if err != nil {
				return names, fmt.Errorf("%w in %q", err, expr)
			}
			s = s[i+1:]
		case c == '(' && expectLabels:
			i, err := skipTo(s, ')')
			if err != nil {
				return names, fmt.Errorf("%w in %q", err, expr)
			}
			s = s[i+1:]
			expectLabels = false
		case numberRE.MatchString(s):
			s = s[len(numberRE.FindString(s)):]
			expectLabels = false
		case identRE.MatchString(s):
			w := identRE.FindString(s)
			s = s[len(w):]
			rest := strings.TrimLeft(s, " \t\r\n")
			lw := strings.ToLower(w)
			switch {
			case labelListWords[lw]:
				expectLabels = true
				continue
			case promqlWords[lw], strings.HasPrefix(rest, "("):
			default:
				names = append(names, w)
			}
			expectLabels = false
		default:
			s = s[1:] // an operator, a comma, a parenthesis, @
			expectLabels = false
		}
	}
	return names, nil
}

// skipTo returns the index of the closer of the bracket s opens, past
// strings.
func skipTo(s string, closer byte) (int, error) {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case closer:
			return i, nil
		case '"', '\'', '`':
			q := s[i]
			for i++; i < len(s) && s[i] != q; i++ {
				if s[i] == '\\' && q != '`' {
					i++
				}
			}
		}
	}
	return 0, fmt.Errorf("no %q", closer)
}

// registeredNames exercises every metric the adapter registers once
// (every labelled vector is empty until used, and gathers nothing) and
// returns the names a query can select: each family's name, and for
// histograms its _bucket, _sum and _count series.
func registeredNames(t *testing.T) map[string]bool {
	t.Helper()
	reg, m := newMetrics(t)
	m.RunTransition("research", "canonical", "queued", "running")
	m.RunFinished("agent", "completed", time.Second)
	if err := m.WatchRuns(fixedRuns{"running": 1}); err != nil {
		t.Fatal(err)
	}
	m.Idempotency("api", true)
	m.StepFinished("agent", "step", "completed", time.Second)
	m.StepAbandoned("agent", "step")
	m.RecordQuarantined("job")
	m.JobTransition(lifecycle.JobBrief, lifecycle.JobRetryBackoff, lifecycle.JobQueued, time.Second)
	m.JobFinished(lifecycle.JobBrief, lifecycle.JobDead, time.Second)
	m.AttemptFailed(lifecycle.JobBrief, lifecycle.JobArtifactWrite, codes.JobArtifactWriteError)
	m.LeaseLost(lifecycle.JobBrief)
	m.HandlerAbandoned(lifecycle.JobBrief, lifecycle.JobNotebookLMCall)
	if err := m.WatchQueue(fixedQueue{{Agent: "agent", Ready: 1, Age: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, mf := range mfs {
		known[mf.GetName()] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				known[mf.GetName()+suffix] = true
			}
		}
	}
	return known
}

// fixedRuns is a RunsReader of a fixed reading.
type fixedRuns map[string]int

func (f fixedRuns) ActiveRuns(context.Context) (map[string]int, error) { return f, nil }

// fixedQueue is a QueueReader of a fixed reading.
type fixedQueue []jobqueue.AgentDepth

func (f fixedQueue) Depths(context.Context) ([]jobqueue.AgentDepth, error) { return f, nil }

// TestRules: rules.yml is a well-formed rule file whose alerts name only
// metrics the adapter registers, and it has every alert of docs/spec.md#metrics.
func TestRules(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	known := registeredNames(t)
	for _, n := range []string{"gwi_run_transitions_total", "gwi_run_duration_seconds", "gwi_run_active_gauge", "gwi_idempotency_hits_total",
		"conveyor_queue_depth", "conveyor_queue_oldest_ready_age_seconds", "conveyor_queue_scrape_errors_total"} {
		if !known[n] {
			t.Fatalf("%s not gathered; gathered %v", n, known)
		}
	}
	if err := checkRules(src, known); err != nil {
		t.Fatal(err)
	}
	for _, alert := range []string{"ConveyorJobQueuedTooLong", "ConveyorDeadJobRateHigh", "ConveyorArtifactWriteFailures", "ConveyorContextAssemblyTimeouts"} {
		if !bytes.Contains(src, []byte("alert: "+alert+"\n")) {
			t.Errorf("rules.yml has no alert %s (docs/spec.md#metrics)", alert)
		}
	}
}

// TestRulesCheckerFindsUnknownMetrics: the checker fails a rule file
// naming a metric the adapter does not register, or a malformed one.
func TestRulesCheckerFindsUnknownMetrics(t *testing.T) {
	t.Parallel()
	known := registeredNames(t)
	for name, src := range map[string]string{
		"unknown metric": `
groups:
  - name: g
    rules:
      - alert: A
        expr: sum(rate(conveyor_jobs_dead_total[5m])) / sum(rate(conveyor_jobs_no_such_total[5m])) > 0.01
        labels: {severity: warning}
        annotations: {summary: s, description: d}
`,
		"histogram suffix of a counter": `
groups:
  - name: g
    rules:
      - alert: A
        expr: conveyor_jobs_dead_total_count > 0
        labels: {severity: warning}
        annotations: {summary: s, description: d}
`,
		"unknown field": `
groups:
  - name: g
    rules:
      - alert: A
        expression: conveyor_jobs_dead_total > 0
`,
		"bad for": `
groups:
  - name: g
    rules:
      - alert: A
        expr: conveyor_jobs_dead_total > 0
        for: soon
        labels: {severity: warning}
        annotations: {summary: s, description: d}
`,
	} {
		if err := checkRules([]byte(src), known); err == nil {
			t.Errorf("%s: checker passed", name)
		} else if name == "unknown metric" && !strings.Contains(err.Error(), "unknown metric conveyor_jobs_no_such_total") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestMetricNames pins the tokenizer on the shapes the rules use.
func TestMetricNames(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string][]string{
		`max by (agent) (conveyor_queue_oldest_ready_age_seconds) > 300`:                                         {"conveyor_queue_oldest_ready_age_seconds"},
		`histogram_quantile(0.95, sum by (le) (rate(gwi_run_duration_seconds_bucket{status="completed"}[24h])))`: {"gwi_run_duration_seconds_bucket"},
		`sum(increase(a_total{step="X", code=~"T.*"}[30m])) >= 3 unless on() sum(b_total{x='}'}) > 0`:            {"a_total", "b_total"},
		`(sum(a[1h]) or vector(0)) + sum without (job) (b offset 5m) > 1e3 and c @ start()`:                      {"a", "b", "c"},
		`rate(x[5m:1m]) / ignoring(le) group_left(step) y # a comment naming z`:                                  {"x", "y"},
	} {
		got, err := metricNames(expr)
		if err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("metricNames(%s) = %v, want %v", expr, got, want)
		}
	}
}
