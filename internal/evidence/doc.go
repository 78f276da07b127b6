// Package evidence holds the evidence a destructive decision needs on a
// store that settles (storage.SettleTime > 0): Absence believes a key
// missing only when it was read missing a settle time apart.
package evidence
