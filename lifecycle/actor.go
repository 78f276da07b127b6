package lifecycle

// Actor names a component that may make a transition: the seeds' "who writes"
// columns. Every [Transition] lists the actors allowed to make it, and
// [Machine.Fire] refuses any other with [ErrForbiddenActor].
type Actor string

// The actors of the specs (seed 000 §1.2, 002 §1.2, 003 §1.2 and §4).
const (
	// ActorGateway is the Worker / Gateway acting on the owner's requests
	// (seed 000 "Worker", seed 003 "Gateway (Owner via Frontend)").
	ActorGateway Actor = "gateway"
	// ActorOrchestration is the Orchestration Layer wrapper: the one status
	// writer of runs and jobs.
	ActorOrchestration Actor = "orchestration"
	// ActorNLMBackend is the NotebookLM backend that processes NLM jobs.
	ActorNLMBackend Actor = "nlm-backend"
	// ActorMastra is the Mastra runtime. It executes steps and never writes
	// status (seed 000 §2.1, invariant F4), so no transition lists it.
	ActorMastra Actor = "mastra"
	// ActorAdmin is an operator: the Membridge control plane or the Gateway in
	// its admin role (seed 003 "Gateway (Admin)").
	ActorAdmin Actor = "admin"
	// ActorFrontend is the UI. It only reads, so no transition lists it.
	ActorFrontend Actor = "frontend"
	// ActorSystem is a scheduled job of the system itself (cron), such as
	// inbox TTL expiry.
	ActorSystem Actor = "system"
)

// Actors lists every known actor.
func Actors() []Actor {
	return []Actor{ActorGateway, ActorOrchestration, ActorNLMBackend, ActorMastra, ActorAdmin, ActorFrontend, ActorSystem}
}
