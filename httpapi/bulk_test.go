package httpapi_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// TestRetryPlanAnswer: the body reaches the coordinator as sent, and each
// skipped task is answered with the code and detail its single retry would
// have had.
func TestRetryPlanAnswer(t *testing.T) {
	t.Parallel()
	svc := newFake()
	svc.PlanRetryRes = facade.PlanRetryResult{Selected: 4, Retried: []string{"t-001", "t-002"}, Skipped: []facade.RetrySkip{
		{TenantID: "t-003", TaskID: taskID, Err: fmt.Errorf("retry: %w: task of t-003 is running on coord-b", facade.ErrTaskRunning)},
		{TenantID: "t-004", TaskID: taskID, Err: fmt.Errorf("retry: %w: task of t-004 is at attempt 3, not 2", facade.ErrAttemptMismatch)},
	}}
	h, _ := newAPI(t, svc, httpapi.Config{})
	body := `{"statuses": ["FAILED", "CANCELLED"], "orphaned": true, "tenants": ["t-001", "t-002", "t-003", "t-004"],
		"fromCheckpoint": false, "reason": "INC-11 target fixed"}`
	a := serve(t, h, request{method: "POST", path: "/v1/plans/" + planID + "/retry", body: body})
	if a.Status != 202 {
		t.Fatalf("bulk retry = %d %s", a.Status, a.Body)
	}
	c := svc.Last()
	if c.Method != "RetryPlan" || c.ID != planID || c.Actor.Name != "anonymous" ||
		!slices.Equal(c.PlanRetry.Statuses, []task.Status{task.StatusFailed, task.StatusCancelled}) || !c.PlanRetry.Orphaned ||
		len(c.PlanRetry.Tenants) != 4 || c.PlanRetry.FromCheckpoint == nil || *c.PlanRetry.FromCheckpoint || c.PlanRetry.DryRun ||
		c.PlanRetry.Reason != "INC-11 target fixed" {
		t.Fatalf("call = %+v", c)
	}
	var got httpapi.PlanRetry
	if err := json.Unmarshal(a.Body, &got); err != nil {
		t.Fatal(err)
	}
	if got.PlanID != planID || got.DryRun || got.Selected != 4 || !slices.Equal(got.Retried, []string{"t-001", "t-002"}) || len(got.Skipped) != 2 {
		t.Fatalf("answer = %+v", got)
	}
	if s := got.Skipped[0]; s.TenantID != "t-003" || s.TaskID != taskID || s.Code != httpapi.CodeTaskRunning || !strings.Contains(s.Detail, "running on coord-b") {
		t.Errorf("skipped[0] = %+v", s)
	}
	if s := got.Skipped[1]; s.Code != httpapi.CodeAttemptMismatch || !strings.Contains(s.Detail, "attempt 3") {
		t.Errorf("skipped[1] = %+v", s)
	}

	// A dry run is answered 200.
	svc.PlanRetryRes = facade.PlanRetryResult{Selected: 0}
	a = serve(t, h, request{method: "POST", path: "/v1/plans/" + planID + "/retry", body: `{"statuses": ["FAILED"], "reason": "r", "dryRun": true}`})
	if a.Status != 200 || !strings.Contains(string(a.Body), `"retried":[]`) || !strings.Contains(string(a.Body), `"skipped":[]`) ||
		!strings.Contains(string(a.Body), `"dryRun":true`) {
		t.Fatalf("dry run = %d %s", a.Status, a.Body)
	}

	// The coordinator's refusals keep their codes.
	for _, tt := range []struct {
		err    error
		status int
		code   string
	}{
		{facade.ErrInvalid, 400, httpapi.CodeInvalidArgument},
		{facade.ErrNotFound, 404, httpapi.CodeNotFound},
		{facade.ErrShuttingDown, 503, httpapi.CodeUnavailable},
	} {
		svc.Err = fmt.Errorf("bulk retry: %w", tt.err)
		serve(t, h, request{method: "POST", path: "/v1/plans/" + planID + "/retry", body: `{"statuses": ["FAILED"], "reason": "r"}`}).
			problem(t, tt.status, tt.code)
	}
}

// TestRetryPlanStack: over a real coordinator, a dry run changes nothing,
// the bulk retry re-runs the failed tenants (the FAILED plan goes back to
// RUNNING and completes), the Idempotency-Key makes a repeat answer the
// first answer without retrying anything, and each task's timeline names
// who retried it and why.
func TestRetryPlanStack(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			testRetryPlanStack(t, newStack(t, b))
		})
	}
}

