package httpapi_test

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/redistest"
)

// TestSearchStack: GET /v1/tasks on the whole stack — failed tasks across
// plans, paging, a hung stage found by runningLongerThan — and, with Redis
// down, an answer marked degraded (field and header), never a plain 200.
func TestSearchStack(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			s := newStack(t, b)
			s.failing.Store("q-bad")
			spec := fmt.Sprintf(`{"name": "search", "stages": [
				{"name": "prepare", "kind": "noop"},
				{"name": "push", "kind": "http", "retry": {"maxAttempts": 1},
				 "http": {"method": "POST", "url": "%s/tenants/{{.TenantID}}/push", "successStatus": [200]}}],
				"tenants": [{"tenantId": "q-bad"}, {"tenantId": "q-ok"}]}`, s.target.URL)
			var plans []string
			for range 2 {
				p := s.do(t, "POST", "/v1/plans", spec, 201)
				plans = append(plans, p["planId"].(string))
				s.await(t, "/v1/plans/"+plans[len(plans)-1], "status", "FAILED")
			}
			tenants := func(path string) ([]string, map[string]any) {
				t.Helper()
				a := serve(t, s.h, request{method: "GET", path: path})
				if a.Status != 200 || a.Header.Get(httpapi.HeaderDegraded) != "" {
					t.Fatalf("GET %s = %d (degraded %q): %s", path, a.Status, a.Header.Get(httpapi.HeaderDegraded), a.Body)
				}
				m := a.JSON(t)
				var out []string
				for _, x := range m["tasks"].([]any) {
					out = append(out, x.(map[string]any)["planId"].(string)+"/"+x.(map[string]any)["tenantId"].(string))
				}
				return out, m
			}
			got, m := tenants("/v1/tasks?status=FAILED")
			if want := []string{plans[1] + "/q-bad", plans[0] + "/q-bad"}; fmt.Sprint(got) != fmt.Sprint(want) || m["degraded"] != false || m["nextCursor"] != "" {
				t.Errorf("FAILED = %v (%v), want %v newest first", got, m, want)
			}
			// Paging through FAILED and COMPLETED, one task a page.
			var all []string
			path := "/v1/tasks?status=FAILED,COMPLETED&limit=1"
			for pages := 0; ; pages++ {
				page, m := tenants(path)
				all = append(all, page...)
				next, _ := m["nextCursor"].(string)
				if next == "" || pages > 10 {
					break
				}
				path = "/v1/tasks?status=FAILED,COMPLETED&limit=1&cursor=" + url.QueryEscape(next)
			}
			if len(all) != 4 {
				t.Errorf("FAILED|COMPLETED pages = %v, want 4 tasks", all)
			}
			got, _ = tenants("/v1/tasks?status=FAILED&stage=push&planId=" + plans[0])
			if fmt.Sprint(got) != fmt.Sprint([]string{plans[0] + "/q-bad"}) {
				t.Errorf("FAILED at push in plan 0 = %v", got)
			}
			// A task whose stage runs: found by runningLongerThan, with its stageStartedAt.
			p := s.do(t, "POST", "/v1/plans", `{"name": "slow", "stages": [{"name": "wait", "kind": "sleep", "sleep": {"duration": "3s"}}], "tenants": [{"tenantId": "q-slow"}]}`, 201)
			s.await(t, "/v1/tenants/q-slow/task", "status", "RUNNING")
			// The indexes move in the same pipeline as the record, a moment
			// after it: wait for the search to see the run.
			var ts []any
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				_, m = tenants("/v1/tasks?status=FAILED&runningLongerThan=1ns&orphaned=true")
				if ts = m["tasks"].([]any); len(ts) == 3 || time.Now().After(deadline) {
					break
				}
			}
			if len(ts) != 3 || ts[0].(map[string]any)["tenantId"] != "q-slow" || ts[0].(map[string]any)["stageStartedAt"] == nil ||
				ts[0].(map[string]any)["orphaned"] != false {
				t.Errorf("failed or stuck = %v, want q-slow (not orphaned, stageStartedAt set) then the failed", ts)
			}
			if s.mini == nil {
				return
			}
			s.mini.Close()
			a := serve(t, s.h, request{method: "GET", path: "/v1/tasks?status=RUNNING"})
			switch {
			case a.Status == 503:
			case a.Status == 200 && a.Header.Get(httpapi.HeaderDegraded) == "true" && a.JSON(t)["degraded"] == true:
				if ts := a.JSON(t)["tasks"].([]any); len(ts) != 1 || ts[0].(map[string]any)["planId"] != p["planId"] {
					t.Errorf("RUNNING from memory = %v, want the slow task", ts)
				}
			default:
				t.Errorf("GET /v1/tasks with Redis down = %d, degraded header %q: %s", a.Status, a.Header.Get(httpapi.HeaderDegraded), a.Body)
			}
			// Memory keeps no finished task: nothing to answer but 503.
			s.fail(t, "GET", "/v1/tasks?status=FAILED", "", 503, httpapi.CodeUnavailable)
		})
	}
}

// TestSearchRedisPausedAndGone: GET /v1/tasks with a real Redis paused
// (SIGSTOP) and then killed answers 503 or a 200 marked degraded (field and
// header) — never a plain 200 that looks complete.
func TestSearchRedisPausedAndGone(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	s := newStackOn(t, srv.Client(), redistest.Prefix(t), "coord-a", httpapi.Config{})
	p := s.do(t, "POST", "/v1/plans", `{"name": "slow", "stages": [{"name": "wait", "kind": "sleep", "sleep": {"duration": "30s"}}], "tenants": [{"tenantId": "z-slow"}]}`, 201)
	s.await(t, "/v1/tenants/z-slow/task", "status", "RUNNING")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ts := s.do(t, "GET", "/v1/tasks?status=RUNNING", "", 200)["tasks"].([]any)
		if len(ts) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("RUNNING with Redis up = %v", ts)
		}
	}
	honest := func(when string) {
		t.Helper()
		for _, path := range []string{"/v1/tasks?status=RUNNING", "/v1/tasks?status=FAILED&runningLongerThan=1ns", "/v1/tasks?planId=" + p["planId"].(string)} {
			a := serve(t, s.h, request{method: "GET", path: path})
			switch {
			case a.Status == 503:
			case a.Status == 200 && a.Header.Get(httpapi.HeaderDegraded) == "true" && a.JSON(t)["degraded"] == true:
			default:
				t.Errorf("GET %s with Redis %s = %d, degraded header %q: %s", path, when, a.Status, a.Header.Get(httpapi.HeaderDegraded), a.Body)
			}
		}
	}
	srv.Stop()
	honest("paused")
	srv.Cont()
	srv.Kill()
	honest("gone")
}
