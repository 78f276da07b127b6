package layout

import (
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/storekey"
)

// RepoRunsPrefix lists the runs of a repository, newest first:
// index/repo-runs/{owner:name}/{NewestFirst(started_at, runId)}. Written
// once, when a run naming its repository is created. It is no per-agent
// index (index/run-*), so a repository's runs of every agent list
// together.
const RepoRunsPrefix = "index/repo-runs/"

// RepoRunsRepoPrefix is the List prefix of the runs of repo ("owner/name",
// its one "/" kept as ":" in the key).
func RepoRunsRepoPrefix(repo string) (string, error) {
	seg := strings.Replace(repo, "/", ":", 1)
	if err := storekey.ValidateID("repo", seg); err != nil {
		return "", err
	}
	return RepoRunsPrefix + seg + "/", nil
}

// RepoRunsKey is a run's entry among its repository's runs.
func RepoRunsKey(repo string, startedAt time.Time, runID string) (string, error) {
	p, err := RepoRunsRepoPrefix(repo)
	if err != nil {
		return "", err
	}
	return newestFirstKey(p, "run id", startedAt, runID)
}
