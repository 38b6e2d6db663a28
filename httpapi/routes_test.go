package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

var (
	planKeys = []string{"planId", "name", "status", "reason", "pipeline", "maxConcurrency", "totalTasks", "counts",
		"stages", "owner", "createdAt", "startedAt", "finishedAt", "updatedAt", "onTenantLocked", "lockWait",
		"failureThreshold", "degraded"}
	taskKeys = []string{"taskId", "tenantId", "planId", "status", "orphaned", "pauseRequested", "attempt",
		"currentStageIndex", "currentStage", "totalStages", "lastError", "owner", "heartbeatAt", "createdAt",
		"startedAt", "finishedAt", "updatedAt", "cancelRequested", "reason", "fence", "degraded"}
	taskDetailKeys = append(slices.Clone(taskKeys), "hasCheckpoint", "checkpoint")
	lockKeys       = []string{"tenantId", "held", "planId", "taskId", "owner", "ttlMs", "fence"}
)

func hasKeys(t *testing.T, what string, m map[string]any, keys []string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s has no field %q: %v", what, k, m)
		}
	}
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	pp := "/v1/plans/" + planID
	tp := "/v1/tenants/" + tenantID
	reason := `{"reason": "INC-1234"}`
	tests := []struct {
		name   string
		req    request
		status int
		method string // service method called
		check  func(t *testing.T, m map[string]any, c call)
	}{
		{"CreatePlan", request{method: "POST", path: "/v1/plans", body: `{"name": "r", "pipeline": "standard-deploy", "tenants": [{"tenantId": "t-001", "params": {"version": "1.2.3"}}], "maxConcurrency": 5, "lockWait": "1m", "start": false}`},
			201, "CreatePlan", func(t *testing.T, m map[string]any, c call) {
				hasKeys(t, "plan", m, planKeys)
				if c.Spec.Name != "r" || c.Spec.Pipeline != "standard-deploy" || len(c.Spec.Tenants) != 1 ||
					c.Spec.Tenants[0].Params["version"] != "1.2.3" || c.Spec.MaxConcurrency != 5 ||
					c.Spec.LockWait.D() != time.Minute || c.Spec.ShouldStart() {
					t.Errorf("spec passed = %+v", c.Spec)
				}
			}},
		{"ListPlans", request{method: "GET", path: "/v1/plans?status=RUNNING&limit=50&cursor=1732181400000-plan"},
			200, "Plans", func(t *testing.T, m map[string]any, c call) {
				plans := m["plans"].([]any)
				if len(plans) != 1 || m["nextCursor"] != "" {
					t.Fatalf("list = %v", m)
				}
				p := plans[0].(map[string]any)
				hasKeys(t, "listed plan", p, slices.DeleteFunc(slices.Clone(planKeys), func(k string) bool { return k == "orphaned" }))
				// A listed plan carries its counts (its progress), not the
				// orphaned count (which needs the live owners).
				want := map[string]any{"PENDING": 0.0, "RUNNING": 1.0, "PAUSED": 0.0, "COMPLETED": 1.0, "FAILED": 0.0, "CANCELLED": 0.0}
				if fmt.Sprint(p["counts"]) != fmt.Sprint(want) {
					t.Errorf("listed plan counts = %v, want %v", p["counts"], want)
				}
				if _, ok := p["orphaned"]; ok {
					t.Errorf("listed plan has orphaned although the listing does not look for live owners: %v", p["orphaned"])
				}
				if c.ListFilter != (plan.ListFilter{Status: plan.StatusRunning, Limit: 50, Cursor: "1732181400000-plan"}) {
					t.Errorf("filter = %+v", c.ListFilter)
				}
			}},
		{"GetPlan", request{method: "GET", path: pp}, 200, "Plan", func(t *testing.T, m map[string]any, c call) {
			hasKeys(t, "plan", m, planKeys)
			want := map[string]any{"PENDING": 0.0, "RUNNING": 1.0, "PAUSED": 0.0, "COMPLETED": 1.0, "FAILED": 0.0, "CANCELLED": 0.0}
			if fmt.Sprint(m["counts"]) != fmt.Sprint(want) {
				t.Errorf("counts = %v, want %v", m["counts"], want)
			}
			if m["finishedAt"] != nil || m["startedAt"] != "2026-11-21T09:30:01Z" || m["failureThreshold"] != nil {
				t.Errorf("times or threshold = %v %v %v", m["finishedAt"], m["startedAt"], m["failureThreshold"])
			}
			if fmt.Sprint(m["stages"]) != "[push-config settle]" || c.ID != planID {
				t.Errorf("stages = %v, id = %s", m["stages"], c.ID)
			}
		}},
		{"PlanTasks", request{method: "GET", path: pp + "/tasks?status=FAILED&orphaned=true&limit=100&cursor=10"},
			200, "PlanTasks", func(t *testing.T, m map[string]any, c call) {
				tasks := m["tasks"].([]any)
				if len(tasks) != 1 {
					t.Fatalf("tasks = %v", tasks)
				}
				hasKeys(t, "listed task", tasks[0].(map[string]any), taskKeys)
				f := c.TaskFilter
				if f.Status != task.StatusFailed || !f.Orphaned || f.Limit != 100 || f.Cursor != "10" || c.ID != planID {
					t.Errorf("filter = %+v", f)
				}
			}},
		{"StartPlan", request{method: "POST", path: pp + "/start", body: reason}, 200, "StartPlan", planActionCheck},
		{"PausePlan", request{method: "POST", path: pp + "/pause", body: reason}, 200, "PausePlan", planActionCheck},
		{"CancelPlan", request{method: "POST", path: pp + "/cancel", body: reason}, 200, "CancelPlan", planActionCheck},
		{"RepairCounts", request{method: "POST", path: pp + "/repair-counts", body: reason}, 200, "RepairCounts", planActionCheck},
		{"ResumePlan", request{method: "POST", path: pp + "/resume", body: `{"reason": "INC-1234", "includeOrphaned": true}`},
			200, "ResumePlan", func(t *testing.T, m map[string]any, c call) {
				planActionCheck(t, m, c)
				if !c.Resume.IncludeOrphaned {
					t.Error("includeOrphaned not passed")
				}
			}},
		{"TenantTask", request{method: "GET", path: tp + "/task"}, 200, "TaskByTenant", func(t *testing.T, m map[string]any, c call) {
			hasKeys(t, "task", m, taskDetailKeys)
			ck := m["checkpoint"].(map[string]any)
			hasKeys(t, "checkpoint summary", ck, []string{"lastCompletedStageIndex", "completedStages", "savedAt"})
			if _, ok := ck["contextData"]; ok {
				t.Error("the task's checkpoint summary carries contextData")
			}
			if m["hasCheckpoint"] != true || m["currentStage"] != "settle" || m["status"] != "FAILED" || c.ID != tenantID {
				t.Errorf("task = %v", m)
			}
		}},
		{"Checkpoint", request{method: "GET", path: tp + "/checkpoint"}, 200, "Checkpoint", func(t *testing.T, m map[string]any, c call) {
			hasKeys(t, "checkpoint", m, []string{"tenantId", "lastCompletedStageIndex", "completedStages", "contextData", "savedAt", "attempt", "fence"})
			if fmt.Sprint(m["contextData"]) != "map[push-config:map[status:200]]" {
				t.Errorf("contextData = %v", m["contextData"])
			}
		}},
		{"History", request{method: "GET", path: tp + "/history?limit=20"}, 200, "History", func(t *testing.T, m map[string]any, c call) {
			if m["tenantId"] != tenantID || len(m["tasks"].([]any)) != 1 || c.Limit != 20 {
				t.Errorf("history = %v, limit %d", m, c.Limit)
			}
		}},
		{"Timeline", request{method: "GET", path: tp + "/timeline?limit=10"}, 200, "Timeline", func(t *testing.T, m map[string]any, c call) {
			evs := m["events"].([]any)
			if m["tenantId"] != tenantID || m["taskId"] != taskID || len(evs) != 2 || c.Limit != 10 {
				t.Fatalf("timeline = %v, limit %d", m, c.Limit)
			}
			ev := evs[1].(map[string]any)
			if ev["type"] != "task.stage_succeeded" || ev["stage"] != "push-config" || ev["duration"] != "1s" || ev["at"] != "2026-11-21T09:30:02Z" {
				t.Errorf("event = %v", ev)
			}
		}},
		{"Retry", request{method: "POST", path: tp + "/retry", body: `{"fromCheckpoint": true, "reason": "INC-1234", "expectedAttempt": 1}`},
			202, "Retry", func(t *testing.T, m map[string]any, c call) {
				hasKeys(t, "task", m, taskDetailKeys)
				if c.Retry.FromCheckpoint == nil || !*c.Retry.FromCheckpoint || c.Retry.ExpectedAttempt != 1 || c.Reason != "INC-1234" {
					t.Errorf("retry request = %+v", c.Retry)
				}
			}},
		{"PauseTask", request{method: "POST", path: tp + "/pause", body: reason}, 200, "PauseTask", taskActionCheck},
		{"ResumeTask", request{method: "POST", path: tp + "/resume", body: reason}, 200, "ResumeTask", taskActionCheck},
		{"CancelTask", request{method: "POST", path: tp + "/cancel", body: reason}, 200, "CancelTask", taskActionCheck},
		{"Lock", request{method: "GET", path: tp + "/lock"}, 200, "Lock", func(t *testing.T, m map[string]any, c call) {
			hasKeys(t, "lock", m, lockKeys)
			if m["held"] != true || m["ttlMs"] != 41234.0 || m["fence"] != 7.0 || m["owner"] != "coord-a" || m["taskId"] != taskID {
				t.Errorf("lock = %v", m)
			}
		}},
		{"ReleaseLock", request{method: "DELETE", path: tp + "/lock", body: `{"reason": "INC-1234 stuck", "expectedFence": 7}`},
			200, "ReleaseLock", func(t *testing.T, m map[string]any, c call) {
				if m["released"] != true || m["fence"] != 7.0 || m["taskId"] != taskID || c.Fence != 7 || c.Reason != "INC-1234 stuck" {
					t.Errorf("released = %v, call %+v", m, c)
				}
			}},
		{"TaskByID", request{method: "GET", path: "/v1/tasks/" + taskID}, 200, "Task", func(t *testing.T, m map[string]any, c call) {
			hasKeys(t, "task", m, taskDetailKeys)
			if c.ID != taskID {
				t.Errorf("id = %s", c.ID)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := newFake()
			h, _ := newAPI(t, svc, httpapi.Config{})
			a := serve(t, h, tt.req)
			if a.Status != tt.status {
				t.Fatalf("status = %d, want %d: %s", a.Status, tt.status, a.Body)
			}
			if ct := a.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			if a.Header.Get(httpapi.HeaderDegraded) != "" {
				t.Errorf("degraded header on a fresh answer")
			}
			c := svc.Last()
			if c.Method != tt.method || svc.Calls() == 0 {
				t.Fatalf("service got %s, want %s", c.Method, tt.method)
			}
			tt.check(t, a.JSON(t), c)
		})
	}
}

