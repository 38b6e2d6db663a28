package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
)

// Failure drills (docs/architecture.md): the deploycoord binary as real processes,
// throwaway redis-servers that the drills pause, kill and restart, an
// in-process toxiproxy between one instance and Redis, and an httptest
// deployment target that records every stage call (tenant, stage,
// Idempotency-Key, when it started and ended, whether the caller went away)
// and can hold a stage until released. Each drill logs what it measured as
// "FIGURE <drill>: <what> = <value>" (docs/operations.md "Failure drills
// (measured)" quotes them). The binary is built once by binary() of
// e2e_test.go.

// knownBug fails the test at a product bug the drills found (see
// docs/operations.md "Failure drills (measured)"): every one of them is
// fixed, and the check stays so a regression fails by name.
func knownBug(t *testing.T, name, format string, args ...any) {
	t.Helper()
	t.Fatalf("regression of bug %s found by the drills: %s", name, fmt.Sprintf(format, args...))
}

// drillLease is the tenant lock lease of every drill: short, so a drill
// waits seconds, long enough for a loaded 2-core machine running -race
// binaries to renew in time.
const drillLease = 2 * time.Second

// drill is one fault drill: a Redis, a key prefix and the instances started
// on it.
type drill struct {
	t      *testing.T
	name   string
	redis  *redistest.Server // nil on the shared Redis
	addr   string
	prefix string
	env    []string
}

// newDrill returns a drill on srv (a throwaway redis-server the drill may
// stop, kill or restart), or on the shared real Redis with a fresh prefix
// when srv is nil. env is added to every instance's environment.
func newDrill(t *testing.T, srv *redistest.Server, env ...string) *drill {
	t.Helper()
	d := &drill{t: t, name: strings.TrimPrefix(t.Name(), "TestFault"), redis: srv}
	if srv != nil {
		d.addr, d.prefix = srv.Addr, redistest.Prefix(t)
	} else {
		_, d.prefix = redistest.Real(t)
		d.addr = redistest.Addr()
	}
	d.env = append([]string{
		"DEPLOYCOORD_REDIS_URL=redis://" + d.addr,
		"DEPLOYCOORD_KEY_PREFIX=" + d.prefix,
		"DEPLOYCOORD_LISTEN=127.0.0.1:0",
		"DEPLOYCOORD_INLINE_HTTP_HOSTS=127.0.0.1",
		"DEPLOYCOORD_LOCK_LEASE=" + drillLease.String(),
		"DEPLOYCOORD_RATE_LIMIT=off",
		"DEPLOYCOORD_SHUTDOWN_GRACE=2s",
	}, env...)
	return d
}

// figure logs one measured figure of the drill.
func (d *drill) figure(what string, v any) {
	d.t.Helper()
	if dur, ok := v.(time.Duration); ok {
		v = dur.Round(time.Millisecond)
	}
	d.t.Logf("FIGURE %s: %s = %v", d.name, what, v)
}

// store reads the drill's Redis directly (through the repository's Redis
// store: the keys are the instances').
func (d *drill) store() *repository.Redis {
	d.t.Helper()
	s, err := repository.NewRedis(redistest.NewClient(d.t, d.addr), repository.Config{Prefix: d.prefix})
	if err != nil {
		d.t.Fatal(err)
	}
	return s
}

// supports reports whether the binary knows the setting env (deploycoord -h
// lists every setting): a drill of a setting that disappeared fails.
func supports(t *testing.T, env string) bool {
	t.Helper()
	out, _ := exec.Command(binary(t), "-h").CombinedOutput()
	return strings.Contains(string(out), env)
}

// node is one running deploycoord process (of a drill or an end-to-end
// cluster), or, without cmd, a server run in-process by the test.
type node struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	base string
	log  *nodeLog
	done chan struct{}
	err  error
}

// logLine is one line an instance wrote, with the time the test read it
// (zerolog's timestamps have second precision).
type logLine struct {
	At      time.Time
	Raw     string
	Message string
	Level   string
	Fields  map[string]any
}

