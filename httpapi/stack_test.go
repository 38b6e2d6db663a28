package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
	"github.com/deploycoord/deploycoord/tenantlock"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// stack is the API over a real coordinator as cmd wires it: the double-
// writing store (Redis and memory), tenant locks in Redis, and http stages
// calling a real target server.
type stack struct {
	h      http.Handler
	coord  *facade.Coordinator
	client redis.UniversalClient
	store  *repository.Dual
	keys   repository.Keys
	locks  *redislock.Locker
	target *httptest.Server
	// failing makes the target answer 500 to pushes for this tenant.
	failing atomic.Value
	// mini is the miniredis server on that backend (nil on a real Redis).
	mini *miniredis.Miniredis
}

func newStack(t *testing.T, b redistest.Backend) *stack {
	t.Helper()
	client, prefix := b.New(t)
	s := newStackOn(t, client, prefix, "coord-a", httpapi.Config{})
	if b.Mini != nil {
		s.mini = b.Mini(t)
	}
	return s
}

// newStackOn builds a stack on client and prefix: stacks built on the same
// ones are instances sharing one Redis. cfg's Ready and Idempotency are set;
// opts change the coordinator's and the locks' configs (the locks' lease is
// the coordinator's).
func newStackOn(t *testing.T, client redis.UniversalClient, prefix, instance string, cfg httpapi.Config,
	opts ...func(*facade.Config, *redislock.Config)) *stack {
	t.Helper()
	s := &stack{client: client}
	s.failing.Store("")
	s.target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if bad := s.failing.Load().(string); bad != "" && strings.Contains(r.URL.Path, "/"+bad+"/") {
			http.Error(w, "config server down", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"pushed": true}`)
	}))
	t.Cleanup(s.target.Close)

	rs, err := repository.NewRedis(client, repository.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	keys := rs.Keys()
	s.keys = keys
	fc := facade.Config{
		Instance: instance, Lease: 5 * time.Second,
		Pipelines: map[string][]task.StageSpec{"standard-deploy": {{Name: "noop", Kind: "noop"}}},
	}
	lc := redislock.Config{
		LockKey:  func(id string) string { k, _ := keys.Lock(id); return k },
		FenceKey: func(id string) string { k, _ := keys.Fence(id); return k },
	}
	for _, o := range opts {
		o(&fc, &lc)
	}
	lc.Lease = fc.Lease
	locks, err := redislock.New(client, lc)
	if err != nil {
		t.Fatal(err)
	}
	s.locks = locks
	store := repository.NewDual(repository.NewMemory(repository.MemoryConfig{DropFinished: true}), rs)
	s.store = store
	fc.Stages = stage.NewRegistry(stage.Options{InlineHTTPHosts: []string{"127.0.0.1"}})
	c, err := facade.New(store, locks, fc)
	if err != nil {
		t.Fatal(err)
	}
	s.coord = c
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Shutdown(ctx)
	})
	cfg.Ready = func(context.Context) error { return nil }
	cfg.Idempotency = rs.Idempotency()
	s.h = httpapi.New(c, cfg)
	return s
}

// await polls path until pick(answer) is want.
func (s *stack) await(t *testing.T, path, field, want string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		a := serve(t, s.h, request{method: "GET", path: path})
		m := a.JSON(t)
		if a.Status == 200 && m[field] == want {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %s is %v after 15s, want %s: %s", path, field, m[field], want, a.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *stack) do(t *testing.T, method, path, body string, status int) map[string]any {
	t.Helper()
	a := serve(t, s.h, request{method: method, path: path, body: body})
	if a.Status != status {
		t.Fatalf("%s %s = %d, want %d: %s", method, path, a.Status, status, a.Body)
	}
	if len(a.Body) == 0 {
		return nil
	}
	return a.JSON(t)
}

func (s *stack) fail(t *testing.T, method, path, body string, status int, code string) httpapi.Problem {
	t.Helper()
	return serve(t, s.h, request{method: method, path: path, body: body}).problem(t, status, code)
}

func TestStack(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			t.Run("FailRetryComplete", func(t *testing.T) { t.Parallel(); testFailRetryComplete(t, newStack(t, b)) })
			t.Run("PlanLifecycle", func(t *testing.T) { t.Parallel(); testPlanLifecycle(t, newStack(t, b)) })
			t.Run("PauseResumeTask", func(t *testing.T) { t.Parallel(); testPauseResumeTask(t, newStack(t, b)) })
			t.Run("Lock", func(t *testing.T) { t.Parallel(); testLock(t, newStack(t, b)) })
			t.Run("IdempotentAcrossInstances", func(t *testing.T) { t.Parallel(); testIdempotentAcrossInstances(t, b) })
			t.Run("IdempotentRetry", func(t *testing.T) { t.Parallel(); testIdempotentRetry(t, newStack(t, b)) })
			t.Run("ETagFollowsTask", func(t *testing.T) { t.Parallel(); testETagFollowsTask(t, newStack(t, b)) })
			if b.Mini != nil {
				t.Run("RedisDownDegraded", func(t *testing.T) { t.Parallel(); testDegraded(t, newStack(t, b)) })
			}
		})
	}
}

// testFailRetryComplete follows docs/api.md's main story: a plan over two
// tenants, one fails after its first stage; an SRE looks at it and retries it
// from the checkpoint.
func testFailRetryComplete(t *testing.T, s *stack) {
	s.failing.Store("t-001")
	spec := fmt.Sprintf(`{
		"name": "config-rollout",
		"stages": [
			{"name": "prepare", "kind": "noop"},
			{"name": "push-config", "kind": "http", "retry": {"maxAttempts": 1},
			 "http": {"method": "POST", "url": "%s/tenants/{{.TenantID}}/push", "successStatus": [200]}}
		],
		"tenants": [{"tenantId": "t-001", "params": {"version": "1.2.3"}}, {"tenantId": "t-002"}],
		"maxConcurrency": 2
	}`, s.target.URL)
	created := s.do(t, "POST", "/v1/plans", spec, 201)
	planID := created["planId"].(string)
	pp := "/v1/plans/" + planID

	p := s.await(t, pp, "status", "FAILED")
	if c := p["counts"].(map[string]any); c["COMPLETED"] != 1.0 || c["FAILED"] != 1.0 || p["finishedAt"] == nil {
		t.Fatalf("finished plan = %v", p)
	}
	if l := s.do(t, "GET", "/v1/plans?status=FAILED", "", 200)["plans"].([]any); len(l) != 1 || l[0].(map[string]any)["planId"] != planID {
		t.Errorf("failed plans = %v", l)
	}
	if l := s.do(t, "GET", pp+"/tasks?status=FAILED", "", 200)["tasks"].([]any); len(l) != 1 || l[0].(map[string]any)["tenantId"] != "t-001" {
		t.Errorf("failed tasks = %v", l)
	}

	tk := s.do(t, "GET", "/v1/tenants/t-001/task", "", 200)
	ck, _ := tk["checkpoint"].(map[string]any)
	if tk["status"] != "FAILED" || tk["currentStage"] != "push-config" || tk["hasCheckpoint"] != true || ck == nil ||
		fmt.Sprint(ck["completedStages"]) != "[prepare]" || !strings.Contains(tk["lastError"].(string), "500") {
		t.Fatalf("failed task = %v", tk)
	}
	taskID := tk["taskId"].(string)
	if byID := s.do(t, "GET", "/v1/tasks/"+taskID, "", 200); byID["tenantId"] != "t-001" {
		t.Errorf("task by id = %v", byID)
	}
	if full := s.do(t, "GET", "/v1/tenants/t-001/checkpoint", "", 200); full["lastCompletedStageIndex"] != 0.0 {
		t.Errorf("checkpoint = %v", full)
	}
	s.do(t, "HEAD", "/v1/tenants/t-001/checkpoint", "", 200)
	s.do(t, "HEAD", "/v1/tenants/t-999/checkpoint", "", 404)
	s.fail(t, "GET", "/v1/tenants/t-999/task", "", 404, httpapi.CodeNotFound)
	s.fail(t, "GET", "/v1/tenants/t-999/checkpoint", "", 404, httpapi.CodeNotFound)
	if h := s.do(t, "GET", "/v1/tenants/t-001/history", "", 200)["tasks"].([]any); len(h) != 1 {
		t.Errorf("history = %v", h)
	}
	tl := s.do(t, "GET", "/v1/tenants/t-001/timeline", "", 200)
	if tl["taskId"] != taskID || !strings.Contains(fmt.Sprint(tl["events"]), "task.stage_failed") {
		t.Errorf("timeline = %v", tl)
	}
	st := s.do(t, "POST", "/v1/tenants:status", `{"tenantIds": ["t-001", "t-002", "t-999"]}`, 200)["tasks"].(map[string]any)
	if st["t-999"] != nil || st["t-001"].(map[string]any)["status"] != "FAILED" || st["t-002"].(map[string]any)["status"] != "COMPLETED" {
		t.Errorf("tenants:status = %v", st)
	}

	dry := s.do(t, "POST", "/v1/tenants/t-001/retry", `{"dryRun": true, "reason": "check"}`, 200)
	if fmt.Sprint(dry["wouldRun"]) != "[push-config]" {
		t.Errorf("dry run = %v", dry)
	}
	s.fail(t, "POST", "/v1/tenants/t-001/retry", `{"reason": "again", "expectedAttempt": 2}`, 409, httpapi.CodeAttemptMismatch)
	s.fail(t, "POST", "/v1/tenants/t-002/retry", `{"reason": "again"}`, 409, httpapi.CodeTaskCompleted)
	s.fail(t, "POST", "/v1/tenants/t-001/retry", `{"reason": "x", "fromStage": "nope"}`, 400, httpapi.CodeInvalidArgument)
	s.fail(t, "POST", "/v1/tenants/t-001/retry", `{"reason": ""}`, 400, httpapi.CodeInvalidArgument)

	s.failing.Store("")
	re := s.do(t, "POST", "/v1/tenants/t-001/retry", `{"fromCheckpoint": true, "reason": "INC-1234 config server fixed", "expectedAttempt": 1}`, 202)
	if re["status"] != "RUNNING" || re["attempt"] != 2.0 || re["taskId"] != taskID {
		t.Errorf("retried task = %v", re)
	}
	s.await(t, "/v1/tenants/t-001/task", "status", "COMPLETED")
	s.await(t, pp, "status", "COMPLETED")
	s.fail(t, "POST", pp+"/pause", `{"reason": "too late"}`, 409, httpapi.CodePlanFinished)
	s.fail(t, "POST", "/v1/tenants/t-001/cancel", `{"reason": "too late"}`, 409, httpapi.CodeTaskCompleted)
	tl = s.do(t, "GET", "/v1/tenants/t-001/timeline?limit=200", "", 200)
	if !strings.Contains(fmt.Sprint(tl["events"]), "INC-1234 config server fixed") {
		t.Errorf("the retry's reason is not in the timeline: %v", tl)
	}
}

func testPlanLifecycle(t *testing.T, s *stack) {
	s.fail(t, "POST", "/v1/plans", `{"name": "x", "pipeline": "nope", "tenants": [{"tenantId": "t-1"}]}`, 400, httpapi.CodeInvalidArgument)
	s.fail(t, "POST", "/v1/plans", `{"name": "x", "pipeline": "standard-deploy", "tenants": [{"tenantId": "t:1"}]}`, 400, httpapi.CodeInvalidArgument)
	s.fail(t, "GET", "/v1/plans/plan-01JDQZV5X8M7R2K9C3B4N6P0QS", "", 404, httpapi.CodeNotFound)

	p := s.do(t, "POST", "/v1/plans", `{"name": "later", "pipeline": "standard-deploy", "tenants": [{"tenantId": "t-1"}], "start": false}`, 201)
	pp := "/v1/plans/" + p["planId"].(string)
	if p["status"] != "CREATED" || p["startedAt"] != nil || p["pipeline"] != "standard-deploy" {
		t.Fatalf("created plan = %v", p)
	}
	s.fail(t, "POST", pp+"/resume", `{"reason": "r"}`, 409, httpapi.CodeInvalidState)
	s.fail(t, "POST", pp+"/pause", `{"reason": "r"}`, 409, httpapi.CodeInvalidState)
	c := s.do(t, "POST", pp+"/cancel", `{"reason": "changed my mind"}`, 200)
	if c["status"] != "CANCELLED" || c["reason"] != "changed my mind" {
		t.Fatalf("cancelled plan = %v", c)
	}
	s.fail(t, "POST", pp+"/start", `{"reason": "r"}`, 409, httpapi.CodePlanFinished)

	p = s.do(t, "POST", "/v1/plans", `{"name": "now", "pipeline": "standard-deploy", "tenants": [{"tenantId": "t-2"}], "start": false}`, 201)
	pp = "/v1/plans/" + p["planId"].(string)
	if st := s.do(t, "POST", pp+"/start", `{"reason": "go"}`, 200); st["status"] != "RUNNING" && st["status"] != "COMPLETED" {
		t.Fatalf("started plan = %v", st)
	}
	s.await(t, pp, "status", "COMPLETED")
}

func testPauseResumeTask(t *testing.T, s *stack) {
	p := s.do(t, "POST", "/v1/plans", `{"name": "slow", "stages": [{"name": "wait", "kind": "sleep", "sleep": {"duration": "700ms"}}, {"name": "done", "kind": "noop"}], "tenants": [{"tenantId": "t-slow"}]}`, 201)
	s.await(t, "/v1/tenants/t-slow/task", "status", "RUNNING")
	s.fail(t, "POST", "/v1/tenants/t-slow/resume", `{"reason": "r", "extra": 1}`, 400, httpapi.CodeInvalidArgument)
	s.fail(t, "POST", "/v1/tenants/t-slow/retry", `{"reason": "r"}`, 409, httpapi.CodeTaskRunning)
	pr := s.do(t, "POST", "/v1/tenants/t-slow/pause", `{"reason": "hold on"}`, 200)
	if pr["pauseRequested"] != true && pr["status"] != "PAUSED" {
		t.Fatalf("pause answer = %v", pr)
	}
	tk := s.await(t, "/v1/tenants/t-slow/task", "status", "PAUSED")
	// The pause lands at the next stage boundary: after "wait", or before
	// it when the request beat the first stage.
	if tk["reason"] != "hold on" || (tk["currentStage"] != "done" && tk["currentStage"] != "wait") {
		t.Errorf("paused task = %v", tk)
	}
	if r := s.do(t, "POST", "/v1/tenants/t-slow/resume", `{"reason": "go on"}`, 200); r["status"] != "RUNNING" && r["status"] != "COMPLETED" {
		t.Errorf("resumed task = %v", r)
	}
	s.await(t, "/v1/tenants/t-slow/task", "status", "COMPLETED")
	s.await(t, "/v1/plans/"+p["planId"].(string), "status", "COMPLETED")
}

func testLock(t *testing.T, s *stack) {
	if l := s.do(t, "GET", "/v1/tenants/t-lock/lock", "", 200); l["held"] != false {
		t.Fatalf("free lock = %v", l)
	}
	s.fail(t, "DELETE", "/v1/tenants/t-lock/lock", `{"reason": "r", "expectedFence": 1}`, 404, httpapi.CodeNotFound)
	lease, err := s.locks.Acquire(context.Background(), "t-lock", tenantlock.Holder{
		PlanID: "plan-01JDQZV5X8M7R2K9C3B4N6P0QS", TaskID: "task-01JDQZV5X8M7R2K9C3B4N6P0QS", Instance: "coord-b"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(context.Background()) }()
	l := s.do(t, "GET", "/v1/tenants/t-lock/lock", "", 200)
	fence := int64(l["fence"].(float64))
	if l["held"] != true || l["owner"] != "coord-b" || l["ttlMs"].(float64) <= 0 || fence != lease.Fence() {
		t.Fatalf("held lock = %v (fence %d)", l, lease.Fence())
	}
	s.fail(t, "DELETE", "/v1/tenants/t-lock/lock", fmt.Sprintf(`{"reason": "r", "expectedFence": %d}`, fence-1), 409, httpapi.CodeLockMismatch)
	s.fail(t, "DELETE", "/v1/tenants/t-lock/lock", `{"reason": "r"}`, 400, httpapi.CodeInvalidArgument)
	rel := s.do(t, "DELETE", "/v1/tenants/t-lock/lock", fmt.Sprintf(`{"reason": "INC-9 stuck", "expectedFence": %d}`, fence), 200)
	if rel["released"] != true || rel["owner"] != "coord-b" || int64(rel["fence"].(float64)) != fence {
		t.Fatalf("release = %v", rel)
	}
	if l := s.do(t, "GET", "/v1/tenants/t-lock/lock", "", 200); l["held"] != false {
		t.Errorf("lock after release = %v", l)
	}
}

// testDegraded stops Redis under a running plan: what memory holds is
// answered marked degraded, what it does not is 503 UNAVAILABLE.
func testDegraded(t *testing.T, s *stack) {
	p := s.do(t, "POST", "/v1/plans", `{"name": "slow", "stages": [{"name": "wait", "kind": "sleep", "sleep": {"duration": "2s"}}], "tenants": [{"tenantId": "t-d"}]}`, 201)
	pp := "/v1/plans/" + p["planId"].(string)
	s.await(t, "/v1/tenants/t-d/task", "status", "RUNNING")
	s.mini.Close()
	for _, path := range []string{pp, "/v1/tenants/t-d/task"} {
		a := serve(t, s.h, request{method: "GET", path: path})
		if a.Status != 200 || a.Header.Get(httpapi.HeaderDegraded) != "true" || a.JSON(t)["degraded"] != true {
			t.Errorf("GET %s with Redis down = %d, degraded header %q: %s", path, a.Status, a.Header.Get(httpapi.HeaderDegraded), a.Body)
		}
	}
	s.fail(t, "GET", "/v1/tenants/t-unknown/task", "", 503, httpapi.CodeUnavailable)
	s.fail(t, "POST", "/v1/tenants:status", `{"tenantIds": ["t-d", "t-unknown"]}`, 503, httpapi.CodeUnavailable)
}

func TestNewServerDefaults(t *testing.T) {
	t.Parallel()
	srv := httpapi.NewServer("127.0.0.1:0", http.NotFoundHandler(), httpapi.ServerConfig{WriteTimeout: 90 * time.Second})
	if srv.ReadHeaderTimeout != httpapi.ReadHeaderTimeoutDefault || srv.ReadTimeout != httpapi.ReadTimeoutDefault ||
		srv.WriteTimeout != 90*time.Second || srv.IdleTimeout != httpapi.IdleTimeoutDefault || srv.MaxHeaderBytes != httpapi.MaxHeaderBytesDefault {
		t.Fatalf("server = %+v", srv)
	}
}

// testIdempotentAcrossInstances creates a plan through instance A and
// repeats the request through instance B (real HTTP servers, two
// coordinators, one Redis): one plan exists, both answers are the same.
func testIdempotentAcrossInstances(t *testing.T, b redistest.Backend) {
	client, prefix := b.New(t)
	tokens := []httpapi.Token{{Name: "ci", Role: httpapi.RoleOperator, Hash: httpapi.HashSecret("ci-secret-0123456789abcdef")}}
	var answers [2]struct {
		status   int
		body     string
		replayed string
	}
	var stacks [2]*stack
	for i, inst := range []string{"coord-a", "coord-b"} {
		stacks[i] = newStackOn(t, client, prefix, inst, httpapi.Config{Tokens: tokens})
		srv := httptest.NewServer(stacks[i].h)
		t.Cleanup(srv.Close)
		req, _ := http.NewRequest("POST", srv.URL+"/v1/plans", strings.NewReader(
			`{"name": "once", "pipeline": "standard-deploy", "tenants": [{"tenantId": "t-once"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer ci-secret-0123456789abcdef")
		req.Header.Set(httpapi.HeaderIdempotencyKey, "release-2026-11-21")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers[i].status, answers[i].body, answers[i].replayed = resp.StatusCode, string(body), resp.Header.Get(httpapi.HeaderIdempotentReplayed)
	}
	if answers[0].status != 201 || answers[1].status != 201 || answers[0].body != answers[1].body ||
		answers[0].replayed != "" || answers[1].replayed != "true" {
		t.Fatalf("answers = %+v", answers)
	}
	a := serve(t, stacks[1].h, request{method: "GET", path: "/v1/plans", header: map[string]string{"Authorization": "Bearer ci-secret-0123456789abcdef"}})
	if plans := a.JSON(t)["plans"].([]any); len(plans) != 1 {
		t.Fatalf("%d plans after a repeated create, want 1: %s", len(plans), a.Body)
	}
}

// testIdempotentRetry retries a failed tenant twice with one key: the task
// is retried once.
func testIdempotentRetry(t *testing.T, s *stack) {
	s.failing.Store("t-r")
	spec := fmt.Sprintf(`{"name": "r", "stages": [{"name": "push", "kind": "http", "retry": {"maxAttempts": 1},
		"http": {"method": "POST", "url": "%s/tenants/{{.TenantID}}/push", "successStatus": [200]}}],
		"tenants": [{"tenantId": "t-r"}]}`, s.target.URL)
	s.do(t, "POST", "/v1/plans", spec, 201)
	s.await(t, "/v1/tenants/t-r/task", "status", "FAILED")
	s.failing.Store("")
	key := map[string]string{httpapi.HeaderIdempotencyKey: "retry-t-r-1"}
	body := `{"reason": "INC-8 fixed"}`
	first := serve(t, s.h, request{method: "POST", path: "/v1/tenants/t-r/retry", body: body, header: key})
	s.await(t, "/v1/tenants/t-r/task", "status", "COMPLETED")
	again := serve(t, s.h, request{method: "POST", path: "/v1/tenants/t-r/retry", body: body, header: key})
	if first.Status != 202 || again.Status != 202 || string(first.Body) != string(again.Body) || again.Header.Get(httpapi.HeaderIdempotentReplayed) != "true" {
		t.Fatalf("retries = %d then %d (replayed %q)", first.Status, again.Status, again.Header.Get(httpapi.HeaderIdempotentReplayed))
	}
	tk := s.do(t, "GET", "/v1/tenants/t-r/task", "", 200)
	if tk["attempt"] != 2.0 || tk["status"] != "COMPLETED" {
		t.Fatalf("task after a repeated retry = %v", tk)
	}
	// Without the key the same request is a new retry, refused: the task
	// completed.
	s.fail(t, "POST", "/v1/tenants/t-r/retry", body, 409, httpapi.CodeTaskCompleted)
}

// testETagFollowsTask polls a running task with If-None-Match: 304 while it
// runs unchanged, 200 with a new ETag once it completed.
func testETagFollowsTask(t *testing.T, s *stack) {
	s.do(t, "POST", "/v1/plans", `{"name": "e", "stages": [{"name": "wait", "kind": "sleep", "sleep": {"duration": "300ms"}}], "tenants": [{"tenantId": "t-e"}]}`, 201)
	s.await(t, "/v1/tenants/t-e/task", "status", "RUNNING")
	a := serve(t, s.h, request{method: "GET", path: "/v1/tenants/t-e/task"})
	etag := a.Header.Get("ETag")
	if a.Status != 200 || etag == "" {
		t.Fatalf("GET = %d, ETag %q", a.Status, etag)
	}
	// The heartbeat of the running task may change the answer, so only the
	// end is sure: poll until the answer differs, then it must be 200.
	deadline := time.Now().Add(15 * time.Second)
	for {
		b := serve(t, s.h, request{method: "GET", path: "/v1/tenants/t-e/task", header: map[string]string{"If-None-Match": etag}})
		if b.Status == 200 {
			if b.Header.Get("ETag") == etag || len(b.Body) == 0 {
				t.Fatalf("changed answer with the old ETag or no body")
			}
			etag = b.Header.Get("ETag")
			if b.JSON(t)["status"] == "COMPLETED" {
				break
			}
		} else if b.Status != 304 || len(b.Body) != 0 {
			t.Fatalf("poll = %d with %d bytes", b.Status, len(b.Body))
		}
		if time.Now().After(deadline) {
			t.Fatal("the task did not complete in 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if a := serve(t, s.h, request{method: "GET", path: "/v1/tenants/t-e/task", header: map[string]string{"If-None-Match": etag}}); a.Status != 304 {
		t.Fatalf("unchanged completed task = %d, want 304", a.Status)
	}
}
