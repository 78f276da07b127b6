#!/usr/bin/env bash
# Runs the benchmark harness of bench/ (issues 12, 29): this SDK on SQLite
# and filestore beside River on Postgres (its defaults and its fetch tuned)
# and asynq on Redis, the same no-op workload at W = 1, 4 and 16 (worker
# slots, and as many enqueuing goroutines), jobs inserted one a call and in
# batches of 100 (River's InsertMany, the SDK's Queue.InsertMany; asynq has
# no batch insert), interleaved over 3 rounds; prints medians with every
# round, the SDK/peer ratios of the same round (like inserting like), CPU
# per job (process + server), writes/reads/lists per job, and enqueue→start
# latency from another process. See docs/performance.md.
#
#   scripts/bench.sh                 the full run (about 15 minutes on 2
#                                    quiet cores; each throughput measurement
#                                    is sized by a warm-up to last about 3 s)
#   scripts/bench.sh -rounds 1 -workers 4 -jobs 300 ...   flags go to
#                                    conveyor-bench (scripts/bench.sh -h
#                                    lists them; -systems all adds memstore
#                                    and MinIO)
#   scripts/bench.sh test            the harness's own test, every driver
#                                    for a handful of jobs, one a call and
#                                    in batches
#
# Postgres and Redis come from Debian's packages, installed when missing
# (as root, or with passwordless sudo). Private instances are started on
# free loopback ports with their data in a temporary directory on disk,
# with their durability defaults (Postgres: fsync and synchronous_commit
# on; Redis: appendonly yes, appendfsync always, as the issue compares),
# and everything is stopped and removed on exit. The harness reads the
# servers' CPU for its CPU per job: Postgres through BENCH_PG_DATA (the data
# directory's postmaster.pid), Redis through INFO cpu. MinIO is started by the
# harness itself from $(go env GOPATH)/bin/minio (scripts/install-tools.sh
# builds it); without it the MinIO driver is skipped with a message.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

as_root=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root="sudo -n"
  else
    as_root=none
  fi
fi

pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$pgbin" ] || [ ! -x "$pgbin/initdb" ] || ! command -v redis-server >/dev/null 2>&1; then
  if [ "$as_root" = none ]; then
    echo "Postgres or Redis is missing and this is neither root nor passwordless sudo: install Debian's postgresql and redis-server" >&2
    exit 1
  fi
  echo "installing Debian's postgresql and redis-server"
  $as_root apt-get update -qq
  # policy-rc.d-less containers may try to start the packaged services;
  # the harness never uses them (it starts private instances below).
  DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq postgresql redis-server >/dev/null
  pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi

# Everything on disk (not tmpfs): the point is the cost of durable writes.
base=${BENCH_DIR:-/var/tmp}
tmp=$(mktemp -d "$base/conveyor-bench.XXXXXX")
pgdata=$tmp/pg
redis_pid=""
cleanup() {
  set +e
  if [ -f "$pgdata/postmaster.pid" ]; then
    run_pg "$pgbin/pg_ctl" -D "$pgdata" -m fast -w stop >/dev/null 2>&1
  fi
  if [ -n "$redis_pid" ]; then
    kill "$redis_pid" 2>/dev/null
    wait "$redis_pid" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Postgres refuses to run as root: as root, its server runs as the
# postgres user the Debian package made.
run_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
}

mkdir -p "$pgdata" "$tmp/sock" "$tmp/redis" "$tmp/data"
if [ "$(id -u)" -eq 0 ]; then
  chown postgres "$pgdata" "$tmp/sock"
  chmod 755 "$tmp"
fi
pg_port=$(free_port)
run_pg "$pgbin/initdb" -D "$pgdata" -U postgres -A trust >"$tmp/initdb.log" 2>&1 ||
  { cat "$tmp/initdb.log" >&2; exit 1; }
run_pg "$pgbin/pg_ctl" -D "$pgdata" -l "$pgdata/server.log" -w \
  -o "-p $pg_port -k $tmp/sock -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null ||
  { cat "$pgdata/server.log" >&2; exit 1; }
run_pg "$pgbin/createdb" -h 127.0.0.1 -p "$pg_port" -U postgres bench
export BENCH_PG_DSN="postgres://postgres@127.0.0.1:$pg_port/bench?sslmode=disable"
# Where the harness finds the postmaster's pid, for Postgres's CPU per job.
export BENCH_PG_DATA="$pgdata"

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$tmp/redis" \
  --appendonly yes --appendfsync always --daemonize no --logfile "$tmp/redis/redis.log" &
redis_pid=$!
for _ in $(seq 100); do
  redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
  sleep 0.1
done
redis-cli -p "$redis_port" ping >/dev/null
export BENCH_REDIS_ADDR="127.0.0.1:$redis_port"

cd "$root/bench"
if [ "${1:-}" = test ]; then
  shift
  export BENCH_DIR="$tmp/data"
  go test -count=1 "$@" ./...
  exit
fi

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), $(go version | cut -d' ' -f3)"
echo "disk under $tmp: $(findmnt -n -o SOURCE,FSTYPE -T "$tmp")"
echo "peers: $("$pgbin/postgres" --version), $(redis-server --version | cut -d' ' -f1-3), $(grep -E 'riverqueue/river |hibiken/asynq ' go.mod | awk '{print $1, $2}' | tr '\n' ' ')"
echo "sdk: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- . ':!bench' ':!docs' || echo ' (with uncommitted changes)')"
go build -o "$tmp/conveyor-bench" ./cmd/conveyor-bench
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
"$tmp/conveyor-bench" -dir "$tmp/data" "$@"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
