package main

import (
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/redistest"
)

// listAnswer is what a list or history GET answered while Redis was not
// answering.
type listAnswer struct {
	status   int
	header   string
	degraded bool
	items    int
	code     string
	body     string
}

// getList GETs a list or history path and reads its degraded marks, the
// number of items (plans or tasks) or the problem code.
func getList(t *testing.T, n *node, path string) listAnswer {
	t.Helper()
	st, h, b, err := n.req("GET", path, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	a := listAnswer{status: st, header: h.Get(httpapi.HeaderDegraded), body: string(b)}
	var v struct {
		Plans    []json.RawMessage `json:"plans"`
		Tasks    []json.RawMessage `json:"tasks"`
		Degraded bool              `json:"degraded"`
		Code     string            `json:"code"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("GET %s: %d %s: %v", path, st, b, err)
	}
	a.degraded, a.items, a.code = v.Degraded, len(v.Plans)+len(v.Tasks), v.Code
	return a
}

// honest checks that a list answer during an outage is 503 UNAVAILABLE or a
// 200 marked degraded (field and header) with items in it: never a plain
// 200 that looks complete.
func honest(t *testing.T, path string, a listAnswer) {
	t.Helper()
	switch {
	case a.status == http.StatusServiceUnavailable && a.code == "UNAVAILABLE":
	case a.status == http.StatusOK && a.degraded && a.header == "true" && a.items > 0:
	default:
		t.Errorf("GET %s while Redis does not answer: %d degraded=%v header=%q items=%d: %s; "+
			"want 503 UNAVAILABLE or 200 with degraded true, the header and items", path, a.status, a.degraded, a.header, a.items, a.body)
	}
}

// TestListsRedisPaused pauses (SIGSTOP) the Redis of two instances while
// they run two shared plans: the lists an instance can answer from memory
// (the tasks it runs: their plan's task list, their tenant's history, the
// search) are 200 marked degraded; the ones it cannot (the tasks the other
// instance runs, a filter matching nothing it runs) are 503 UNAVAILABLE,
// where they used to be a plain 200 with an empty list. So are the plan
// list and a plan, though the instance created it: with shared plans the
// other instance moves its counts too, and memory's copy was answered
// stale (a finished plan as RUNNING).
func TestListsRedisPaused(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	prefix := redistest.Prefix(t)
	tg := newFaultTarget(t)
	tg.holdWhere(func(stageCall) bool { return true })
	start := func(id string) *node {
		m, _, err := runMain(t, "-redis-url", "redis://"+srv.Addr, "-key-prefix", prefix, "-instance-id", id,
			"-inline-http-hosts", "127.0.0.1", "-rate-limit", "off", "-shutdown-grace", "1s")
		if err != nil {
			t.Fatal(err)
		}
		return local(t, m)
	}
	a, b := start("lists-a"), start("lists-b")
	pa := a.createPlan(map[string]any{"name": "lists-a", "stages": []any{tg.stage("push")}, "tenants": tenants("la-1")})
	pb := b.createPlan(map[string]any{"name": "lists-b", "stages": []any{tg.stage("push")}, "tenants": tenants("lb-1")})
	tg.waitCall(10*time.Second, "push of la-1", func(c stageCall) bool { return c.Tenant == "la-1" })
	tg.waitCall(10*time.Second, "push of lb-1", func(c stageCall) bool { return c.Tenant == "lb-1" })
	// Before the outage: plain answers from Redis, every plan listed.
	if l := getList(t, a, "/v1/plans"); l.status != http.StatusOK || l.degraded || l.header != "" || l.items != 2 {
		t.Fatalf("GET /v1/plans before the outage: %+v, want 200, 2 plans, not degraded", l)
	}

	// Whoever claimed them runs la-1 and lb-1 (shared plans): a is asked,
	// and answers from memory for the ones it runs.
	runsOnA := func(tenant string) int {
		if owner := a.task(tenant).Owner; owner == "lists-a" {
			return http.StatusOK
		} else if owner != "lists-b" {
			t.Fatalf("%s runs on %q", tenant, owner)
		}
		return http.StatusServiceUnavailable
	}
	la, lb := runsOnA("la-1"), runsOnA("lb-1")
	anyOnA := http.StatusServiceUnavailable
	if la == http.StatusOK || lb == http.StatusOK {
		anyOnA = http.StatusOK
	}
	t.Logf("la-1 on a: %v, lb-1 on a: %v", la == http.StatusOK, lb == http.StatusOK)

	srv.Stop()
	t.Cleanup(srv.Cont)
	// The first query waits for Redis up to the query timeout; then the
	// instance knows Redis is not answering.
	for _, tt := range []struct {
		path string
		want int
	}{
		{"/v1/plans", http.StatusServiceUnavailable},
		{"/v1/plans/" + pa.PlanID + "/tasks", la},
		{"/v1/tenants/la-1/history", la},
		{"/v1/plans/" + pb.PlanID + "/tasks", lb},
		{"/v1/tenants/lb-1/history", lb},
		{"/v1/plans?status=COMPLETED", http.StatusServiceUnavailable},
		{"/v1/plans/" + pa.PlanID + "/tasks?status=FAILED", http.StatusServiceUnavailable},
		{"/v1/tasks?status=RUNNING", anyOnA},
		{"/v1/tasks?status=FAILED", http.StatusServiceUnavailable},
	} {
		l := getList(t, a, tt.path)
		honest(t, tt.path, l)
		if l.status != tt.want {
			t.Errorf("GET %s during the outage: %d, want %d: %s", tt.path, l.status, tt.want, l.body)
		}
	}
	if st, _, body, err := a.req("GET", "/v1/plans/"+pa.PlanID, nil); err != nil || st != http.StatusServiceUnavailable {
		t.Errorf("GET of the plan a created, during the outage: %d %s %v; want 503 (its progress is Redis')", st, body, err)
	}
	// Answers that are not lists say they came from memory too, in the body
	// as in the header: the instances (a alone), and, for a task a runs, its
	// timeline and the bulk status.
	degradedBody := func(method, path string, body any) {
		t.Helper()
		st, h, b, err := a.req(method, path, body)
		var v struct {
			Degraded bool `json:"degraded"`
		}
		if err != nil || st != http.StatusOK || h.Get(httpapi.HeaderDegraded) != "true" || json.Unmarshal(b, &v) != nil || !v.Degraded {
			t.Errorf("%s %s during the outage: %d %s %v; want 200 with degraded true (body and header)", method, path, st, b, err)
		}
	}
	degradedBody("GET", "/v1/instances", nil)
	for _, tn := range []struct {
		id   string
		runs int
	}{{"la-1", la}, {"lb-1", lb}} {
		if tn.runs == http.StatusOK {
			degradedBody("GET", "/v1/tenants/"+tn.id+"/timeline", nil)
			degradedBody("POST", "/v1/tenants:status", map[string]any{"tenantIds": []string{tn.id}})
		}
	}
	srv.Cont()
	tg.release()
	// Once Redis answers again, so do the lists, complete and unmarked (the
	// first calls after SIGCONT may still meet connections cut by the pause).
	until(t, 20*time.Second, func() (bool, string) {
		l := getList(t, a, "/v1/plans")
		return l.status == http.StatusOK && !l.degraded && l.header == "" && l.items == 2, "GET /v1/plans after the outage: " + l.body
	})
}

// TestListsNoRedis points an instance at an address where nothing listens:
// every list and history answer is 503 UNAVAILABLE (it used to be 200 with
// an empty list), and a single plan is too.
func TestListsNoRedis(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	m, _, err := runMain(t, "-redis-url", "redis://"+addr)
	if err != nil {
		t.Fatal(err)
	}
	n := local(t, m)
	const planID = "plan-01JDQZV5X8M7R2K9C3B4N6P0QS"
	for _, path := range []string{
		"/v1/plans", "/v1/plans?status=RUNNING", "/v1/plans/" + planID + "/tasks",
		"/v1/plans/" + planID + "/tasks?orphaned=true", "/v1/tenants/t-1/history", "/v1/tasks", "/v1/tasks?status=FAILED",
	} {
		l := getList(t, n, path)
		if l.status != http.StatusServiceUnavailable || l.code != "UNAVAILABLE" {
			t.Errorf("GET %s without Redis: %d %s, want 503 UNAVAILABLE", path, l.status, l.body)
		}
	}
}
