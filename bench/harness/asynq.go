package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

const asynqTask = "bench:noop"

// asynqDriver is asynq with its defaults (one queue, Concurrency = slots,
// TaskCheckInterval 1 s) on a Redis whose durability the caller set up
// (scripts/bench.sh: appendonly yes, appendfsync always).
type asynqDriver struct {
	addr   string
	rdb    *redis.Client
	client *asynq.Client
	insp   *asynq.Inspector
}

// OpenAsynq connects to the Redis at addr (host:port).
func OpenAsynq(ctx context.Context, addr string) (Driver, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, err
	}
	opt := asynq.RedisClientOpt{Addr: addr}
	return &asynqDriver{addr: addr, rdb: rdb, client: asynq.NewClient(opt), insp: asynq.NewInspector(opt)}, nil
}

func (d *asynqDriver) Name() string       { return NameAsynq }
func (d *asynqDriver) Addr() string       { return d.addr }
func (d *asynqDriver) WritesUnit() string { return "Redis write commands" }

func (d *asynqDriver) Close() error {
	d.client.Close()
	d.insp.Close()
	return d.rdb.Close()
}

// Reset empties Redis and opens a new asynq client and inspector: a client
// registers a queue in Redis only on its first enqueue to it, so one that
// outlived a FLUSHALL would never register "default" again, and the
// inspector would not find the queue.
func (d *asynqDriver) Reset(ctx context.Context) error {
	if err := d.rdb.FlushAll(ctx).Err(); err != nil {
		return err
	}
	d.client.Close()
	d.insp.Close()
	opt := asynq.RedisClientOpt{Addr: d.addr}
	d.client, d.insp = asynq.NewClient(opt), asynq.NewInspector(opt)
	return nil
}

func (d *asynqDriver) Work(ctx context.Context, slots int, h Hooks) (func() error, error) {
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: d.addr}, asynq.Config{Concurrency: slots, LogLevel: asynq.WarnLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc(asynqTask, func(ctx context.Context, t *asynq.Task) error {
		var p Payload
		if err := json.Unmarshal(t.Payload(), &p); err != nil {
			return err
		}
		h.Started(p)
		// asynq writes the completion right after the handler returns, in
		// the same slot and before it takes the next task; Drain waits for
		// the last of those writes, so the run's end time is exact.
		h.Done()
		return nil
	})
	if err := srv.Start(mux); err != nil {
		return nil, err
	}
	return func() error { srv.Shutdown(); return nil }, nil
}

// Drain waits until asynq has written every task done: nothing pending,
// nothing active.
func (d *asynqDriver) Drain(ctx context.Context) error {
	for {
		qi, err := d.insp.GetQueueInfo("default")
		if err == nil && qi.Pending == 0 && qi.Active == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(time.Millisecond):
		}
	}
}

func (d *asynqDriver) Enqueue(ctx context.Context, p Payload) error {
	_, err := d.client.EnqueueContext(ctx, asynq.NewTask(asynqTask, marshal(p)))
	return err
}

// redisReadOnly are the read-only commands asynq and this harness send;
// every other command counts as a write (EVALSHA runs asynq's scripts,
// which write). INFO is the harness's own and not counted at all.
var redisReadOnly = map[string]bool{
	"get": true, "mget": true, "hget": true, "hgetall": true, "hmget": true, "exists": true, "type": true,
	"llen": true, "lrange": true, "lindex": true, "zcard": true, "zrange": true, "zrangebyscore": true,
	"zscore": true, "zcount": true, "scard": true, "smembers": true, "sismember": true, "keys": true,
	"scan": true, "ttl": true, "pttl": true, "ping": true, "hello": true, "client": true, "select": true,
	"memory": true, "time": true, "command": true, "script": true, "evalsha_ro": true, "eval_ro": true,
}

// ServerCPU is Redis's own account of its CPU (INFO cpu, getrusage in the
// server): user and system time of its threads and of the children it
// forked (AOF rewrites, snapshots).
func (d *asynqDriver) ServerCPU(ctx context.Context) (time.Duration, error) {
	s, err := d.rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total time.Duration
	seen := 0
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		switch {
		case !ok:
		case k == "used_cpu_sys" || k == "used_cpu_user" || k == "used_cpu_sys_children" || k == "used_cpu_user_children":
			sec, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("redis INFO cpu %s: %w", k, err)
			}
			total += time.Duration(sec * float64(time.Second))
			seen++
		}
	}
	if seen != 4 {
		return 0, fmt.Errorf("redis INFO cpu: %d of the 4 used_cpu fields", seen)
	}
	return total, sc.Err()
}

func (d *asynqDriver) Counters(ctx context.Context) (Counters, error) {
	s, err := d.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return Counters{}, err
	}
	c := Counters{Lists: -1, Extra: map[string]int64{}}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		// cmdstat_evalsha:calls=12,usec=34,...
		line := sc.Text()
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || name == line {
			continue
		}
		calls, err := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		if err != nil || name == "info" {
			continue
		}
		c.Extra["commands"] += calls
		if redisReadOnly[strings.SplitN(name, "|", 2)[0]] {
			c.Reads += calls
		} else {
			c.Writes += calls
		}
	}
	return c, sc.Err()
}
