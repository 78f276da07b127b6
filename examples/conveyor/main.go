// Command conveyor is the Worker's command line: it talks to the HTTP API
// through the SDK's Go client (adapters/httpapi).
//
//	go run ./examples/conveyor submit demo-research -watch
//	go run ./examples/conveyor status run_2026-11-23_...
//	go run ./examples/conveyor watch run_2026-11-23_...
//	go run ./examples/conveyor approve run_... -by owner
//	go run ./examples/conveyor machine approval -format mermaid
//	go run ./examples/conveyor conformance -s3-bucket b -s3-endpoint http://127.0.0.1:9000
//	go run ./examples/conveyor copy -from dir:./data -to sqlite:./data-sqlite/conveyor.db
//	go run ./examples/conveyor show -store sqlite:./data/conveyor.db agents/
//	go run ./examples/conveyor bucket create -s3-bucket conveyor -s3-endpoint http://127.0.0.1:9000
//
// The API address comes from -addr or CONVEYOR_ADDR (default
// 127.0.0.1:8080; host:port as the Worker's -addr takes it, or a URL), the
// bearer token from -token or CONVEYOR_TOKEN;
// without a token, -actor says whom to act as (a Worker without tokens
// serves loopback callers as the actor they name). The two together are
// refused: a Worker with tokens acts as the token's actor, never -actor's.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := cli(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage: conveyor [-addr HOST:PORT|URL] [-token T | -actor A] <command> [args]

  -addr   the Worker's API: host:port as the Worker's -addr, or a URL
          (default $CONVEYOR_ADDR, else 127.0.0.1:8080)
  -token  bearer token (default $CONVEYOR_TOKEN); the Worker acts as its actor
  -actor  the actor to act as when the Worker has no tokens (not with a token)

commands:
  agents                          the agents and their run machines
  submit <agent> [-input JSON] [-key K] [-watch]
  status <run>                    status.json
  steps <run>                     the step files
  runs [<agent>] [-status S] [-limit N] [-cursor C] [-all]
                                  runs newest first, a page at a time (-all: every page)
  watch <run>                     follow a run live (event stream, polling fallback)
  cancel <run> [-reason R]
  approve <run> [-by NAME] [-reason R] [-payload JSON]
  reject <run> [-by NAME] [-reason R] [-payload JSON]
  deliver <run> <event-type> [-id ID] [-source S] [-payload JSON]
                                  the decision or event, payload included, is
                                  handed to the run's next steps
  jobs | job <id> | requeue <id>
  cancel-job <id>                 cancel a job of a type of the user's: QUEUED or
                                  RETRY_BACKOFF at once, RUNNING by its worker
  cancel-job -status S [-type T] [-agent A] [-limit N] [-cursor C] [-all]
                                  cancel the jobs of a filter, at most 100 a call
  jobs enqueue <type> [-agent A] [-payload JSON] [-job-id ID] [-priority 1..9]
               [-run-at RFC3339] [-delay 90s] [-queue Q] [-unique] [-unique-key K] [-unique-period 1h]
                                  create a job: a higher priority starts first (default 5);
                                  it starts no earlier than -run-at and -delay say; a unique
                                  one (by payload, or by -unique-key, within -unique-period)
                                  whose twin exists prints that job, "duplicate": true
  history <job>                   a job's moves (audit log) and attempts, each with its error
  requeue -status S [-type T] [-agent A] [-limit N] [-cursor C] [-all]
                                  requeue the FAILED/DEAD jobs of a filter, at most 100 a call
                                  (-all: until the set is done); prints the cursor to go on
  queues [list]                   each lane's queue, depth, jobs running and pause
  queues pause <queue> | queues resume <queue>
                                  stop a named queue's jobs from starting, on every Worker
                                  ("default" holds agents' jobs); running jobs finish
  inbox [-status pending]         inbox entries; inbox stats
  proposals [pending] [-limit N] [-cursor C] [-all]
                                  the pending proposals, newest first
  proposals show <id> | proposals apply <id> [-reason R] | proposals reject <id> [-reason R]
                                  one proposal; the gateway's decision on it
  quarantine [list] | quarantine restore <qkey>
  schedules [list] | schedules pause <id> | schedules resume <id>
  machine <name> [-format mermaid|dot|json]   canonical, cancelable, approval, step, job, general-job, nlm, inbox
  events [-run ID] [-after ID]    print the event stream
  conformance (-dir DIR | -s3-bucket B [-s3-endpoint URL] [-s3-prefix P/]) [-run REGEXP] [-v]
                                  run the store conformance suite against a store
  copy -from STORE -to STORE [-prefix P]
                                  copy every record into another store, create-only
                                  (each store issues its own versions)
  show -store STORE <key | prefix/>
                                  a record as JSON, or a prefix's as JSON lines
  reconcile -store STORE          put back in its lane every job in flight the store
                                  left unreachable (reads every job: after a store incident)
  bucket create -s3-bucket B [-s3-endpoint URL]
                                  create the S3 bucket a Worker's -s3-bucket names
  STORE: dir:PATH, sqlite:PATH, s3://BUCKET[/PREFIX/] (-s3-endpoint URL or the
  environment), mem:
