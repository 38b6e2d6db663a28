package main

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cmd := func(args ...any) redis.Cmder { return redis.NewCmd(ctx, args...) }
	const p = "bench-rtt-1a2b3c:"
	task := p + "task:{tenant-000001}:task-01J"
	writeTask := cmd("evalsha", "sha", 5, task, p+"ckpt:{tenant-000001}:task-01J", task+":timeline",
		p+"lock:tenant:{tenant-000001}", p+"index:tenant:{tenant-000001}:history",
		"lockvalue", 7, 1, "wid", "", "0", "0", 100, 604800000, 1764000000000, 0)
	startTask := cmd("evalsha", "sha", 6, task, p+"ckpt:{tenant-000001}:task-01J", task+":timeline",
		p+"lock:tenant:{tenant-000001}", p+"index:tenant:{tenant-000001}:history", p+"fence:tenant:{tenant-000001}",
		"lockvalue", 1764000000000, 0, "wid", "", "0", 60000, 100, 604800000, 1764000000000, 0)
	move := func(status string) redis.Cmder {
		return cmd("evalsha", "sha", 3, p+"plan:{plan-01J}:counts", p+"plan:{plan-01J}", p+"plan:{plan-01J}:tasks",
			"task-01J", status, 2, 7, "wid", "bench-1", "tenant-000001", "2026-11-22T00:00:00Z", 604800000, "threshold")
	}
	expireRef := cmd("pexpire", p+"taskrefs:{490000.a}", 604800000)
	tests := []struct {
		name string
		cmds []redis.Cmder
		want string
	}{
		{"TaskStart", []redis.Cmder{writeTask, move("RUNNING"), expireRef}, rtTaskStart},
		{"TaskStartTakingLock", []redis.Cmder{startTask, move("RUNNING")}, rtTaskStart},
		{"TaskFinish", []redis.Cmder{writeTask, move("COMPLETED"), expireRef}, rtTaskFinish},
		{"StageTransition", []redis.Cmder{writeTask}, rtStage},
		{"LockAcquire", []redis.Cmder{cmd("evalsha", "sha", 2, p+"lock:tenant:{t}", p+"fence:tenant:{t}", "v", 60000, 1)}, rtLockAcquire},
		{"LockRelease", []redis.Cmder{cmd("evalsha", "sha", 1, p+"lock:tenant:{t}", "v")}, rtLockRelease},
		{"LockExtend", []redis.Cmder{cmd("evalsha", "sha", 1, p+"lock:tenant:{t}", "v", 60000)}, rtLockExtend},
		{"Heartbeat", []redis.Cmder{cmd("evalsha", "sha", 2, task, p+"lock:tenant:{t}", "v", 7, "now")}, rtHeartbeat},
		{"PlanStatus", []redis.Cmder{cmd("hgetall", p+"plan:{plan-01J}"), cmd("hmget", p+"plan:{plan-01J}:counts", "PENDING")}, rtPlanStatus},
		{"TenantIndex", []redis.Cmder{cmd("zrevrange", p+"index:tenant:{t}:history", 0, 0)}, rtTenantIndex},
		{"TaskRecord", []redis.Cmder{cmd("hgetall", task), cmd("get", p+"ckpt:{t}:task-01J")}, rtTaskRecord},
		{"PlanCreationBatch", []redis.Cmder{
			cmd("evalsha", "sha", 2, p+"plan:{plan-01J}:tasks", p+"plan:{plan-01J}:counts", 0, 604800000, "task-01J", "PENDING|0|0||"),
			cmd("hset", task, "id", "task-01J"),
		}, rtPlanCreate},
		{"FeedBatch", []redis.Cmder{cmd("evalsha", "sha", 1, p+"events", 1764000000000, 100000, 2, "[{},{}]")}, rtEventFeed},
		{"Claim", []redis.Cmder{cmd("evalsha", "sha", 3, p+"plan:{plan-01J}", p+"plan:{plan-01J}:queue", p+"plan:{plan-01J}:permits", 60000, 604800000, 0)}, rtClaim},
		{"PermitRenewal", []redis.Cmder{cmd("evalsha", "sha", 1, p+"plan:{plan-01J}:permits", 60000, 604800000, "t|tenant-1|task-01J")}, rtPermitRenew},
		{"QueuePush", []redis.Cmder{cmd("rpush", p+"plan:{plan-01J}:queue", "s|t|task-01J"), cmd("pexpire", p+"plan:{plan-01J}:queue", 1), cmd("sadd", p+"plans:active", "plan-01J")}, rtQueuePush},
		{"PermitRelease", []redis.Cmder{cmd("zrem", p+"plan:{plan-01J}:permits", "s|t|task-01J")}, rtPermitFree},
		{"Discovery", []redis.Cmder{cmd("smembers", p+"plans:active")}, rtDiscovery},
		{"DiscoveryState", []redis.Cmder{cmd("hmget", p+"plan:{plan-01J}", "status"), cmd("llen", p+"plan:{plan-01J}:queue"), cmd("zcard", p+"plan:{plan-01J}:permits")}, rtDiscovery},
		{"ScriptLoad", []redis.Cmder{cmd("script", "load", "return 1")}, rtScriptLoad},
		{"EventFeed", []redis.Cmder{cmd("xadd", p+"events", "*", "e", "{}")}, rtEventFeed},
		{"HandshakeOnly", []redis.Cmder{cmd("hello", 3), cmd("client", "setinfo", "LIB-NAME", "go-redis")}, ""},
		{"Other", []redis.Cmder{cmd("ping")}, "other: ping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := classify(tt.cmds); got != tt.want {
				t.Errorf("classify = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCountTaggedCountsOnlyTaggedRoundTrips(t *testing.T) {
	t.Parallel()
	c := newRTTCounter()
	ctx := context.Background()
	get := redis.NewCmd(ctx, "zrevrange", "bench:index:tenant:{t}:history", 0, 0)
	c.count(ctx, []redis.Cmder{get}) // background
	n, kinds := c.CountTagged(ctx, func(ctx context.Context) {
		c.count(ctx, []redis.Cmder{get})
		c.count(context.Background(), []redis.Cmder{get}) // background meanwhile
		c.count(ctx, []redis.Cmder{redis.NewCmd(ctx, "hello", 3)})
	})
	if n != 1 || kinds[rtTenantIndex] != 1 || len(kinds) != 1 {
		t.Errorf("CountTagged = %d %v, want 1 tenant index read", n, kinds)
	}
	if got := c.Total(); got != 3 {
		t.Errorf("Total = %d, want 3 (handshakes not counted)", got)
	}
}

func TestWriteSharesSplitBatchedRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const p = "bench-rtt-1a2b3c:"
	write := func(expect int64, status string) redis.Cmder {
		task := p + "task:{tenant-000001}:task-01J"
		return redis.NewCmd(ctx, "evalsha", "sha", 6, task, p+"ckpt:{tenant-000001}:task-01J", task+":timeline",
			p+"lock:tenant:{tenant-000001}", p+"index:tenant:{tenant-000001}", p+"index:tenant:{tenant-000001}:history",
			"lockvalue", 7, &expect, "wid", "", "0", "0", 100, 604800000, 1764000000000, 1, "status", &status)
	}
	// Several moves of one plan in one call: 10 arguments, then 7 a move.
	moves := redis.NewCmd(ctx, "evalsha", "sha", 3, p+"plan:{plan-01J}:counts", p+"plan:{plan-01J}", p+"plan:{plan-01J}:tasks",
		"task-01J", "RUNNING", 1, 7, "wid", "bench-1", "tenant-000001", "2026-11-22T00:00:00Z", 604800000, "threshold",
		"task-02J", "COMPLETED", 2, 7, "wid", "bench-1", "tenant-000002")
	c := newRTTCounter()
	c.count(ctx, []redis.Cmder{write(0, "RUNNING"), write(3, "RUNNING"), write(1, "COMPLETED"), write(2, "RUNNING"), moves})
	got := c.Shares()
	want := map[string]float64{rtTaskStart: 0.25, rtStage: 0.5, rtTaskFinish: 0.25}
	for k, v := range want {
		if got[k] < v-1e-9 || got[k] > v+1e-9 {
			t.Errorf("shares %v, want %v", got, want)
		}
	}
	if k := c.Snapshot(); k[rtTaskStart] != 1 || c.Total() != 1 {
		t.Errorf("kinds %v, total %d: want one round trip, a task start (the first move's status)", k, c.Total())
	}
}

func TestParseFlagsTopology(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
		ok   bool
	}{
		{nil, "single", true},
		{[]string{"-topology", "cluster"}, "cluster", true},
		{[]string{"-topology", "sentinel"}, "", false},
	} {
		c, err := parseFlags(tt.args, io.Discard)
		if (err == nil) != tt.ok || (tt.ok && c.Topology != tt.want) {
			t.Errorf("parseFlags(%q) = topology %q, %v; want %q (ok %v)", tt.args, c.Topology, err, tt.want, tt.ok)
		}
	}
}