func planActionCheck(t *testing.T, m map[string]any, c call) {
	t.Helper()
	hasKeys(t, "plan", m, planKeys)
	if c.ID != planID || c.Reason != "INC-1234" {
		t.Errorf("call = %+v", c)
	}
	checkActor(t, c.Actor)
}

func taskActionCheck(t *testing.T, m map[string]any, c call) {
	t.Helper()
	hasKeys(t, "task", m, taskDetailKeys)
	if c.ID != tenantID || c.Reason != "INC-1234" {
		t.Errorf("call = %+v", c)
	}
	checkActor(t, c.Actor)
}

func checkActor(t *testing.T, a facade.Actor) {
	t.Helper()
	if a.Name != "anonymous" || a.Role != "operator" || a.RequestID == "" || a.Addr == "" {
		t.Errorf("actor = %+v", a)
	}
}

func TestRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		res    facade.RetryResult
		status int
		want   string
	}{
		{"DryRunOK", facade.RetryResult{DryRun: true, WouldRun: []string{"settle"}}, 200, `{"dryRun":true,"wouldRun":["settle"]}`},
		{"DryRunNothingLeft", facade.RetryResult{DryRun: true}, 200, `{"dryRun":true,"wouldRun":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := newFake()
			svc.RetryRes = tt.res
			h, _ := newAPI(t, svc, httpapi.Config{})
			a := serve(t, h, request{method: "POST", path: "/v1/tenants/t-001/retry", body: `{"dryRun": true, "fromStage": "settle", "reason": "check"}`})
			if a.Status != tt.status || strings.TrimSpace(string(a.Body)) != tt.want {
				t.Fatalf("answer = %d %s, want %d %s", a.Status, a.Body, tt.status, tt.want)
			}
			if c := svc.Last(); !c.Retry.DryRun || c.Retry.FromStage != "settle" {
				t.Errorf("request passed = %+v", c.Retry)
			}
		})
	}
	t.Run("Accepted", func(t *testing.T) {
		t.Parallel()
		svc := newFake()
		tv := sampleTask()
		tv.Status = task.StatusRunning
		svc.RetryRes = facade.RetryResult{Task: &tv, WouldRun: []string{"settle"}}
		h, _ := newAPI(t, svc, httpapi.Config{})
		a := serve(t, h, request{method: "POST", path: "/v1/tenants/t-001/retry", body: `{"skipStage": true, "outputs": {"k": 1}, "reason": "skip it"}`})
		if a.Status != http.StatusAccepted || a.JSON(t)["status"] != "RUNNING" {
			t.Fatalf("answer = %d %s", a.Status, a.Body)
		}
		if c := svc.Last(); !c.Retry.SkipStage || c.Retry.Outputs["k"] != 1.0 {
			t.Errorf("request passed = %+v", c.Retry)
		}
	})
}

func TestHeadCheckpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		has    bool
		err    error
		status int
	}{
		{"OK", true, nil, 200},
		{"ErrNotFound", false, nil, 404},
		{"ErrUnavailable", false, fmt.Errorf("read: %w", facade.ErrUnavailable), 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := newFake()
			if !tt.has {
				svc.Ckpt = nil
			}
			svc.Err = tt.err
			h, _ := newAPI(t, svc, httpapi.Config{})
			a := serve(t, h, request{method: "HEAD", path: "/v1/tenants/t-001/checkpoint"})
			if a.Status != tt.status || len(a.Body) != 0 {
				t.Fatalf("answer = %d %q, want %d and no body", a.Status, a.Body, tt.status)
			}
			if c := svc.Last(); c.Method != "HasCheckpoint" || c.ID != "t-001" {
				t.Errorf("call = %+v", c)
			}
		})
	}
}

func TestTenantsStatus(t *testing.T) {
	t.Parallel()
	t.Run("OK", func(t *testing.T) {
		t.Parallel()
		svc := newFake()
		svc.ByTenant = func(_ context.Context, id string) (facade.TaskView, error) {
			if id == "t-002" {
				return facade.TaskView{}, fmt.Errorf("task of tenant %s: %w", id, facade.ErrNotFound)
			}
			v := sampleTask()
			v.Task.TenantID = id
			return v, nil
		}
		h, _ := newAPI(t, svc, httpapi.Config{})
		a := serve(t, h, request{method: "POST", path: "/v1/tenants:status", body: `{"tenantIds": ["t-001", "t-002", "t-001", "t-003"]}`})
		if a.Status != 200 {
			t.Fatalf("answer = %d %s", a.Status, a.Body)
		}
		tasks := a.JSON(t)["tasks"].(map[string]any)
		if len(tasks) != 3 || tasks["t-002"] != nil {
			t.Fatalf("tasks = %v", tasks)
		}
		// One call for all the (distinct) ids, not one per id.
		if c := svc.Last(); svc.Calls() != 1 || c.Method != "TasksByTenant" || fmt.Sprint(c.IDs) != "[t-001 t-002 t-003]" {
			t.Fatalf("%d calls, last %s(%v)", svc.Calls(), c.Method, c.IDs)
		}
		for _, id := range []string{"t-001", "t-003"} {
			m := tasks[id].(map[string]any)
			hasKeys(t, id, m, taskDetailKeys)
			if m["tenantId"] != id {
				t.Errorf("%s answered with tenant %v", id, m["tenantId"])
			}
		}
	})
	t.Run("MaxTenantsOK", func(t *testing.T) {
		t.Parallel()
		svc := newFake()
		h, _ := newAPI(t, svc, httpapi.Config{})
		a := serve(t, h, request{method: "POST", path: "/v1/tenants:status", body: tenantIDs(httpapi.MaxStatusTenants, 128)})
		if a.Status != 200 || svc.Calls() != 1 || len(svc.Last().IDs) != httpapi.MaxStatusTenants {
			t.Fatalf("answer = %d after %d calls with %d ids: %.200s", a.Status, svc.Calls(), len(svc.Last().IDs), a.Body)
		}
	})
	t.Run("ErrUnavailable", func(t *testing.T) {
		t.Parallel()
		svc := newFake()
		svc.ByTenant = func(_ context.Context, id string) (facade.TaskView, error) {
			if id == "t-00007" {
				return facade.TaskView{}, fmt.Errorf("read: %w", facade.ErrUnavailable)
			}
			return sampleTask(), nil
		}
		h, _ := newAPI(t, svc, httpapi.Config{})
		a := serve(t, h, request{method: "POST", path: "/v1/tenants:status", body: tenantIDs(50, 0)})
		a.problem(t, 503, httpapi.CodeUnavailable)
	})
	t.Run("DegradedOK", func(t *testing.T) {
		t.Parallel()
		svc := newFake()
		svc.TaskV.Degraded = true
		h, _ := newAPI(t, svc, httpapi.Config{})
		a := serve(t, h, request{method: "POST", path: "/v1/tenants:status", body: `{"tenantIds": ["t-001"]}`})
		if a.Status != 200 || a.Header.Get(httpapi.HeaderDegraded) != "true" {
			t.Fatalf("answer = %d, degraded header %q", a.Status, a.Header.Get(httpapi.HeaderDegraded))
		}
	})
	t.Run("DegradedUnknownErrUnavailable", func(t *testing.T) {
		t.Parallel()
		// The store answers from memory only when memory holds every tenant
		// asked (repository's TestDualTasksByTenantQueued); otherwise the
		// service reports unavailable, and the answer is 503.
		svc := newFake()
		svc.ByTenant = func(_ context.Context, id string) (facade.TaskView, error) {
			if id == "t-002" {
				return facade.TaskView{}, fmt.Errorf("%w: redis is unreachable and memory does not hold the task of t-002", facade.ErrUnavailable)
			}
			v := sampleTask()
			v.Degraded = true
			return v, nil
		}
		h, _ := newAPI(t, svc, httpapi.Config{})
		a := serve(t, h, request{method: "POST", path: "/v1/tenants:status", body: `{"tenantIds": ["t-001", "t-002"]}`})
		if p := a.problem(t, 503, httpapi.CodeUnavailable); !strings.Contains(p.Detail, "t-002") {
			t.Errorf("detail %q does not name the tenant memory lacks", p.Detail)
		}
	})
}

// tenantIDs returns a tenants:status body with n ids, each at least width
// bytes long.
func tenantIDs(n, width int) string {
	ids := make([]string, n)
	for i := range ids {
		id := fmt.Sprintf("t-%05d", i)
		ids[i] = id + strings.Repeat("x", max(0, width-len(id)))
	}
	b, _ := json.Marshal(httpapi.TenantsStatusRequest{TenantIDs: ids})
	return string(b)
}

func TestDegraded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		set  func(*fakeService)
		req  request
	}{
		{"Plan", func(f *fakeService) { f.PlanV.Degraded = true }, request{method: "GET", path: "/v1/plans/" + planID}},
		{"Task", func(f *fakeService) { f.TaskV.Degraded = true }, request{method: "GET", path: "/v1/tenants/t-001/task"}},
		{"PlanTasks", func(f *fakeService) { f.TasksV[0].Degraded = true }, request{method: "GET", path: "/v1/plans/" + planID + "/tasks"}},
		{"History", func(f *fakeService) { f.TasksV[0].Degraded = true }, request{method: "GET", path: "/v1/tenants/t-001/history"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := newFake()
			tt.set(svc)
			h, _ := newAPI(t, svc, httpapi.Config{})
			a := serve(t, h, tt.req)
			if a.Status != 200 || a.Header.Get(httpapi.HeaderDegraded) != "true" {
				t.Fatalf("answer = %d, header %q", a.Status, a.Header.Get(httpapi.HeaderDegraded))
			}
			if !strings.Contains(string(a.Body), `"degraded":true`) {
				t.Errorf("body does not say degraded: %s", a.Body)
			}
		})
	}
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		sent string
		keep bool
	}{
		{"KeptOK", "req-01J.abc_9", true},
		{"MissingGenerated", "", false},
		{"TooLongReplaced", strings.Repeat("a", 65), false},
		{"HostileReplaced", "x\"}{\\u0000 <script>", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := newFake()
			h, logs := newAPI(t, svc, httpapi.Config{})
			hdr := map[string]string{}
			if tt.sent != "" {
				hdr[httpapi.HeaderRequestID] = tt.sent
			}
			a := serve(t, h, request{method: "POST", path: "/v1/tenants/t-001/pause", body: `{"reason": "r"}`, header: hdr})
			got := a.Header.Get(httpapi.HeaderRequestID)
			switch {
			case tt.keep && got != tt.sent:
				t.Fatalf("request id = %q, want %q", got, tt.sent)
			case !tt.keep && (got == tt.sent || len(got) < 16 || len(got) > 64):
				t.Fatalf("request id = %q, want a generated one", got)
			}
			if svc.Last().Actor.RequestID != got {
				t.Errorf("actor request id = %q, header %q", svc.Last().Actor.RequestID, got)
			}
			if !strings.Contains(logs.String(), `"request_id":"`+got+`"`) || !strings.Contains(logs.String(), `"route":"/v1/tenants/{tenantId}/pause"`) {
				t.Errorf("access log lacks the request id or route: %s", logs)
			}
		})
	}
}

func TestConfigSeams(t *testing.T) {
	t.Parallel()
	t.Run("MiddlewaresWrapV1Only", func(t *testing.T) {
		t.Parallel()
		deny := func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != "Bearer good" {
					httpapi.WriteProblem(w, r, http.StatusUnauthorized, httpapi.CodeUnauthenticated, "missing token")
					return
				}
				next.ServeHTTP(w, r)
			})
		}
		svc := newFake()
		h, _ := newAPI(t, svc, httpapi.Config{Middlewares: []func(http.Handler) http.Handler{deny}})
		serve(t, h, request{method: "GET", path: "/v1/tenants/t-001/task"}).problem(t, 401, httpapi.CodeUnauthenticated)
		// Auth runs before input checks: a bad id unauthenticated is 401.
		serve(t, h, request{method: "GET", path: "/v1/tenants/a:b/task"}).problem(t, 401, httpapi.CodeUnauthenticated)
		if svc.Calls() != 0 {
			t.Fatalf("service called %d times behind a refusing middleware", svc.Calls())
		}
		if a := serve(t, h, request{method: "GET", path: "/v1/tenants/t-001/task", header: map[string]string{"Authorization": "Bearer good"}}); a.Status != 200 {
			t.Fatalf("with token: %d %s", a.Status, a.Body)
		}
		for _, p := range []string{"/healthz", "/readyz", "/openapi.yaml"} {
			if a := serve(t, h, request{method: "GET", path: p}); a.Status != 200 {
				t.Errorf("%s behind the /v1 middlewares: %d", p, a.Status)
			}
		}
	})
	t.Run("ActorFuncOK", func(t *testing.T) {
		t.Parallel()
		svc := newFake()
		h, _ := newAPI(t, svc, httpapi.Config{ActorFunc: func(r *http.Request) facade.Actor {
			return facade.Actor{Name: "alice", Role: "viewer"}
		}})
		serve(t, h, request{method: "POST", path: "/v1/tenants/t-001/cancel", body: `{"reason": "r"}`})
		if a := svc.Last().Actor; a.Name != "alice" || a.Role != "viewer" || a.RequestID == "" {
			t.Errorf("actor = %+v", a)
		}
	})
}

func TestHealth(t *testing.T) {
	t.Parallel()
	t.Run("HealthzOK", func(t *testing.T) {
		t.Parallel()
		h, _ := newAPI(t, newFake(), httpapi.Config{Version: "1.2.3", Ready: func(context.Context) error { return errBoom }})
		a := serve(t, h, request{method: "GET", path: "/healthz"})
		if m := a.JSON(t); a.Status != 200 || m["status"] != "ok" || m["version"] != "1.2.3" {
			t.Fatalf("answer = %d %s", a.Status, a.Body)
		}
	})
	t.Run("ReadyzOK", func(t *testing.T) {
		t.Parallel()
		h, _ := newAPI(t, newFake(), httpapi.Config{Ready: func(context.Context) error { return nil }})
		a := serve(t, h, request{method: "GET", path: "/readyz"})
		if m := a.JSON(t); a.Status != 200 || m["status"] != "ready" || fmt.Sprint(m["checks"]) != "map[degraded:false pendingWrites:0 redis:ok selfCheck:<nil>]" {
			t.Fatalf("answer = %d %s", a.Status, a.Body)
		}
	})
	detail := func(context.Context) httpapi.ReadyChecks {
		return httpapi.ReadyChecks{Degraded: true, PendingWrites: 3, SelfCheck: &httpapi.SelfCheck{
			Warnings: []string{"maxmemory-policy is allkeys-lru"}, RedisVersion: "7.2.4", RunID: "abc", Restarted: true, CheckedAt: &t0}}
	}
	t.Run("ReadyzDetailOK", func(t *testing.T) {
		t.Parallel()
		h, _ := newAPI(t, newFake(), httpapi.Config{Ready: func(context.Context) error { return nil }, ReadyDetail: detail})
		a := serve(t, h, request{method: "GET", path: "/readyz"})
		var r httpapi.Readiness
		if err := json.Unmarshal(a.Body, &r); err != nil || a.Status != 200 {
			t.Fatalf("answer = %d %s", a.Status, a.Body)
		}
		c := r.Checks
		if c.Redis != "ok" || !c.Degraded || c.PendingWrites != 3 || c.SelfCheck == nil || len(c.SelfCheck.Warnings) != 1 || !c.SelfCheck.Restarted {
			t.Fatalf("checks = %+v", c)
		}
	})
	t.Run("ReadyzUnavailable", func(t *testing.T) {
		t.Parallel()
		h, _ := newAPI(t, newFake(), httpapi.Config{Ready: func(context.Context) error { return errBoom }, ReadyDetail: detail})
		a := serve(t, h, request{method: "GET", path: "/readyz"})
		var p struct {
			httpapi.Problem
			Checks httpapi.ReadyChecks `json:"checks"`
		}
		if err := json.Unmarshal(a.Body, &p); err != nil || a.Status != 503 || a.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("answer = %d %q %s", a.Status, a.Header.Get("Content-Type"), a.Body)
		}
		if p.Code != httpapi.CodeUnavailable || !strings.Contains(p.Detail, "connection pool exhausted") ||
			!strings.Contains(p.Checks.Redis, "connection pool exhausted") || p.Checks.PendingWrites != 3 || p.Checks.SelfCheck == nil {
			t.Errorf("problem = %+v", p)
		}
	})
	t.Run("ReadyzHungRedisReportsPing", func(t *testing.T) {
		t.Parallel()
		// Redis hangs: the self-check (INFO) waits out its context; the
		// PING fails on its own read timeout while the context lasts.
		ready := func(ctx context.Context) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			return fmt.Errorf("ping: %w", errBoom)
		}
		hung := func(ctx context.Context) httpapi.ReadyChecks {
			<-ctx.Done()
			return httpapi.ReadyChecks{PendingWrites: 3}
		}
		h, _ := newAPI(t, newFake(), httpapi.Config{Ready: ready, ReadyDetail: hung})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil).WithContext(ctx))
		a := answer{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
		conform(t, httptest.NewRequest("GET", "/readyz", nil), a.Status, a.Header, a.Body)
		var p struct {
			httpapi.Problem
			Checks httpapi.ReadyChecks `json:"checks"`
		}
		if err := json.Unmarshal(a.Body, &p); err != nil || a.Status != 503 || a.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("answer = %d %q %s", a.Status, a.Header.Get("Content-Type"), a.Body)
		}
		if p.Code != httpapi.CodeUnavailable || p.Detail != "not ready: ping: "+errBoom.Error() ||
			p.Checks.Redis != "ping: "+errBoom.Error() || p.Checks.PendingWrites != 3 || p.RequestID != a.Header.Get(httpapi.HeaderRequestID) {
			t.Errorf("problem = %+v", p)
		}
	})
}

func TestUnknownRoutes(t *testing.T) {
	t.Parallel()
	h, _ := newAPI(t, newFake(), httpapi.Config{})
	t.Run("ErrNotFound", func(t *testing.T) {
		t.Parallel()
		serve(t, h, request{method: "GET", path: "/v1/nothing"}).problem(t, 404, httpapi.CodeNotFound)
	})
	t.Run("ErrMethodNotAllowed", func(t *testing.T) {
		t.Parallel()
		a := serve(t, h, request{method: "PUT", path: "/v1/tenants/t-001/lock"})
		a.problem(t, 405, httpapi.CodeMethodNotAllowed)
		if got := a.Header.Get("Allow"); got != "GET, DELETE" {
			t.Errorf("Allow = %q", got)
		}
	})
}