func testRetryPlanStack(t *testing.T, s *stack) {
	// The tenants of group "bad" push to /tenants/bad/push, which fails
	// while s.failing is "bad".
	s.failing.Store("bad")
	spec := fmt.Sprintf(`{"name": "bulk", "stages": [{"name": "push", "kind": "http", "retry": {"maxAttempts": 1},
		"http": {"method": "POST", "url": "%s/tenants/{{.Params.group}}/push", "successStatus": [200]}}],
		"tenants": [{"tenantId": "t-b1", "params": {"group": "bad"}}, {"tenantId": "t-b2", "params": {"group": "bad"}},
			{"tenantId": "t-b3", "params": {"group": "bad"}}, {"tenantId": "t-ok", "params": {"group": "good"}}]}`, s.target.URL)
	planID := s.do(t, "POST", "/v1/plans", spec, 201)["planId"].(string)
	pp := "/v1/plans/" + planID
	s.await(t, pp, "status", "FAILED")

	dry := serve(t, s.h, request{method: "POST", path: pp + "/retry", body: `{"statuses": ["FAILED"], "reason": "INC-11 check", "dryRun": true}`})
	var d httpapi.PlanRetry
	if err := json.Unmarshal(dry.Body, &d); dry.Status != 200 || err != nil {
		t.Fatalf("dry run = %d %s", dry.Status, dry.Body)
	}
	slices.Sort(d.Retried)
	if !d.DryRun || d.Selected != 3 || !slices.Equal(d.Retried, []string{"t-b1", "t-b2", "t-b3"}) || len(d.Skipped) != 0 {
		t.Fatalf("dry run = %+v", d)
	}
	if p := s.do(t, "GET", pp, "", 200); p["status"] != "FAILED" || p["counts"].(map[string]any)["FAILED"] != 3.0 {
		t.Fatalf("the dry run changed the plan: %v", p)
	}

	s.failing.Store("")
	key := map[string]string{httpapi.HeaderIdempotencyKey: "bulk-" + planID}
	body := `{"statuses": ["FAILED"], "reason": "INC-11 config server back"}`
	first := serve(t, s.h, request{method: "POST", path: pp + "/retry", body: body, header: key})
	var r httpapi.PlanRetry
	if err := json.Unmarshal(first.Body, &r); first.Status != 202 || err != nil {
		t.Fatalf("bulk retry = %d %s", first.Status, first.Body)
	}
	slices.Sort(r.Retried)
	if r.DryRun || r.Selected != 3 || !slices.Equal(r.Retried, []string{"t-b1", "t-b2", "t-b3"}) || len(r.Skipped) != 0 {
		t.Fatalf("bulk retry = %+v", r)
	}
	p := s.await(t, pp, "status", "COMPLETED")
	if c := p["counts"].(map[string]any); c["COMPLETED"] != 4.0 || c["FAILED"] != 0.0 || c["RUNNING"] != 0.0 {
		t.Fatalf("counts after the bulk retry: %v", c)
	}
	again := serve(t, s.h, request{method: "POST", path: pp + "/retry", body: body, header: key})
	if again.Status != 202 || string(again.Body) != string(first.Body) || again.Header.Get(httpapi.HeaderIdempotentReplayed) != "true" {
		t.Fatalf("repeat = %d %s (replayed %q), want the first answer", again.Status, again.Body, again.Header.Get(httpapi.HeaderIdempotentReplayed))
	}
	serve(t, s.h, request{method: "POST", path: pp + "/retry", body: `{"statuses": ["FAILED"], "reason": "other"}`, header: key}).
		problem(t, 409, httpapi.CodeIdempotencyKeyReused)
	for _, tn := range []string{"t-b1", "t-b2", "t-b3"} {
		tk := s.do(t, "GET", "/v1/tenants/"+tn+"/task", "", 200)
		if tk["attempt"] != 2.0 || tk["status"] != "COMPLETED" {
			t.Fatalf("%s after a bulk retry and its repeat: %v", tn, tk)
		}
		tl := s.do(t, "GET", "/v1/tenants/"+tn+"/timeline", "", 200)
		found := false
		for _, e := range tl["events"].([]any) {
			ev := e.(map[string]any)
			found = found || (ev["type"] == string(task.EventRetryRequested) && ev["actor"] == "anonymous" && ev["reason"] == "INC-11 config server back")
		}
		if !found {
			t.Errorf("%s: no retry entry with the actor and reason in the timeline: %v", tn, tl)
		}
	}
	// Without the key it is a new request: nothing is left to retry.
	if a := s.do(t, "POST", pp+"/retry", body, 202); a["selected"] != 0.0 || len(a["retried"].([]any)) != 0 {
		t.Fatalf("second bulk retry = %v", a)
	}
}
