// Package inbox holds the inbox entry machine of seed 002 §1 and the entry
// record it moves.
package inbox