// The round-trip section classifies every write a real run sends: starts,
// stage transitions and finishes are counted as such (a change of the
// scripts' keys must not turn them into "other" round trips, which the
// table would show as 0 per task).
func TestRoundTripsSeeEveryWrite(t *testing.T) {
	ctx := context.Background()
	e := throwawayEnv(t, "-concurrency", "8")
	res, err := e.measureRoundTrips(ctx, 40, 3)
	if err != nil {
		t.Fatal(err)
	}
	for name, shares := range map[string]map[string]float64{"× 1": res.singleW, "× 3": res.multiW} {
		for _, kind := range []string{rtTaskStart, rtTaskFinish} {
			if shares[kind] <= 0 {
				t.Errorf("plan %s: no %q round trips counted (%v)", name, kind, shares)
			}
		}
	}
	if res.multiW[rtStage] <= 0 {
		t.Errorf("no stage transition round trips counted (%v)", res.multiW)
	}
	for _, kinds := range []map[string]int64{res.single, res.multi} {
		for kind, n := range kinds {
			if strings.HasPrefix(kind, "other: evalsha") {
				t.Errorf("%d round trips of unclassified scripts (%q): a script's keys changed?", n, kind)
			}
		}
	}
}

// throwawayEnv is the benchmark's environment with flags args on a
// throwaway redis-server, closed when the test ends; it skips in -short and
// without redis-server.
func throwawayEnv(t *testing.T, args ...string) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server on the PATH:", err)
	}
	cfg, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	e, err := newEnv(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}
