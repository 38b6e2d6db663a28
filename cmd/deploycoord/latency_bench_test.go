package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// TestLatencyBench measures real instances (the built binary, and the
// built deployctl for the operator's commands) with Redis behind a
// toxiproxy that adds a round-trip time: the figures of docs/benchmarks.md,
// "Redis far away (latency)". It is a measurement, not a check of figures
// (it only checks correctness: counts exact, no tenant's stage run twice),
// so it runs only when asked:
//
//	DEPLOYCOORD_LATENCY_BENCH=0,5,20,50 go test ./cmd/deploycoord -run TestLatencyBench -v -timeout 60m
//
// Each value is a whole round trip in milliseconds, added half on the way
// to Redis and half on the way back. The Redis is a throwaway redis-server.
func TestLatencyBench(t *testing.T) {
	spec := os.Getenv("DEPLOYCOORD_LATENCY_BENCH")
	if spec == "" {
		t.Skip("DEPLOYCOORD_LATENCY_BENCH (round trips in ms, like 0,5,20,50) is not set")
	}
	srv := redistest.StartServer(t)
	ctl := buildDeployctl(t)
	for _, f := range strings.Split(spec, ",") {
		rtt, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("DEPLOYCOORD_LATENCY_BENCH: %v", err)
		}
		t.Run(fmt.Sprintf("rtt=%dms", rtt), func(t *testing.T) { latencyRun(t, srv.Addr, ctl, rtt) })
	}
}

func buildDeployctl(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "deployctl")
	if b, err := exec.Command("go", "build", "-o", out, "../deployctl").CombinedOutput(); err != nil {
		t.Fatalf("build deployctl: %v\n%s", err, b)
	}
	return out
}

// benchTarget answers stage calls, failing while fail is set, and counts
// each tenant's calls of each stage (a tenant's stage called twice in one
// attempt is a task run twice).
type benchTarget struct {
	srv   *httptest.Server
	fail  atomic.Bool
	mu    sync.Mutex
	calls map[string]int
}

func newBenchTarget(t *testing.T) *benchTarget {
	bt := &benchTarget{calls: map[string]int{}}
	bt.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bt.mu.Lock()
		bt.calls[r.URL.Path+" "+r.Header.Get("Idempotency-Key")]++
		bt.mu.Unlock()
		if bt.fail.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("{}"))
	}))
	t.Cleanup(bt.srv.Close)
	return bt
}

func (bt *benchTarget) twice() []string {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	var out []string
	for k, n := range bt.calls {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s ×%d", k, n))
		}
	}
	return out
}

func benchTenants(prefix string, n int) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		out[i] = map[string]any{"tenantId": fmt.Sprintf("%s-%04d", prefix, i)}
	}
	return out
}

func noopStages(n int) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		out[i] = map[string]any{"name": fmt.Sprintf("s%d", i), "kind": "noop"}
	}
	return out
}

