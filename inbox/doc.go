// Package inbox is the inbox of seed 002 §1: the Box that takes
// submissions through a validation gate and moves the entries
// (lifecycle.InboxEntry) by the inbox entry machine (lifecycle.InboxMachine):
// processed, rejected, or expired at the end of their TTL.
package inbox
