package conveyor

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/inbox"
	"github.com/runconveyor/conveyor/internal/procid"
	"github.com/runconveyor/conveyor/internal/prommetrics"
	"github.com/runconveyor/conveyor/internal/retention"
	"github.com/runconveyor/conveyor/internal/schedule"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// Client is one process's Conveyor: the Runner, the job Queue and its
// worker, the NLM processor, the inbox Box, the Scheduler and the
// retention janitor, built from one Config over one Store, started by Start
// and stopped by Stop. The accessors return the engines themselves, for the
// calls a program makes (submit, enqueue, read, control) and for the HTTP
// API (package adapters/httpapi) a program may mount over them.
type Client struct {
	cfg   Config
	log   *slog.Logger
	clock clock.Clock
	// owner is Config.Owner or its default; id is owner without "/", for
	// the parts whose ids take none.
	owner, id string

	runner  *run.Runner
	queue   *jobqueue.Queue
	jobs    *jobqueue.Worker
	nlm     *nlm.Processor
	sched   *schedule.Scheduler
	box     *inbox.Box
	janitor *retention.Janitor

	life services
}

// New builds a Client from cfg, in dependency order (the NLM processor, the
// Runner, the Scheduler, the Queue, the Box, the janitor). It starts
// nothing and touches no store; an error matches ErrInvalidConfig.
func New(cfg Config) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, log: cfg.Logger, clock: cfg.Clock}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.clock == nil {
		c.clock = clock.Real()
	}
	owner, node := cfg.Owner, cfg.Node
	if owner == "" {
		owner = procid.Owner()
	}
	if node == "" {
		node, _ = os.Hostname()
	}
	c.owner, c.id = owner, strings.ReplaceAll(owner, "/", ":")
	var metrics *prommetrics.Metrics
	if cfg.Metrics != nil {
		var err error
		if metrics, err = prommetrics.New(cfg.Metrics); err != nil {
			return nil, fmt.Errorf("%w: metrics: %w", ErrInvalidConfig, err)
		}
	}
	if err := c.build(owner, node, metrics); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if metrics != nil {
		if err := metrics.WatchQueue(c.queue); err != nil {
			return nil, fmt.Errorf("%w: metrics: %w", ErrInvalidConfig, err)
		}
		var agents []run.Agent
		if c.runner != nil {
			if err := metrics.WatchRuns(c.runner); err != nil {
				return nil, fmt.Errorf("%w: metrics: %w", ErrInvalidConfig, err)
			}
			agents = c.runner.Agents()
		}
		metrics.Seed(agents, c.jobTypes())
	}
	c.plan()
	return c, nil
}

// jobTypes are the job types this Client is configured for: the caller's,
// and the NLM types when their handlers are given.
func (c *Client) jobTypes() []lifecycle.JobType {
	var out []lifecycle.JobType
	if c.cfg.JobHandlers.CallNotebookLM != nil {
		out = append(out, lifecycle.JobResearch, lifecycle.JobBrief, lifecycle.JobProposalPreprocess)
	}
	for t := range c.cfg.JobTypes {
		out = append(out, t)
	}
	return out
}

