package artifact_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/lifecycle"
)

func ExampleStore_Create() {
	ctx := context.Background()
	st, _ := artifact.New(artifact.Config{Store: memstore.New()})
	d := artifact.Draft{
		JobID: "job-1", RunID: "run_2026-02-24_abc123", Type: artifact.Brief, AgentSlug: "architect-guardian",
		Content: json.RawMessage(`{"title":"Brief","body":"Short text","entity_map":{},"word_count":2}`),
	}
	a, created, err := st.Create(ctx, lifecycle.ActorNLMBackend, "cid-1", d)
	fmt.Println(a.ArtifactID == artifact.IDForJob("job-1"), a.Finalized, created, err)

	// A retry of the same job gets the same artifact back.
	again, created, err := st.Create(ctx, lifecycle.ActorNLMBackend, "cid-1", d)
	fmt.Println(again.ArtifactID == a.ArtifactID, created, err)

	// The orchestration layer may read artifacts but not write them.
	_, _, err = st.Create(ctx, lifecycle.ActorOrchestration, "cid-1", d)
	fmt.Println(err)
	// Output:
	// true true true <nil>
	// true false <nil>
	// FORBIDDEN: actor "orchestration" may not write_new artifacts (authority matrix: denied)
}
