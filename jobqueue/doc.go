// Package jobqueue holds the job machine and the NLM-job machine of seed 003
// (§1 and §2) and the records they move.
package jobqueue