// build builds the engines, each given the shared fields.
func (c *Client) build(owner, node string, metrics *prommetrics.Metrics) (err error) {
	cfg := c.cfg
	if cfg.NLMStages.Query != nil {
		nc := cfg.NLM
		nc.Store, nc.Owner, nc.Clock, nc.Node, nc.Logger = cfg.Store, c.id, c.clock, node, c.log
		if c.nlm, err = nlm.New(nc, cfg.NLMStages); err != nil {
			return fmt.Errorf("NLM processor: %w", err)
		}
	}
	agents := cfg.Agents
	if cfg.NLMAgents != nil {
		agents = append(append([]run.Agent(nil), agents...), cfg.NLMAgents(c.nlm)...)
	}
	// A Client of jobs alone has no Runner, and so no Scheduler.
	if len(agents) > 0 {
		rc := cfg.Runner
		rc.Store, rc.Owner, rc.Clock, rc.Logger, rc.Node, rc.TracerProvider = cfg.Store, owner, c.clock, c.log, node, cfg.TracerProvider
		if metrics != nil {
			rc.Metrics = metrics
		}
		if c.runner, err = run.NewRunner(rc, agents...); err != nil {
			return fmt.Errorf("runner: %w", err)
		}
	}
	qc := cfg.Queue
	qc.Store, qc.Clock, qc.Node, qc.Logger, qc.TracerProvider, qc.Types = cfg.Store, c.clock, node, c.log, cfg.TracerProvider, cfg.JobTypes
	if metrics != nil {
		qc.Metrics = metrics
	}
	if c.queue, err = jobqueue.New(qc); err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	if err := c.buildScheduler(metrics); err != nil {
		return err
	}
	if cfg.JobHandlers.CallNotebookLM != nil || len(cfg.JobTypes) > 0 {
		w := cfg.JobWorker
		c.jobs = &jobqueue.Worker{Queue: c.queue, ID: c.id, Handlers: cfg.JobHandlers, Slots: w.Slots,
			PollInterval: w.PollInterval, SweepInterval: w.SweepInterval}
	}
	ic := cfg.Inbox
	ic.Store, ic.Clock, ic.Node, ic.Logger = cfg.Store, c.clock, node, c.log
	if ic.Dispatch, err = newInboxJobs(c.queue, cfg.InboxJobs, cfg.JobTypes); err != nil {
		return err
	}
	if c.box, err = inbox.New(ic); err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	jc := cfg.Retention.janitor(cfg.Store, c.id, c.clock, c.log)
	if metrics != nil {
		jc.Metrics = metrics
	}
	if c.janitor, err = retention.New(jc); err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	return nil
}

// buildScheduler builds the Scheduler over the Runner and the Queue: for
// a Client with agents (whose schedules list may be empty), or with
// schedules, which are periodic jobs when it has no agents.
func (c *Client) buildScheduler(metrics *prommetrics.Metrics) error {
	cfg := c.cfg
	if c.runner == nil && len(cfg.Schedules) == 0 {
		return nil
	}
	known := map[lifecycle.JobType]bool{lifecycle.JobResearch: true, lifecycle.JobBrief: true, lifecycle.JobProposalPreprocess: true}
	for t := range cfg.JobTypes {
		known[t] = true
	}
	for _, s := range cfg.Schedules {
		switch {
		case s.Job == nil && c.runner == nil:
			return fmt.Errorf("schedule %s starts runs of agent %q: schedules of runs need Agents", s.ID, s.Agent)
		case s.Job != nil && !known[s.Job.JobType]:
			return fmt.Errorf("schedule %s enqueues jobs of type %q: not a type of JobTypes nor an NLM type", s.ID, s.Job.JobType)
		}
	}
	sc := cfg.Scheduler.scheduler(c.runner, c.queue, cfg.Store, cfg.Schedules, c.clock, c.log)
	if metrics != nil {
		sc.Metrics = metrics
	}
	var err error
	if c.sched, err = schedule.New(sc); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	return nil
}

// Runs returns the Runner: submit, read, wait for and control runs; nil
// for a Client without agents.
func (c *Client) Runs() *run.Runner { return c.runner }

// Jobs returns the job Queue: insert, enqueue, read and requeue jobs.
func (c *Client) Jobs() *jobqueue.Queue { return c.queue }

// Inbox returns the inbox Box.
func (c *Client) Inbox() *inbox.Box { return c.box }

// Artifacts returns the artifact store the job queue writes to.
func (c *Client) Artifacts() *artifact.Store { return c.queue.Artifacts() }

// NLM returns the NLM processor, nil without Config.NLMStages.Query.
func (c *Client) NLM() *nlm.Processor { return c.nlm }

// Schedules returns the Scheduler: list, pause and resume schedules; nil
// for a Client with neither agents nor schedules.
func (c *Client) Schedules() lifecycle.Schedules { return c.sched.View() }

// Store returns the Store every part works on.
func (c *Client) Store() *storage.Store { return c.cfg.Store }

// Owner returns the name this process has in leases (Config.Owner or its
// default).
func (c *Client) Owner() string { return c.owner }

// Clock returns the clock every part works on.
func (c *Client) Clock() clock.Clock { return c.clock }