// benchCounts checks that the plan's counts equal its task list's statuses
// (pages of 1000).
func benchCounts(t *testing.T, n *node, planID string) {
	t.Helper()
	p := n.plan(planID)
	recount := map[task.Status]int{}
	total := 0
	cursor := ""
	for {
		q := "?limit=1000"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		page := must[httpapi.TaskList](n, "GET", "/v1/plans/"+planID+"/tasks"+q, nil, http.StatusOK)
		for _, tk := range page.Tasks {
			recount[tk.Status]++
			total++
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if total != p.TotalTasks {
		t.Errorf("plan %s lists %d tasks, totalTasks %d", planID, total, p.TotalTasks)
	}
	for s, c := range p.Counts {
		if recount[s] != c {
			t.Errorf("plan %s counts %v differ from its task list %v", planID, p.Counts, recount)
			break
		}
	}
}

// waitStatus polls the plan every 20ms until its status is want and
// returns the time since start.
func waitStatus(t *testing.T, n *node, id string, start time.Time, want ...string) time.Duration {
	t.Helper()
	deadline := time.Now().Add(20 * time.Minute)
	for {
		p := n.plan(id)
		for _, w := range want {
			if string(p.Status) == w {
				return time.Since(start)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("plan %s still %s %v", id, p.Status, p.Counts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitCount(t *testing.T, n *node, id string, s task.Status, want int, start time.Time) time.Duration {
	t.Helper()
	deadline := time.Now().Add(20 * time.Minute)
	for {
		p := n.plan(id)
		if p.Counts[s] >= want {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("plan %s: %s %d, want %d (%v)", id, s, p.Counts[s], want, p.Counts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func latencyRun(t *testing.T, redisAddr, ctl string, rtt int) {
	proxy := newRedisProxy(t, redisAddr)
	if rtt > 0 {
		half := fmt.Sprintf(`{"latency":%d}`, rtt/2)
		if rtt%2 == 1 {
			half = fmt.Sprintf(`{"latency":%d}`, (rtt+1)/2)
		}
		proxy.add("up", "latency", "upstream", half)
		proxy.add("down", "latency", "downstream", half)
	}
	prefix := redistest.Prefix(t)
	bt := newBenchTarget(t)
	env := []string{
		"DEPLOYCOORD_REDIS_URL=" + proxy.url(),
		"DEPLOYCOORD_KEY_PREFIX=" + prefix,
		"DEPLOYCOORD_LISTEN=127.0.0.1:0",
		"DEPLOYCOORD_INLINE_HTTP_HOSTS=127.0.0.1",
		"DEPLOYCOORD_RATE_LIMIT=off",
	}
	if extra := os.Getenv("DEPLOYCOORD_LATENCY_ENV"); extra != "" {
		env = append(env, strings.Split(extra, " ")...)
	}
	fig := func(what string, d time.Duration) {
		seq := "-"
		if rtt > 0 {
			seq = fmt.Sprintf("%.1f", float64(d)/float64(time.Duration(rtt)*time.Millisecond))
		}
		t.Logf("FIGURE rtt=%dms | %s | %v | %s RTTs", rtt, what, d.Round(time.Millisecond), seq)
	}
	run := func(args ...string) time.Duration {
		t.Helper()
		cmd := exec.Command(ctl, args...)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(start)
		if err != nil {
			t.Fatalf("deployctl %v: %v\n%s", args, err, out)
		}
		return d
	}

	binary(t) // built before the clock starts
	t0 := time.Now()
	a := startNode(t, "a", env)
	fig("start-up (exec to listening), first instance", time.Since(t0))
	srvArgs := []string{"--server", a.base, "--timeout", "20m"}

	// 1000 × 1 noop, one instance.
	start := time.Now()
	p := a.createPlan(map[string]any{"name": "n1000", "stages": noopStages(1), "tenants": benchTenants("a", 1000), "maxConcurrency": 64})
	fig("create 1000×1 (POST /v1/plans)", time.Since(start))
	fig("1000×1 noop, one instance: create to COMPLETED", waitStatus(t, a, p.PlanID, start, "COMPLETED"))
	benchCounts(t, a, p.PlanID)
	planA := p.PlanID

	// 200 × 5 noop, one instance.
	start = time.Now()
	p = a.createPlan(map[string]any{"name": "n200x5", "stages": noopStages(5), "tenants": benchTenants("c", 200), "maxConcurrency": 64})
	fig("200×5 noop, one instance: create to COMPLETED", waitStatus(t, a, p.PlanID, start, "COMPLETED"))
	benchCounts(t, a, p.PlanID)

	// 1000 × 1 noop, two instances.
	t0 = time.Now()
	b := startNode(t, "b", env)
	fig("start-up (exec to listening), second instance", time.Since(t0))
	time.Sleep(2 * time.Second) // b heartbeats and polls
	start = time.Now()
	p = a.createPlan(map[string]any{"name": "n1000b", "stages": noopStages(1), "tenants": benchTenants("b", 1000), "maxConcurrency": 64})
	fig("1000×1 noop, two instances: create to COMPLETED", waitStatus(t, a, p.PlanID, start, "COMPLETED"))
	benchCounts(t, a, p.PlanID)

	// 1000 × 1 http (no tenant's stage called twice), two instances.
	start = time.Now()
	p = a.createPlan(map[string]any{"name": "h1000", "tenants": benchTenants("h", 1000), "maxConcurrency": 64,
		"stages": []map[string]any{{"name": "push", "kind": "http", "http": map[string]any{"method": "POST", "url": bt.srv.URL + "/t/{{.TenantID}}/push"}}}})
	fig("1000×1 http, two instances: create to COMPLETED", waitStatus(t, a, p.PlanID, start, "COMPLETED"))
	benchCounts(t, a, p.PlanID)
	if tw := bt.twice(); len(tw) > 0 {
		t.Errorf("stages called twice: %v", tw)
	}

	// Operator's reads.
	fig("deployctl status (GET /v1/tenants/{id}/task)", run(append([]string{"status", "--tenant", "a-0007"}, srvArgs...)...))
	fig("deployctl plan show", run(append([]string{"plan", "show", planA}, srvArgs...)...))
	fig("deployctl plan tasks --all (1000 tasks)", run(append([]string{"plan", "tasks", planA, "--all"}, srvArgs...)...))
	fig("deployctl plan list", run(append([]string{"plan", "list"}, srvArgs...)...))
	for _, page := range []string{"/ui/", "/ui/plans/" + planA, "/ui/tenants/a-0007", "/ui/instances"} {
		start = time.Now()
		st, _, body, err := a.req("GET", page, nil)
		if err != nil || st != http.StatusOK {
			t.Fatalf("GET %s: %d %v %s", page, st, err, body)
		}
		fig("console GET "+page, time.Since(start))
	}

	// Bulk retry of 500 FAILED tasks.
	bt.fail.Store(true)
	start = time.Now()
	p = a.createPlan(map[string]any{"name": "f500", "tenants": benchTenants("f", 500), "maxConcurrency": 64,
		"stages": []map[string]any{{"name": "push", "kind": "http", "http": map[string]any{"method": "POST", "url": bt.srv.URL + "/t/{{.TenantID}}/push"}}}})
	waitCount(t, a, p.PlanID, task.StatusFailed, 500, start)
	bt.fail.Store(false)
	// The answer may not come: the server's write timeout (60s) cuts a
	// request that takes longer (deployctl then says EOF); the retry goes on.
	rargs := append([]string{"plan", "retry", p.PlanID, "--status", "FAILED", "--reason", "bench", "--yes"}, srvArgs...)
	start = time.Now()
	out, err := exec.Command(ctl, rargs...).CombinedOutput()
	d := time.Since(start)
	if err != nil {
		t.Logf("deployctl plan retry: %v: %s", err, out)
		fig("deployctl plan retry --status FAILED (500 tasks): FAILED, no answer", d)
	} else {
		fig("deployctl plan retry --status FAILED (500 tasks)", d)
	}
	rstart := time.Now()
	waitStatus(t, a, p.PlanID, rstart, "COMPLETED")
	fig("bulk retry of 500: to COMPLETED", time.Since(start))
	benchCounts(t, a, p.PlanID)

	// Task retry of one FAILED task.
	bt.fail.Store(true)
	start = time.Now()
	p = a.createPlan(map[string]any{"name": "f1", "tenants": benchTenants("g", 1),
		"stages": []map[string]any{{"name": "push", "kind": "http", "http": map[string]any{"method": "POST", "url": bt.srv.URL + "/t/{{.TenantID}}/push"}}}})
	waitCount(t, a, p.PlanID, task.StatusFailed, 1, start)
	bt.fail.Store(false)
	fig("deployctl retry --tenant --from-checkpoint", run(append([]string{"retry", "--tenant", "g-0000", "--from-checkpoint", "--reason", "bench"}, srvArgs...)...))

	// Cancel of a plan of 1000 (64 running a long sleep, 936 pending).
	start = time.Now()
	p = a.createPlan(map[string]any{"name": "c1000", "tenants": benchTenants("k", 1000), "maxConcurrency": 64,
		"stages": []map[string]any{{"name": "wait", "kind": "sleep", "sleep": map[string]any{"duration": "5s"}}}})
	waitCount(t, a, p.PlanID, task.StatusRunning, 64, start)
	d = run(append([]string{"plan", "cancel", p.PlanID, "--reason", "bench"}, srvArgs...)...)
	fig("deployctl plan cancel (1000 tasks, 64 running a 5s sleep)", d)
	start = time.Now()
	fig("plan cancel: to CANCELLED", waitStatus(t, a, p.PlanID, start, "CANCELLED")+d)
	// The running tasks finish their (only) stage: COMPLETED.
	for {
		pl := a.plan(p.PlanID)
		if pl.Counts[task.StatusRunning] == 0 && pl.Counts[task.StatusPending] == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	benchCounts(t, a, p.PlanID)

	// Shutdown.
	for _, n := range []*node{b, a} {
		start = time.Now()
		n.signal(syscall.SIGTERM)
		if code := n.wait(); code != 0 {
			t.Errorf("%s exited %d", n.name, code)
		}
		fig("shutdown (SIGTERM to exit), idle instance "+n.name, time.Since(start))
	}
	for _, n := range []*node{a, b} {
		for _, l := range n.log.all() {
			if strings.Contains(l.Raw, `"level":"warn"`) || strings.Contains(l.Raw, `"level":"error"`) {
				t.Logf("[%s] %s", n.name, l.Raw)
			}
		}
	}
}
