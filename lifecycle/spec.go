package lifecycle

// Spec is the plain description of a lifecycle machine: what the JSON
// export prints, the diagrams draw, and GET /agents reports of each agent's
// run machine.
type Spec struct {
	Name        string           `json:"name"`
	Initial     string           `json:"initial"`
	States      []string         `json:"states"`
	Terminal    []string         `json:"terminal"`
	Transitions []SpecTransition `json:"transitions"`
}

// SpecTransition is one row of a [Spec]. Guard, Extension and Requeue are
// drawn in diagrams but left out of the JSON export, whose shape is fixed.
type SpecTransition struct {
	From      string  `json:"from"`
	To        string  `json:"to"`
	Event     string  `json:"event"`
	Actors    []Actor `json:"actors"`
	Guard     string  `json:"-"`
	Extension bool    `json:"-"`
	Requeue   bool    `json:"-"`
}