// nodeLog keeps an instance's output lines and copies them to a file.
type nodeLog struct {
	mu    sync.Mutex
	lines []logLine
	file  *os.File
}

func (l *nodeLog) add(raw string) {
	ln := logLine{At: time.Now(), Raw: raw}
	if json.Unmarshal([]byte(raw), &ln.Fields) == nil {
		ln.Message, _ = ln.Fields["message"].(string)
		ln.Level, _ = ln.Fields["level"].(string)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, ln)
	if l.file != nil {
		_, _ = l.file.WriteString(raw + "\n")
	}
}

func (l *nodeLog) all() []logLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// Write takes the process's stderr.
func (l *nodeLog) Write(p []byte) (int, error) {
	for _, s := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		l.add("stderr: " + s)
	}
	return len(p), nil
}

// start starts instance name with the drill's environment plus env (later
// entries win) and waits until it listens.
func (d *drill) start(name string, env ...string) *node {
	d.t.Helper()
	return startNode(d.t, name, append(slices.Clone(d.env), env...))
}

// startNode starts the binary as instance name with env (on top of the
// test's environment without DEPLOYCOORD_ settings) and waits until it
// listens. Its output goes to <tempdir>/<name>.log and is printed when the
// test fails; the process is killed when the test ends.
func startNode(t *testing.T, name string, env []string) *node {
	t.Helper()
	cmd := exec.Command(binary(t))
	cmd.Env = append(append(cleanEnv(), "DEPLOYCOORD_INSTANCE_ID="+name), env...)
	f, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, name: name, cmd: cmd, log: &nodeLog{file: f}, done: make(chan struct{})}
	cmd.Stderr = n.log
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			n.log.add(sc.Text())
			var l struct{ Message, Addr string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message == "listening" {
				select {
				case addr <- l.Addr:
				default:
				}
			}
		}
		n.err = cmd.Wait()
		close(n.done)
	}()
	t.Cleanup(func() {
		select {
		case <-n.done:
		default:
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			<-n.done
		}
		_ = f.Close()
		if t.Failed() {
			n.dumpLog()
		}
	})
	select {
	case a := <-addr:
		n.base = "http://" + a
	case <-n.done:
		n.dumpLog()
		t.Fatalf("%s exited before listening: %v", name, n.err)
	case <-time.After(30 * time.Second):
		n.dumpLog()
		t.Fatalf("%s did not log \"listening\" within 30s", name)
	}
	return n
}

// dumpLog prints the instance's log lines, without the access log lines of
// successful requests.
func (n *node) dumpLog() {
	for _, l := range n.log.all() {
		if l.Message == "request" && strings.Contains(l.Raw, `"status":2`) {
			continue
		}
		n.t.Logf("[%s %s] %s", n.name, l.At.Format("15:04:05.000"), l.Raw)
	}
}

