package lifecycle

// Actor names a component that may make a transition (see
// docs/spec.md#actors). Every transition of a lifecycle lists the actors
// allowed to make it; any other is refused with [ErrForbiddenActor].
type Actor string

// The actors (docs/spec.md#actors); their names are the platform's
// (docs/spec.md#platform-names).
const (
	// ActorGateway is the Worker / Gateway acting on the owner's requests
	// (the platform's Worker, or Gateway acting for the owner).
	ActorGateway Actor = "gateway"
	// ActorOrchestration is the Orchestration Layer wrapper: the one status
	// writer of runs and jobs.
	ActorOrchestration Actor = "orchestration"
	// ActorNLMBackend is the NotebookLM backend that processes NLM jobs.
	ActorNLMBackend Actor = "nlm-backend"
	// ActorMastra is the Mastra runtime. It executes steps and never writes
	// status (invariant F4, docs/spec.md#job-lifecycle), so no transition lists it.
	ActorMastra Actor = "mastra"
	// ActorAdmin is an operator: the Membridge control plane or the Gateway in
	// its admin role.
	ActorAdmin Actor = "admin"
	// ActorFrontend is the UI. It only reads, so no transition lists it.
	ActorFrontend Actor = "frontend"
	// ActorSystem is a scheduled job of the system itself (cron), such as
	// inbox TTL expiry.
	ActorSystem Actor = "system"
)

// Event names what happens to cause a transition, as a job's audit trail
// records it ([JobMove]).
type Event string
