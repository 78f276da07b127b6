package nlm

import (
	"slices"

	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

func terminal(s lifecycle.NLMState) bool { return s == lifecycle.NLMDone || s == lifecycle.NLMError }

func known(s lifecycle.NLMState) bool { return slices.Contains(machine.NLMStates(), s) }
