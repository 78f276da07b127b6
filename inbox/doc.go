// Package inbox is the inbox (docs/spec.md#inbox-entry-lifecycle): the Box that takes
// submissions through a validation gate and moves the entries
// (lifecycle.InboxEntry) by the inbox entry machine (docs/spec.md#inbox-entry-lifecycle):
// processed, rejected, or expired at the end of their TTL.
package inbox
