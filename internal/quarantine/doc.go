// Package quarantine moves an engine's poison records aside: Mover wraps
// records.Quarantine with the log and the count every engine keeps.
package quarantine