`

// cli runs one command and returns the exit code: 0, 1 for an error, 2
// for a usage error.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conveyor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	addr := fs.String("addr", envOr("CONVEYOR_ADDR", "127.0.0.1:8080"), "the Worker's API: host:port or a URL")
	token := fs.String("token", os.Getenv("CONVEYOR_TOKEN"), "bearer token")
	actor := fs.String("actor", "", "actor to act as when the Worker has no tokens (X-Conveyor-Actor)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	switch fs.Arg(0) { // a store's, not the Worker's: no API
	case "conformance":
		return conformance(ctx, fs.Args()[1:], stdout, stderr)
	case "copy", "show", "reconcile":
		return storeCommand(ctx, fs.Arg(0), fs.Args()[1:], stdout, stderr)
	case "bucket":
		return bucketCommand(ctx, fs.Args()[1:], stdout, stderr)
	}
	if *token != "" && *actor != "" {
		// A Worker with tokens acts as the token's actor and ignores
		// X-Conveyor-Actor; sending both would let a user believe the
		// -actor was used.
		from, drop := "-token", "drop -token"
		if !flagSet(fs, "token") {
			from, drop = "$CONVEYOR_TOKEN", "unset CONVEYOR_TOKEN"
		}
		fmt.Fprintf(stderr, "conveyor: -actor and a token (%s) together: a Worker with tokens acts as the token's actor and ignores -actor.\n"+
			"Drop -actor to act as the token's actor, or %s to act as %q on a Worker without tokens\n", from, drop, *actor)
		return 2
	}
	base, err := baseURL(*addr)
	if err != nil {
		fmt.Fprintf(stderr, "conveyor: -addr: %v\n%s", err, usage)
		return 2
	}
	c := &client.Client{BaseURL: base, Token: *token, Actor: lifecycle.Actor(*actor)}
	cmd := &command{c: c, printer: printer{out: stdout}, errOut: stderr}
	err = cmd.run(ctx, fs.Arg(0), fs.Args()[1:])
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "conveyor: %v\n%s", err, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "conveyor: %v\n", err)
		return 1
	}
}

// flagSet reports whether the command line set the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

type usageError string

func (e usageError) Error() string { return string(e) }

type command struct {
	c *client.Client
	printer
	errOut io.Writer
}

// printer writes what the commands answer: JSON, a run's status and its
// progress while watched.
type printer struct {
	out io.Writer
}

// invocation is one command's positional arguments and flags.
type invocation struct {
	pos                                        []string
	input, key, reason, by, status, format, id string
	source, runID, after, cursor               string
	jobType, agent                             string
	watch, all                                 bool
	limit                                      int
	job                                        jobFlags // jobs enqueue
}

// jobFlags are the flags of jobs enqueue.
type jobFlags struct {
	payload, id, runAt, queue string
	priority                  int
	delay                     time.Duration
	unique                    bool          // unique by payload
	uniqueKey                 string        // unique by this key
	uniquePeriod              time.Duration // within this period
}

// payload is -payload for approve, reject and deliver: JSON, or nil when
// not given.
func (in *invocation) payload() (json.RawMessage, error) {
	if in.job.payload == "" {
		return nil, nil
	}
	if !json.Valid([]byte(in.job.payload)) {
		return nil, usageError("-payload is not valid JSON")
	}
	return json.RawMessage(in.job.payload), nil
}

// verb is one command: how many positional arguments it takes (-1: it
// checks them itself) and what it does.
type verb struct {
	args int
	do   func(c *command, ctx context.Context, in *invocation) error
}

// verbs is the command table; run looks a command up here.
func verbs() map[string]verb {
	return map[string]verb{
		"agents": {0, (*command).agents},
		"submit": {1, (*command).submit},
		"status": {1, (*command).status},
		"steps":  {1, (*command).steps},
		"runs":   {-1, (*command).runs},
		"watch":  {1, func(c *command, ctx context.Context, in *invocation) error { return c.watch(ctx, in.pos[0]) }},
		"cancel": {1, func(c *command, ctx context.Context, in *invocation) error {
			return c.printStatus(c.c.Cancel(ctx, in.pos[0], in.reason))
		}},
		"approve": {1, func(c *command, ctx context.Context, in *invocation) error {
			p, err := in.payload()
			if err != nil {
				return err
			}
			return c.printStatus(c.c.Decide(ctx, in.pos[0], true, in.by, in.reason, p))
		}},
		"reject": {1, func(c *command, ctx context.Context, in *invocation) error {
			p, err := in.payload()
			if err != nil {
				return err
			}
			return c.printStatus(c.c.Decide(ctx, in.pos[0], false, in.by, in.reason, p))
		}},
		"deliver": {2, func(c *command, ctx context.Context, in *invocation) error {
			p, err := in.payload()
			if err != nil {
				return err
			}
			return c.printStatus(c.c.Deliver(ctx, in.pos[0], in.pos[1], in.id, in.source, p))
		}},
		"jobs": {-1, (*command).jobs},
		"job": {1, func(c *command, ctx context.Context, in *invocation) error {
			return c.printJob(c.c.Job(ctx, in.pos[0]))
		}},
		"cancel-job": {-1, (*command).cancelJob},
		"requeue":    {-1, (*command).requeue},
		"history":    {1, (*command).history},
		"queues":     {-1, (*command).queues},
		"inbox":      {0, (*command).inbox},
		"proposals":  {-1, (*command).proposals},
		"quarantine": {-1, (*command).quarantine},
		"schedules":  {-1, (*command).schedules},
		"machine":    {1, func(c *command, _ context.Context, in *invocation) error { return c.machine(in.pos[0], in.format) }},
		"events":     {0, (*command).events},
	}
}

// run parses a command's flags, which may follow its positional arguments
// (conveyor submit a -watch), and runs it.
func (c *command) run(ctx context.Context, name string, args []string) error {
	v, ok := verbs()[name]
	if !ok {
		return usageError("unknown command " + name)
	}
	in := &invocation{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.errOut)
	fs.StringVar(&in.input, "input", "", "the run's input (JSON)")
	fs.StringVar(&in.key, "key", "", "idempotency key")
	fs.BoolVar(&in.watch, "watch", false, "follow the run until it ends")
	fs.StringVar(&in.reason, "reason", "", "reason")
	fs.StringVar(&in.by, "by", "owner", "who decided")
	fs.StringVar(&in.status, "status", "", "only runs or inbox entries of this status")
	fs.IntVar(&in.limit, "limit", 0, "the most items in a page (default 50, at most 500)")
	fs.StringVar(&in.cursor, "cursor", "", "the page to start at (printed after a page)")
	fs.BoolVar(&in.all, "all", false, "follow every page")
	fs.StringVar(&in.format, "format", "mermaid", "mermaid, dot or json")
	fs.StringVar(&in.id, "id", "", "external event id")
	fs.StringVar(&in.source, "source", "cli", "external event source")
	fs.StringVar(&in.runID, "run", "", "only this run's events")
	fs.StringVar(&in.jobType, "type", "", "only jobs of this type")
	fs.StringVar(&in.agent, "agent", "", "only jobs of this agent; jobs enqueue: the job's agent (default: its type's lane)")
	fs.StringVar(&in.after, "after", "", "resume after this event id")
	fs.StringVar(&in.job.payload, "payload", "", "the job's payload, or the decision's or event's that the run's next steps are given (JSON)")
	fs.StringVar(&in.job.id, "job-id", "", "the job's id (default: a fresh UUID)")
	fs.IntVar(&in.job.priority, "priority", 0, "the job's priority, 1 to 9, higher first (default 5)")
	fs.StringVar(&in.job.runAt, "run-at", "", "the earliest time the job may start (RFC 3339)")
	fs.DurationVar(&in.job.delay, "delay", 0, "how long after the enqueue the job may start (90s, 2h)")
	fs.StringVar(&in.job.queue, "queue", "", "the named queue of a job without an agent (default: its type's)")
	fs.BoolVar(&in.job.unique, "unique", false, "jobs enqueue: a unique job, by its type and payload")
	fs.StringVar(&in.job.uniqueKey, "unique-key", "", "jobs enqueue: a unique job, by its type and this key")
	fs.DurationVar(&in.job.uniquePeriod, "unique-period", 0, "jobs enqueue: a unique job within this period of its run time (1h)")
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return usageError(err.Error())
		}
		if fs.NArg() == 0 {
			break
		}
		in.pos = append(in.pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if v.args >= 0 && len(in.pos) != v.args {
		return usageError(fmt.Sprintf("%s takes %d argument(s), got %d", name, v.args, len(in.pos)))
	}
	return v.do(c, ctx, in)
}

func (c *command) agents(ctx context.Context, _ *invocation) error {
	agents, err := c.c.Agents(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tMACHINE\tCONCURRENCY\tSTEPS")
	for _, a := range agents {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", a.Slug, a.Machine, a.Concurrency, strings.Join(a.Steps, ", "))
	}
	return tw.Flush()
}

func (c *command) submit(ctx context.Context, in *invocation) error {
	req := lifecycle.SubmitRequest{AgentSlug: in.pos[0], IdempotencyKey: in.key, Source: "cli"}
	if in.input != "" {
		if !json.Valid([]byte(in.input)) {
			return usageError("-input is not JSON")
		}
		req.Input = json.RawMessage(in.input)
	}
	res, err := c.c.Submit(ctx, req)
	if err != nil {
		return err
	}
	if res.Duplicate {
		fmt.Fprintf(c.errOut, "duplicate: the key %q already started this run\n", in.key)
	}
	fmt.Fprintln(c.out, res.RunID)
	if in.watch {
		return c.watch(ctx, res.RunID)
	}
	return nil
}

func (c *command) status(ctx context.Context, in *invocation) error {
	return c.printStatus(c.c.Status(ctx, in.pos[0]))
}

func (c *command) steps(ctx context.Context, in *invocation) error {
	steps, err := c.c.Steps(ctx, in.pos[0])
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tSTEP\tSTATUS\tDURATION\tSUMMARY / ERROR")
	for _, s := range steps {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", s.StepNumber, s.StepName, s.Status,
			time.Duration(s.DurationMS)*time.Millisecond, orElse(s.Error, s.OutputSummary))
	}
	return tw.Flush()
}

// runs prints a page of runs, newest first, and the command that prints
// the next one (or every page with -all).
func (c *command) runs(ctx context.Context, in *invocation) error {
	if len(in.pos) > 1 {
		return usageError("runs takes at most one agent")
	}
	q := client.Query{Status: in.status, Limit: in.limit, Cursor: in.cursor, All: in.all}
	if len(in.pos) == 1 {
		q.Agent = in.pos[0]
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tAGENT\tSTATUS\tSTEPS\tSTARTED\tRUNNER\tERROR")
	row := func(r lifecycle.RunStatus) {
		e := ""
		if r.Error != nil {
			e = *r.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", r.RunID, r.AgentSlug, r.Status, r.StepsCompleted, r.StepsTotal, r.StartedAt.Format(time.RFC3339), runnerNote(r), e)
	}
	runs, next, err := c.c.Runs(ctx, q)
	if err != nil {
		return err
	}
	for _, r := range runs {
		row(r)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(c.errOut, "more: add -cursor %s (or -all)\n", next)
	}
	return nil
}

func (c *command) jobs(ctx context.Context, in *invocation) error {
	switch {
	case len(in.pos) == 2 && in.pos[0] == "enqueue":
		return c.enqueue(ctx, lifecycle.JobType(in.pos[1]), in.agent, in.job)
	case len(in.pos) != 0:
		return usageError("jobs takes no argument, or enqueue <type>")
	}
	jobs, _, err := c.c.Jobs(ctx, client.Query{All: true})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tTYPE\tAGENT\tSTATUS\tATTEMPT\tPRIORITY\tSCHEDULED")
	for _, j := range jobs {
		prio, at := j.Priority, "-"
		if prio == 0 {
			prio = lifecycle.DefaultPriority
		}
		if j.ScheduledAt != nil {
			at = j.ScheduledAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\n", j.JobID, j.JobType, j.AgentSlug, j.Status, j.Attempt, j.MaxAttempts, prio, at)
	}
	return tw.Flush()
}

// enqueue is jobs enqueue: one job of type t for agent (-agent; empty:
// its type's lane), as f says.
func (c *command) enqueue(ctx context.Context, t lifecycle.JobType, agent string, f jobFlags) error {
	n := lifecycle.NewJob{JobID: f.id, JobType: t, AgentSlug: agent, Priority: f.priority, Delay: f.delay, Queue: f.queue}
	if f.payload != "" {
		if !json.Valid([]byte(f.payload)) {
			return usageError("-payload is not JSON")
		}
		n.Payload = json.RawMessage(f.payload)
	}
	if f.runAt != "" {
		at, err := time.Parse(time.RFC3339, f.runAt)
		if err != nil {
			return usageError("-run-at is not an RFC 3339 time (2026-11-28T16:00:00Z)")
		}
		n.RunAt = at
	}
	if f.unique || f.uniqueKey != "" || f.uniquePeriod != 0 {
		n.Unique = &lifecycle.Unique{Key: f.uniqueKey, Period: f.uniquePeriod}
	}
	return c.printJob(c.c.Enqueue(ctx, n))
}

// requeue is the requeue of one job (requeue <id>) or of the jobs a
// filter selects (requeue -status DEAD ...: POST /jobs/requeue).
func (c *command) requeue(ctx context.Context, in *invocation) error {
	if len(in.pos) == 1 {
		return c.printJob(c.c.Requeue(ctx, in.pos[0]))
	}
	return c.bulk(ctx, in, "requeue", client.Operator{Client: c.c}.RequeueJobs)
}

// cancelJob is the cancel of one job (cancel-job <id>) or of the jobs a
// filter selects (cancel-job -status QUEUED ...: POST /jobs/cancel).
func (c *command) cancelJob(ctx context.Context, in *invocation) error {
	if len(in.pos) == 1 {
		return c.printJob(client.Operator{Client: c.c}.CancelJob(ctx, in.pos[0]))
	}
	return c.bulk(ctx, in, "cancel-job", client.Operator{Client: c.c}.CancelJobs)
}

// bulk is a bulk action on the jobs the flags select (name: the command,
// requeue or cancel-job), printed job by job.
func (c *command) bulk(ctx context.Context, in *invocation, name string, act func(context.Context, client.Query) (lifecycle.BulkResult, error)) error {
	if len(in.pos) > 1 || in.status == "" && in.jobType == "" && in.agent == "" {
		return usageError(name + " <id> | " + name + " -status S [-type T] [-agent A] [-limit N] [-cursor C] [-all]")
	}
	done := map[string]string{"requeue": "requeued", "cancel-job": "cancelled"}[name]
	q := client.Query{Status: in.status, Type: in.jobType, Agent: in.agent, Limit: in.limit, Cursor: in.cursor, All: in.all}
	res, err := act(ctx, q)
	for _, id := range res.JobIDs {
		fmt.Fprintf(c.out, "%-9s %s\n", done, id)
	}
	for _, f := range res.Failed {
		fmt.Fprintf(c.out, "failed    %s  %s: %s\n", f.JobID, f.Code, f.Message)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%d %s, %d failed\n", res.Count, done, len(res.Failed))
	if res.Next != "" {
		fmt.Fprintf(c.out, "more: -cursor %s\n", res.Next)
	}
	if len(res.Failed) > 0 {
		return fmt.Errorf("%d job(s) not %s", len(res.Failed), done)
	}
	return nil
}

// history prints a job's moves and its attempts (GET /jobs/{id}/history).
func (c *command) history(ctx context.Context, in *invocation) error {
	h, err := client.Operator{Client: c.c}.JobHistory(ctx, in.pos[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%s  %s  %s  attempt %d/%d\n", h.Job.JobID, h.Job.JobType, h.Job.Status, h.Job.Attempt, h.Job.MaxAttempts)
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tFROM\tTO\tEVENT\tACTOR")
	for _, m := range h.Moves {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.At.Format(time.RFC3339Nano), orDash(string(m.From)), m.To, m.Event, m.Actor)
	}
	fmt.Fprintln(tw, "\nATTEMPT\tSTARTED\tDURATION\tOUTCOME\tERROR")
	for _, a := range h.Attempts {
		d := "running"
		if a.DurationMS != nil {
			d = (time.Duration(*a.DurationMS) * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", a.Attempt, a.StartedAt.Format(time.RFC3339), d, orDash(string(a.Outcome)), orDash(strings.TrimSpace(a.ErrorCode+" "+a.Error)))
	}
	if h.Partial {
		fmt.Fprintln(tw, "(partial: the audit log was read only in part)")
	}
	return tw.Flush()
}

// queues prints each lane of the job queue (GET /queues).
func (c *command) queues(ctx context.Context, in *invocation) error {
	op := client.Operator{Client: c.c}
	pos := in.pos
	if len(pos) == 2 && (pos[0] == "pause" || pos[0] == "resume") {
		if err := op.SetPaused(ctx, pos[1], pos[0] == "pause"); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "queue %s %sd\n", pos[1], pos[0])
		return nil
	}
	if len(pos) > 1 || (len(pos) == 1 && pos[0] != "list") {
		return usageError("queues [list] | queues pause <queue> | queues resume <queue>")
	}
	lanes, err := op.Queues(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LANE\tQUEUE\tREADY\tWAITING\tOLDEST\tRUNNING\tJOB\tSTATE")
	for _, l := range lanes {
		state := "active"
		if l.Paused {
			state = "paused"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%s\t%s\n", l.Agent, l.Queue, l.Ready, l.Waiting,
			time.Duration(l.OldestReadyMS)*time.Millisecond, l.RunningJobs, orDash(l.JobID), state)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *command) inbox(ctx context.Context, in *invocation) error {
	stats, err := c.c.InboxStats(ctx)
	if err != nil {
		return err
	}
	entries, _, err := c.c.InboxEntries(ctx, client.Query{Status: in.status, All: true})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "pending %d  processed %d  rejected %d  expired %d\n", stats.Pending, stats.Processed, stats.Rejected, stats.Expired)
	for _, e := range entries {
		fmt.Fprintf(c.out, "%s  %s  %s\n", e.ID, e.Status, e.CreatedAt.Format(time.RFC3339))
	}
	return nil
}

func (c *command) quarantine(ctx context.Context, in *invocation) error {
	pos := in.pos
	if len(pos) == 2 && pos[0] == "restore" {
		if err := c.c.Restore(ctx, pos[1]); err != nil {
			return err
		}
		fmt.Fprintln(c.out, "restored")
		return nil
	}
	if len(pos) > 1 || (len(pos) == 1 && pos[0] != "list") {
		return usageError("quarantine [list] | quarantine restore <qkey>")
	}
	qs, _, err := c.c.Quarantine(ctx, client.Query{All: true})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QKEY\tWHEN\tREASON")
	for _, q := range qs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", q.QKey, q.QuarantinedAt.Format(time.RFC3339), q.Reason)
	}
	return tw.Flush()
}

func (c *command) schedules(ctx context.Context, in *invocation) error {
	pos := in.pos
	if len(pos) == 2 && (pos[0] == "pause" || pos[0] == "resume") {
		var info lifecycle.ScheduleInfo
		var err error
		if pos[0] == "pause" {
			info, err = c.c.PauseSchedule(ctx, pos[1], true)
		} else {
			info, err = c.c.PauseSchedule(ctx, pos[1], false)
		}
		if err != nil {
			return err
		}
		return c.json(info)
	}
	if len(pos) > 1 || (len(pos) == 1 && pos[0] != "list") {
		return usageError("schedules [list] | schedules pause <id> | schedules resume <id>")
	}
	infos, err := c.c.Schedules(ctx)
	if err != nil {
		return err
	}
	return printSchedules(c.out, infos)
}

// printSchedules lists schedules as a table: what each starts (an
// agent's run, or a periodic job's type and lane, and for which tenant
// when not the default one), when, and the run or job its latest fired
// slot started.
func printSchedules(out io.Writer, infos []lifecycle.ScheduleInfo) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULE\tSTARTS\tWHEN\tNEXT\tLAST\tSTATE")
	for _, info := range infos {
		when := info.Cron
		if when == "" {
			when = "every " + info.Every.String()
		}
		state := "active"
		if info.Paused {
			state = "paused by " + info.PausedBy
		}
		target, last := "run of "+info.Agent, info.LastRunID
		if j := info.Job; j != nil {
			target, last = "job "+string(j.JobType), info.LastJobID
			if j.AgentSlug != "" {
				target += " in " + j.AgentSlug
			}
		}
		if info.Tenant != "" {
			target += " for " + info.Tenant
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", info.ID, target, when, info.Next.Format(time.RFC3339), orElse(last, "-"), state)
	}
	return tw.Flush()
}

func (c *command) events(ctx context.Context, in *invocation) error {
	for ev, err := range c.c.Events(ctx, in.after, in.runID) {
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		fmt.Fprintf(c.out, "%s %s %s\n", ev.ID, ev.Type, ev.Data)
	}
	return nil
}

func (p printer) printJob(j lifecycle.Job, err error) error {
	if err != nil {
		return err
	}
	return p.json(j)
}

func (p printer) printStatus(st lifecycle.RunStatus, err error) error {
	if err != nil {
		return err
	}
	return p.json(st)
}

func (p printer) json(v any) error {
	enc := json.NewEncoder(p.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (c *command) machine(name, format string) error {
	spec, ok := machineSpecs()[name]
	if !ok {
		names := make([]string, 0, len(machineSpecs()))
		for n := range machineSpecs() {
			names = append(names, n)
		}
		sort.Strings(names)
		return usageError(fmt.Sprintf("unknown machine %q: one of %s", name, strings.Join(names, ", ")))
	}
	switch format {
	case "mermaid":
		fmt.Fprint(c.out, machine.Mermaid(spec))
	case "dot":
		fmt.Fprint(c.out, machine.DOT(spec))
	case "json":
		return c.json(spec)
	default:
		return usageError("-format: mermaid, dot or json")
	}
	return nil
}

func machineSpecs() map[string]lifecycle.Spec {
	return map[string]lifecycle.Spec{
		"canonical":   machine.CanonicalRun().Spec(),
		"cancelable":  machine.CancelableRun().Spec(),
		"approval":    machine.ApprovalRun().Spec(),
		"step":        machine.RunStep().Spec(),
		"job":         machine.JobMachine().Spec(),
		"general-job": machine.GeneralJobMachine().Spec(),
		"nlm":         machine.NLMMachine().Spec(),
		"inbox":       machine.InboxMachine().Spec(),
	}
}

// baseURL turns -addr into the client's base URL: host:port (as the
// Worker's own -addr takes it) means http://host:port; a URL stays as it is.
func baseURL(addr string) (string, error) {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q: the scheme must be http or https", addr)
	}
	if u.Host == "" {
		return "", fmt.Errorf("%q names no host", addr)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// runnerNote is the runs table's RUNNER cell: whether the run's runner was
// lost (its lease lapsed, nobody took it over yet) or another took it over
// (docs/spec.md#run-status); "-" for a run that lost no runner.
func runnerNote(r lifecycle.RunStatus) string {
	switch {
	case r.RunnerLostAt != nil:
		return "lost since " + r.RunnerLostAt.UTC().Format(time.RFC3339)
	case r.TakenOverAt != nil:
		return "taken over at " + r.TakenOverAt.UTC().Format(time.RFC3339)
	}
	return "-"
}