// waitLog waits until the instance logs a line with a message containing
// one of msgs, after since; it returns the line.
func (n *node) waitLog(since time.Time, timeout time.Duration, msgs ...string) logLine {
	n.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if l, ok := n.findLog(since, msgs...); ok {
			return l
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("%s logged none of %q within %s", n.name, msgs, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// findLog returns the first line after since whose message contains one of msgs.
func (n *node) findLog(since time.Time, msgs ...string) (logLine, bool) {
	for _, l := range n.log.all() {
		if l.At.Before(since) {
			continue
		}
		for _, m := range msgs {
			if strings.Contains(l.Message, m) {
				return l, true
			}
		}
	}
	return logLine{}, false
}

// signal sends sig to the process.
func (n *node) signal(sig syscall.Signal) {
	n.t.Helper()
	if err := n.cmd.Process.Signal(sig); err != nil {
		n.t.Fatalf("signal %v to %s: %v", sig, n.name, err)
	}
}

// kill crashes the instance (SIGKILL) and waits until it is gone.
func (n *node) kill() {
	n.t.Helper()
	n.signal(syscall.SIGKILL)
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		n.t.Fatalf("%s did not die", n.name)
	}
}

// terminate sends SIGTERM and waits for the process to exit; it returns the
// exit code.
func (n *node) terminate() int {
	n.t.Helper()
	n.signal(syscall.SIGTERM)
	return n.wait()
}

// stop sends SIGTERM and requires a clean exit (status 0).
func (n *node) stop() {
	n.t.Helper()
	if code := n.terminate(); code != 0 {
		n.dumpLog()
		n.t.Fatalf("%s exited with status %d after SIGTERM, want 0", n.name, code)
	}
}

// wait waits for the process to exit and returns its exit code.
func (n *node) wait() int {
	n.t.Helper()
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		n.t.Fatalf("%s did not exit within 30s", n.name)
	}
	var ee *exec.ExitError
	switch {
	case n.err == nil:
		return 0
	case errors.As(n.err, &ee):
		return ee.ExitCode()
	}
	n.t.Fatalf("%s: wait: %v", n.name, n.err)
	return -1
}

var drillClient = &http.Client{Timeout: 20 * time.Second}

// req sends a request with a JSON body (nil for none); status 0 means the
// request itself failed (err says why).
func (n *node) req(method, path string, body any) (int, http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, nil, err
		}
		rd = bytes.NewReader(b)
	}
	r, err := http.NewRequest(method, n.base+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	resp, err := drillClient.Do(r)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

// do sends a request with a JSON body (nil for none) and returns the status
// and the body; a request that fails fails the test.
func (n *node) do(method, path string, body any) (int, []byte) {
	n.t.Helper()
	st, _, b, err := n.req(method, path, body)
	if err != nil {
		n.t.Fatalf("%s %s on %s: %v", method, path, n.name, err)
	}
	return st, b
}

// must sends a request, requires status want and decodes the answer into a T.
func must[T any](n *node, method, path string, body any, want int) T {
	n.t.Helper()
	st, _, b, err := n.req(method, path, body)
	if err != nil {
		n.t.Fatalf("%s %s on %s: %v", method, path, n.name, err)
	}
	if st != want {
		n.t.Fatalf("%s %s on %s: status %d, want %d: %s", method, path, n.name, st, want, b)
	}
	var v T
	if len(b) > 0 {
		if err := json.Unmarshal(b, &v); err != nil {
			n.t.Fatalf("%s %s on %s: decode %T: %v: %s", method, path, n.name, v, err, b)
		}
	}
	return v
}

func (n *node) task(tenant string) httpapi.TaskDetail {
	n.t.Helper()
	return must[httpapi.TaskDetail](n, "GET", "/v1/tenants/"+tenant+"/task", nil, http.StatusOK)
}

func (n *node) plan(id string) httpapi.Plan {
	n.t.Helper()
	return must[httpapi.Plan](n, "GET", "/v1/plans/"+id, nil, http.StatusOK)
}

// planTasks lists one page of a plan's tasks (query: "?status=...").
func (n *node) planTasks(planID, query string) []httpapi.Task {
	n.t.Helper()
	return must[httpapi.TaskList](n, "GET", "/v1/plans/"+planID+"/tasks"+query, nil, http.StatusOK).Tasks
}

func (n *node) lock(tenant string) httpapi.Lock {
	n.t.Helper()
	return must[httpapi.Lock](n, "GET", "/v1/tenants/"+tenant+"/lock", nil, http.StatusOK)
}

func (n *node) timeline(tenant string) []task.Event {
	n.t.Helper()
	return must[httpapi.Timeline](n, "GET", "/v1/tenants/"+tenant+"/timeline", nil, http.StatusOK).Events
}

func (n *node) checkpoint(tenant string) httpapi.Checkpoint {
	n.t.Helper()
	return must[httpapi.Checkpoint](n, "GET", "/v1/tenants/"+tenant+"/checkpoint", nil, http.StatusOK)
}

func (n *node) createPlan(spec map[string]any) httpapi.Plan {
	n.t.Helper()
	return must[httpapi.Plan](n, "POST", "/v1/plans", spec, http.StatusCreated)
}

// allTasks lists every task of a plan, following the cursor.
func (n *node) allTasks(planID string) []httpapi.Task {
	n.t.Helper()
	var out []httpapi.Task
	cursor := ""
	for {
		q := "?limit=2"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		page := must[httpapi.TaskList](n, "GET", "/v1/plans/"+planID+"/tasks"+q, nil, http.StatusOK)
		out = append(out, page.Tasks...)
		if page.NextCursor == "" {
			return out
		}
		cursor = page.NextCursor
	}
}

// waitPlan polls until the plan's status is one of want and returns it.
func (n *node) waitPlan(id string, timeout time.Duration, want ...string) httpapi.Plan {
	n.t.Helper()
	var p httpapi.Plan
	until(n.t, timeout, func() (bool, string) {
		p = n.plan(id)
		return slices.Contains(want, string(p.Status)), fmt.Sprintf("plan %s is %s (counts %v), want %v", id, p.Status, p.Counts, want)
	})
	return p
}

// until polls cond every 10ms until it holds, failing the test with cond's
// last description after timeout. It returns how long it took.
func until(t *testing.T, timeout time.Duration, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ok, what := cond()
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkCounts requires the plan's counts to equal a recount of its task
// records (listed page by page) and returns the recount.
func checkCounts(t *testing.T, n *node, planID string) map[task.Status]int {
	t.Helper()
	p := n.plan(planID)
	tasks := n.allTasks(planID)
	recount := map[task.Status]int{}
	for _, tk := range tasks {
		recount[tk.Status]++
	}
	if len(tasks) != p.TotalTasks {
		t.Errorf("plan %s lists %d tasks, totalTasks %d", planID, len(tasks), p.TotalTasks)
	}
	for _, s := range []task.Status{task.StatusPending, task.StatusRunning, task.StatusPaused,
		task.StatusCompleted, task.StatusFailed, task.StatusCancelled} {
		if p.Counts[s] != recount[s] {
			t.Errorf("plan %s counts %v differ from the recount of its task records %v", planID, p.Counts, recount)
			break
		}
	}
	return recount
}

// metric sums the samples of the Prometheus metric name whose labels
// contain every one of labels (`reason="lock"`); ok is false when the
// instance serves no metrics.
func (n *node) metric(name string, labels ...string) (sum float64, ok bool) {
	n.t.Helper()
	st, _, body, err := n.req("GET", "/metrics", nil)
	if err != nil || st != http.StatusOK {
		return 0, false
	}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(line, l)
		}
		if !match {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum, true
}

// instances lists the instance registry as n sees it (GET /v1/instances).
func (n *node) instances() []httpapi.Instance {
	n.t.Helper()
	return must[httpapi.InstanceList](n, "GET", "/v1/instances", nil, http.StatusOK).Instances
}

// feed reads the whole event feed (GET /v1/events, page by page) with the
// filter query (e.g. "tenantId=t-1").
func (n *node) feed(query string) []httpapi.FeedEvent {
	n.t.Helper()
	var out []httpapi.FeedEvent
	cursor := ""
	for range 100 {
		q := "?limit=100"
		if query != "" {
			q += "&" + query
		}
		if cursor != "" {
			q += "&after=" + url.QueryEscape(cursor)
		}
		page := must[httpapi.Feed](n, "GET", "/v1/events"+q, nil, http.StatusOK)
		out = append(out, page.Events...)
		if len(page.Events) == 0 || page.NextCursor == "" || page.NextCursor == cursor {
			return out
		}
		cursor = page.NextCursor
	}
	return out
}

// ---- the deployment target ---------------------------------------------------

// stageCall is one call of a stage at the target.
type stageCall struct {
	Tenant, Stage, Key string
	// TaskID, Attempt and StageAttempt are read from the Idempotency-Key
	// (<taskId>/<stage>/<attempt>.<stageAttempt>).
	TaskID                string
	Attempt, StageAttempt int
	Start, End            time.Time
	// Open is true while the call has not ended; Cut is true when the caller
	// went away before the answer (its stage context was cancelled).
	Open, Cut bool
}

func (c stageCall) String() string {
	state := "answered"
	switch {
	case c.Open:
		state = "open"
	case c.Cut:
		state = "cut"
	}
	return fmt.Sprintf("%s/%s key=%s %s..%s %s", c.Tenant, c.Stage, c.Key,
		c.Start.Format("15:04:05.000"), c.End.Format("15:04:05.000"), state)
}

// target is the drills' deployment target: POST /tenants/{tenant}/{stage}
// answers 200 with a JSON object after the stage's delay, or waits while a
// hold matches the call (until released or the caller goes away).
type target struct {
	t   *testing.T
	srv *httptest.Server

	mu     sync.Mutex
	calls  []*stageCall
	delay  map[string]time.Duration
	hold   func(c stageCall) bool
	gate   chan struct{}
	onCall func(c stageCall)
}

func newFaultTarget(t *testing.T) *target {
	tg := &target{t: t, delay: map[string]time.Duration{}, gate: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/tenants/{tenant}/{stage}", tg.serve)
	tg.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		tg.release()
		tg.srv.CloseClientConnections()
		tg.srv.Close()
		if t.Failed() {
			for _, c := range tg.snapshot() {
				t.Logf("[target] %s", c)
			}
		}
	})
	return tg
}

func (tg *target) serve(w http.ResponseWriter, r *http.Request) {
	c := &stageCall{Tenant: r.PathValue("tenant"), Stage: r.PathValue("stage"), Key: r.Header.Get("Idempotency-Key"),
		Start: time.Now(), Open: true}
	if parts := strings.Split(c.Key, "/"); len(parts) == 3 {
		c.TaskID = parts[0]
		a, s, _ := strings.Cut(parts[2], ".")
		c.Attempt, _ = strconv.Atoi(a)
		c.StageAttempt, _ = strconv.Atoi(s)
	}
	tg.mu.Lock()
	tg.calls = append(tg.calls, c)
	held := tg.hold != nil && tg.hold(*c)
	gate, delay, hook := tg.gate, tg.delay[c.Stage], tg.onCall
	tg.mu.Unlock()
	if hook != nil {
		hook(*c)
	}
	ctx := r.Context()
	cut := false
	if held {
		select {
		case <-gate:
		case <-ctx.Done():
			cut = true
		}
	}
	if !cut && delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			cut = true
		}
	}
	tg.mu.Lock()
	c.End, c.Open, c.Cut = time.Now(), false, cut
	tg.mu.Unlock()
	if cut {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"tenant":%q,"stage":%q,"key":%q}`, c.Tenant, c.Stage, c.Key)
}

// stage is an inline http stage calling the target.
func (tg *target) stage(name string) map[string]any {
	return map[string]any{"name": name, "kind": "http", "timeout": "30s",
		"http": map[string]any{"method": "POST", "url": tg.srv.URL + "/tenants/{{.TenantID}}/" + name}}
}

// setDelay makes the target answer stage after d.
func (tg *target) setDelay(stage string, d time.Duration) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.delay[stage] = d
}

// holdWhere makes the calls matching match wait until release.
func (tg *target) holdWhere(match func(c stageCall) bool) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.hold = match
	tg.gate = make(chan struct{})
}

// release lets every held call (and every later one) go.
func (tg *target) release() {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.hold = nil
	select {
	case <-tg.gate:
	default:
		close(tg.gate)
	}
}

// setOnCall runs f (outside the target's lock) when a call arrives.
func (tg *target) setOnCall(f func(c stageCall)) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.onCall = f
}

func (tg *target) snapshot() []stageCall {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	out := make([]stageCall, len(tg.calls))
	for i, c := range tg.calls {
		out[i] = *c
	}
	return out
}

// find returns the calls matching match.
func (tg *target) find(match func(c stageCall) bool) []stageCall {
	var out []stageCall
	for _, c := range tg.snapshot() {
		if match(c) {
			out = append(out, c)
		}
	}
	return out
}

// of returns the calls of tenant's stage (every stage when stage is "").
func (tg *target) of(tenant, stage string) []stageCall {
	return tg.find(func(c stageCall) bool { return c.Tenant == tenant && (stage == "" || c.Stage == stage) })
}

// waitCall waits for a call matching match and returns it.
func (tg *target) waitCall(timeout time.Duration, what string, match func(c stageCall) bool) stageCall {
	tg.t.Helper()
	var got stageCall
	until(tg.t, timeout, func() (bool, string) {
		cs := tg.find(match)
		if len(cs) == 0 {
			return false, "the target saw no " + what
		}
		got = cs[0]
		return true, ""
	})
	return got
}

// ---- checkers -------------------------------------------------------------------

// checkExclusive returns an error naming the first two calls of one tenant
// that overlap in time: with one tenant lock, no two calls may (a call
// still open counts as running until now).
func checkExclusive(calls []stageCall) error {
	byTenant := map[string][]stageCall{}
	for _, c := range calls {
		if c.Open {
			c.End = time.Now()
		}
		byTenant[c.Tenant] = append(byTenant[c.Tenant], c)
	}
	tenants := make([]string, 0, len(byTenant))
	for id := range byTenant {
		tenants = append(tenants, id)
	}
	sort.Strings(tenants)
	for _, id := range tenants {
		cs := byTenant[id]
		sort.Slice(cs, func(i, j int) bool { return cs[i].Start.Before(cs[j].Start) })
		last := cs[0]
		for _, c := range cs[1:] {
			if c.Start.Before(last.End) {
				return fmt.Errorf("tenant %s: call %s starts before call %s ended", id, c, last)
			}
			if c.End.After(last.End) {
				last = c
			}
		}
	}
	return nil
}

// holding is one holder of a tenant's lock as seen at the target: a task's
// calls and the fence its record carries.
type holding struct {
	Tenant, TaskID string
	Fence          int64
	First, Last    time.Time
}

// holdings groups calls by task, in the order the target first saw them.
func holdings(calls []stageCall, fences map[string]int64) []holding {
	idx := map[string]int{}
	var out []holding
	for _, c := range calls {
		i, ok := idx[c.TaskID]
		if !ok {
			i = len(out)
			idx[c.TaskID] = i
			out = append(out, holding{Tenant: c.Tenant, TaskID: c.TaskID, Fence: fences[c.TaskID], First: c.Start, Last: c.End})
		}
		if c.Start.Before(out[i].First) {
			out[i].First = c.Start
		}
		if c.End.After(out[i].Last) {
			out[i].Last = c.End
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].First.Before(out[j].First) })
	return out
}

// checkFences returns an error when, for one tenant, a later holder's fence
// is not above every earlier holder's, or when two holders' calls interleave.
func checkFences(hs []holding) error {
	last := map[string]holding{}
	for _, h := range hs {
		prev, ok := last[h.Tenant]
		if ok {
			if h.Fence <= prev.Fence {
				return fmt.Errorf("tenant %s: task %s (fence %d) held the lock after task %s (fence %d): fences must increase",
					h.Tenant, h.TaskID, h.Fence, prev.TaskID, prev.Fence)
			}
			if h.First.Before(prev.Last) {
				return fmt.Errorf("tenant %s: task %s started calling at %s before task %s's last call ended at %s",
					h.Tenant, h.TaskID, h.First.Format("15:04:05.000"), prev.TaskID, prev.Last.Format("15:04:05.000"))
			}
		}
		last[h.Tenant] = h
	}
	return nil
}

// countEv counts the timeline events of type typ (of stage, if given).
func countEv(evs []task.Event, typ task.EventType, stage string) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ && (stage == "" || e.Stage == stage) {
			n++
		}
	}
	return n
}

func evTypes(evs []task.Event) string {
	var b strings.Builder
	for i, e := range evs {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(strings.TrimPrefix(string(e.Type), "task."))
		if e.Stage != "" {
			fmt.Fprintf(&b, "(%s#%d)", e.Stage, e.Attempt)
		}
	}
	return b.String()
}

// decode decodes a JSON answer into a T.
func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %T: %v: %s", v, err, b)
	}
	return v
}

// ctxTimeout is a short context for direct Redis reads.
func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}
