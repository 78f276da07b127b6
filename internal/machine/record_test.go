package machine_test

import "github.com/runconveyor/conveyor/lifecycle"

// record is what the run machines move: a run's status.json.
type record = lifecycle.RunStatus
