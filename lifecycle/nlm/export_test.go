package nlm

// The processor's counters, for the tests: they are not the user's
// surface (the logs say the same).

// Stragglers reports the goroutines of stages this processor abandoned at
// a deadline although their code ignored its context: how many still run,
// and how many there were in all.
func (p *Processor) Stragglers() (live int, total int64) { return p.units.Stragglers() }

// Quarantined counts the poison job records this processor moved under
// storage's quarantine prefix.
func (p *Processor) Quarantined() int64 { return p.quar.Count() }
