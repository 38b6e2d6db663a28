package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestParseCommandStats(t *testing.T) {
	t.Parallel()
	in := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=3,usec=120,usec_per_call=40.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setinfo:calls=2,usec=1,usec_per_call=0.50\r\n" +
		"cmdstat_hset:usec=5,calls=7\r\n" +
		"cmdstat_broken:calls=x,usec=1\r\n" +
		"cmdstat_negative:calls=-4\r\n" +
		"not a stat line\r\n" +
		"cmdstat_nocolon\r\n"
	got := parseCommandStats(in)
	want := cmdCounts{"evalsha": 3, "client|setinfo": 2, "hset": 7}
	if len(got) != len(want) {
		t.Fatalf("parseCommandStats = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("parseCommandStats[%q] = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}

func TestCmdCountsSub(t *testing.T) {
	t.Parallel()
	before := cmdCounts{"evalsha": 10, "hset": 5, "info": 3, "xadd": 100}
	after := cmdCounts{"evalsha": 16, "hset": 5, "info": 9, "xadd": 2, "get": 4, "client|setinfo": 8}
	d := after.sub(before)
	// info and client are the benchmark's housekeeping; xadd went down (a
	// statistics reset between): it counts from zero; hset did not move.
	want := cmdCounts{"evalsha": 6, "xadd": 2, "get": 4}
	if len(d) != len(want) {
		t.Fatalf("sub = %v, want %v", d, want)
	}
	for k, v := range want {
		if d[k] != v {
			t.Errorf("sub[%q] = %d, want %d", k, d[k], v)
		}
	}
	if d.total() != 12 || d.scripts() != 6 {
		t.Errorf("total %d, scripts %d; want 12 and 6", d.total(), d.scripts())
	}
	if got, want := d.breakdown(4), "EVALSHA 1.50, GET 1.00, XADD 0.50"; got != want {
		t.Errorf("breakdown = %q, want %q", got, want)
	}
	if got := (cmdCounts{"get": 1}).breakdown(100); got != "other 0.01" {
		t.Errorf("breakdown of a rare command = %q, want it folded into other", got)
	}
}

func TestMedianCounts(t *testing.T) {
	t.Parallel()
	a, b, c := cmdCounts{"get": 1}, cmdCounts{"get": 5}, cmdCounts{"get": 3}
	if got := medianCounts([]cmdCounts{a, b, c}); got.total() != 3 {
		t.Errorf("median of 1, 5, 3 = %d", got.total())
	}
	if got := medianCounts([]cmdCounts{b, a}); got.total() != 1 {
		t.Errorf("median of 5, 1 = %d, want the lower middle 1", got.total())
	}
	if medianCounts(nil) != nil {
		t.Error("median of nothing is not nil")
	}
}

func TestSpreadAndAllShared(t *testing.T) {
	t.Parallel()
	if got, want := spread([]int64{750, 250}), "750 / 250 (75% / 25%)"; got != want {
		t.Errorf("spread = %q, want %q", got, want)
	}
	if !allShared([]sharedRun{{perInstance: []int64{1, 2}}, {perInstance: []int64{3, 1}}}) {
		t.Error("every instance ran tasks: not shared")
	}
	if allShared([]sharedRun{{perInstance: []int64{1, 2}}, {perInstance: []int64{3, 0}}}) {
		t.Error("an instance ran nothing in one round: shared")
	}
	if allShared(nil) {
		t.Error("no run: shared")
	}
}

// verdictOf returns the verdict of the targets row whose figure starts
// with prefix.
func verdictOf(t *testing.T, tb table, prefix string) string {
	t.Helper()
	for _, r := range tb.rows {
		if strings.HasPrefix(strings.TrimSpace(r.figure), prefix) {
			return r.verdict
		}
	}
	t.Fatalf("no row %q in %+v", prefix, tb.rows)
	return ""
}

func TestTargetsTableComputesVerdicts(t *testing.T) {
	t.Parallel()
	const n = 1000
	run := func(d time.Duration, redisCPU time.Duration, cmds int64) planRun {
		return planRun{total: d, cpu: cpuUse{redis: redisCPU}, cmds: cmdCounts{"evalsha": cmds}}
	}
	arun := func(d time.Duration, redisCPU time.Duration) asynqRun {
		return asynqRun{total: d, cpu: cpuUse{redis: redisCPU}, cmds: cmdCounts{"evalsha": 19 * n}}
	}
	base := func() *report {
		return &report{cfg: config{N: n, QueryClients: 64},
			plan1: []planRun{run(time.Second, 40*time.Millisecond, 18*n), run(time.Second, 40*time.Millisecond, 18*n)},
			asynq: []asynqRun{arun(1300*time.Millisecond, 43*time.Millisecond), arun(1300*time.Millisecond, 43*time.Millisecond)},
		}
	}
	r := base()
	tb := r.targetsTable()
	if v := verdictOf(t, tb, "N × 1 noop plan"); v != "met" {
		t.Errorf("1.30× asynq: %q", v)
	}
	if v := verdictOf(t, tb, "Redis CPU per task"); v != "met" {
		t.Errorf("40 µs vs 43 µs: %q", v)
	}
	if v := verdictOf(t, tb, "Redis commands per task"); v != "met" {
		t.Errorf("18 commands: %q", v)
	}
	if v := verdictOf(t, tb, "two instances"); v != "" {
		t.Errorf("scale-out not run: verdict %q, want none", v)
	}

	r = base()
	r.plan1 = []planRun{run(1100*time.Millisecond, 50*time.Millisecond, 46*n)}
	tb = r.targetsTable()
	for _, p := range []string{"N × 1 noop plan", "Redis CPU per task", "Redis commands per task"} {
		if v := verdictOf(t, tb, p); v != "MISSED" {
			t.Errorf("%s: %q, want MISSED", p, v)
		}
	}

	// Two instances: 0.95× and as costly is met; 0.8× is not; a run where
	// one instance did everything shows in the spread row.
	r = base()
	one := sharedRun{planRun: run(time.Second, 40*time.Millisecond, 18*n), perInstance: []int64{n}}
	two := sharedRun{planRun: run(1050*time.Millisecond, 40*time.Millisecond, 18*n), perInstance: []int64{n / 2, n / 2}}
	r.scale = &scaleResult{one: []sharedRun{one}, two: []sharedRun{two}}
	tb = r.targetsTable()
	if v := verdictOf(t, tb, "two instances on one plan"); v != "met" {
		t.Errorf("two instances at 0.95×: %q", v)
	}
	if v := verdictOf(t, tb, "work spread"); v != "met" {
		t.Errorf("spread 50/50: %q", v)
	}
	two = sharedRun{planRun: run(1250*time.Millisecond, 60*time.Millisecond, 18*n), perInstance: []int64{n, 0}}
	r.scale = &scaleResult{one: []sharedRun{one}, two: []sharedRun{two}}
	tb = r.targetsTable()
	if v := verdictOf(t, tb, "two instances on one plan"); v != "MISSED" {
		t.Errorf("two instances at 0.8×: %q", v)
	}
	if v := verdictOf(t, tb, "Redis commands / CPU per task"); v != "MISSED" {
		t.Errorf("60 µs of Redis CPU against 40: %q", v)
	}
	if v := verdictOf(t, tb, "work spread"); v != "MISSED" {
		t.Errorf("one instance ran all: %q", v)
	}

	// The tenant query and the round trips.
	r = base()
	r.query = &queryResult{
		real: []loadResult{{requests: 16000, took: time.Second, p99: 4 * time.Millisecond}},
		bare: []loadResult{{requests: 10000, took: time.Second, p99: 3 * time.Millisecond}},
	}
	r.rtt = &rttResult{tasks: 10, stages: 2, many: 4, manyTenants: 1000, multiW: map[string]float64{rtStage: 10}}
	tb = r.targetsTable()
	if v := verdictOf(t, tb, "tenant query"); v != "met" {
		t.Errorf("1.6× the bare handler: %q", v)
	}
	if v := verdictOf(t, tb, "its p99"); v != "met" {
		t.Errorf("p99 4 ms: %q", v)
	}
	if v := verdictOf(t, tb, "POST /v1/tenants:status"); v != "MISSED" {
		t.Errorf("4 round trips: %q", v)
	}
	if v := verdictOf(t, tb, "round trips per stage transition"); v != "met" {
		t.Errorf("1 round trip per transition: %q", v)
	}
}

// TestCommandCountsCountsScriptCommands checks on a real redis-server that
// the commands a script calls are counted besides the script call, and that
// the benchmark's own INFO is not.
func TestCommandCountsCountsScriptCommands(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed: ", err)
	}
	s, err := startRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	stop, err := meter(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Eval(ctx, "redis.call('SET', KEYS[1], 'v'); return redis.call('GET', KEYS[1])", []string{"bench-test:{k}"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, "bench-test:{h}", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	use, err := stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := cmdCounts{"eval": 1, "set": 1, "get": 1, "hset": 1}
	if len(use.cmds) != len(want) {
		t.Fatalf("commands = %v, want %v", use.cmds, want)
	}
	for k, v := range want {
		if use.cmds[k] != v {
			t.Errorf("commands[%q] = %d, want %d (all: %v)", k, use.cmds[k], v, use.cmds)
		}
	}
}

// testEnv is an env on a throwaway redis-server of its own (skipped
// without redis-server).
func testEnv(t *testing.T, shared bool) *env {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed: ", err)
	}
	s, err := startRedis()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	opts := &redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	// own stays nil: runs delete their own keys, as with -redis.
	return &env{cfg: config{Concurrency: 8, SharedPlans: shared, Rounds: 1}, opts: opts, client: c}
}

func TestStoreOnlyRunsCompleteThePlan(t *testing.T) {
	e := testEnv(t, true)
	ctx := context.Background()
	for name, run := range map[string]func(context.Context, int) (planRun, error){
		"owned": e.runStoreOnly, "shared": e.runStoreShared,
	} {
		pr, err := run(ctx, 50)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// Every task at least wrote RUNNING (taking its lock) and its end.
		if got := pr.cmds.scripts(); got < 2*50 {
			t.Errorf("%s: %d script calls for 50 tasks, want ≥ 100 (%v)", name, got, pr.cmds)
		}
		// And took the lock: SET NX and SET … GET of the fence each.
		if got := pr.cmds["set"]; got < 2*50 {
			t.Errorf("%s: %d SETs for 50 tasks, want ≥ 100 (%v)", name, got, pr.cmds)
		}
	}
	if n, err := e.client.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("keys left after the runs: %d, %v", n, err)
	}
}

func TestRunSharedSpreadsThePlan(t *testing.T) {
	e := testEnv(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := e.runShared(ctx, 200, 2, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.perInstance) != 2 || r.perInstanceTotal() != 200 {
		t.Fatalf("tasks per instance %v, want 2 instances, 200 in all", r.perInstance)
	}
	if r.cmds.total() == 0 || r.total <= 0 {
		t.Errorf("run without commands or time: %+v", r.planRun)
	}
	owned, err := e.runShared(ctx, 100, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	if owned.perInstance[0] != 100 || owned.perInstance[1] != 0 {
		t.Errorf("plans owned: tasks per instance %v, want the creator's 100 only", owned.perInstance)
	}
}

func TestFloorRunsEveryTask(t *testing.T) {
	e := testEnv(t, true)
	ctx := context.Background()
	const n = 150 // not a multiple of the claim batch nor of the creation pipeline
	pr, err := e.runFloor(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	// A start and a final write per task, each one script.
	if got := pr.cmds.scripts(); got != 2*n {
		t.Errorf("%d script calls for %d tasks, want %d (%v)", got, n, 2*n, pr.cmds)
	}
	// Each start took the lock (SET NX) and each final write stored a checkpoint.
	if got := pr.cmds["set"]; got != 2*n {
		t.Errorf("%d SETs for %d tasks, want %d (%v)", got, n, 2*n, pr.cmds)
	}
	if n, err := e.client.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("keys left after the run: %d, %v", n, err)
	}
	r := &report{cfg: config{N: n}, floor: []planRun{pr}, floorOurs: []planRun{pr}, floorAsynq: []asynqRun{{total: pr.total, cpu: pr.cpu, cmds: pr.cmds}}}
	tb := r.floorTable()
	if last := tb.rows[len(tb.rows)-1]; !strings.Contains(last.figure, "multiples of the floor") || last.value != "1.00× / 1× / 1.00×" {
		t.Errorf("last row %+v, want the three as multiples of the floor, 1.00× each", last)
	}
	// With instructions counted (-callgrind), a row of them follows.
	pr.instr = 300 * n
	r = &report{cfg: config{N: n}, floor: []planRun{pr}, floorOurs: []planRun{{total: pr.total, cpu: pr.cpu, cmds: pr.cmds, instr: 900 * n}},
		floorAsynq: []asynqRun{{total: pr.total, cpu: pr.cpu, cmds: pr.cmds, instr: 150 * n}}}
	tb = r.floorTable()
	if last := tb.rows[len(tb.rows)-1]; !strings.Contains(last.figure, "instructions") || last.value != "900 / 300 / 150 (3.00× / 1× / 0.50×)" {
		t.Errorf("last row %+v, want the instructions a task, 900 / 300 / 150", last)
	}
}

func TestTargetsTableComparesTotalCPU(t *testing.T) {
	t.Parallel()
	const n = 1000
	r := &report{cfg: config{N: n},
		plan1: []planRun{{total: time.Second, cpu: cpuUse{proc: 100 * time.Millisecond, redis: 120 * time.Millisecond}}},
		asynq: []asynqRun{{total: time.Second, cpu: cpuUse{proc: 100 * time.Millisecond, redis: 54 * time.Millisecond}}},
	}
	tb := r.targetsTable()
	for _, row := range tb.rows {
		if strings.HasPrefix(strings.TrimSpace(row.figure), "CPU per task, Go process + Redis") {
			if want := "220 µs vs 154 µs (asynq's / ours: 0.70×)"; row.value != want {
				t.Errorf("value %q, want %q", row.value, want)
			}
			if row.verdict != "" {
				t.Errorf("verdict %q: the row is a figure, not a target", row.verdict)
			}
			return
		}
	}
	t.Fatalf("no total CPU row in %+v", tb.rows)
}
