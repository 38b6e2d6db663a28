package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
)

// unavailableErr is how repository and redislock errors say Redis is down.
type unavailableErr struct{}

func (unavailableErr) Error() string     { return "dial tcp 10.0.0.7:6379: connection refused" }
func (unavailableErr) Unavailable() bool { return true }

func TestErrorTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"ErrInvalid", facade.ErrInvalid, 400, httpapi.CodeInvalidArgument},
		{"ErrNotFound", facade.ErrNotFound, 404, httpapi.CodeNotFound},
		{"ErrTaskRunning", facade.ErrTaskRunning, 409, httpapi.CodeTaskRunning},
		{"ErrTaskCompleted", facade.ErrTaskCompleted, 409, httpapi.CodeTaskCompleted},
		{"ErrTaskPending", facade.ErrTaskPending, 409, httpapi.CodeTaskPending},
		{"ErrAttemptMismatch", facade.ErrAttemptMismatch, 409, httpapi.CodeAttemptMismatch},
		{"ErrPlanFinished", facade.ErrPlanFinished, 409, httpapi.CodePlanFinished},
		{"ErrInvalidState", facade.ErrInvalidState, 409, httpapi.CodeInvalidState},
		{"ErrLockMismatch", facade.ErrLockMismatch, 409, httpapi.CodeLockMismatch},
		{"ErrTenantLocked", facade.ErrTenantLocked, 409, httpapi.CodeTenantLocked},
		{"ErrUnavailable", facade.ErrUnavailable, 503, httpapi.CodeUnavailable},
		{"ErrShuttingDown", facade.ErrShuttingDown, 503, httpapi.CodeUnavailable},
		{"UnavailableBackend", unavailableErr{}, 503, httpapi.CodeUnavailable},
		{"DeadlineExceeded", context.DeadlineExceeded, 503, httpapi.CodeUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := newFake()
			svc.Err = fmt.Errorf("retry tenant t-001: %w", tt.err)
			h, _ := newAPI(t, svc, httpapi.Config{})
			a := serve(t, h, request{method: "POST", path: "/v1/tenants/t-001/retry", body: `{"reason": "r"}`})
			p := a.problem(t, tt.status, tt.code)
			if p.Detail == "" {
				t.Error("empty detail")
			}
		})
	}
}

func TestErrorDetailIsTheFacadeMessage(t *testing.T) {
	t.Parallel()
	svc := newFake()
	svc.Err = fmt.Errorf("task task-01J of tenant t-042 is running on instance coord-b: %w", facade.ErrTaskRunning)
	h, _ := newAPI(t, svc, httpapi.Config{})
	p := serve(t, h, request{method: "GET", path: "/v1/tenants/t-042/task"}).problem(t, 409, httpapi.CodeTaskRunning)
	if !strings.HasPrefix(p.Detail, "task task-01J of tenant t-042 is running on instance coord-b") {
		t.Errorf("detail = %q", p.Detail)
	}
}

func TestUnknownErrorInternal(t *testing.T) {
	t.Parallel()
	svc := newFake()
	svc.Err = errBoom
	h, logs := newAPI(t, svc, httpapi.Config{})
	a := serve(t, h, request{method: "GET", path: "/v1/plans/" + planID})
	p := a.problem(t, 500, httpapi.CodeInternal)
	if strings.Contains(p.Detail, "10.0.0.7") {
		t.Errorf("internal detail leaks the error: %q", p.Detail)
	}
	out := logs.String()
	if n := strings.Count(out, "10.0.0.7"); n != 1 {
		t.Errorf("the real error is logged %d times, want once: %s", n, out)
	}
	if !strings.Contains(out, `"request_id":"`+p.RequestID+`"`) {
		t.Errorf("log lacks the request id: %s", out)
	}
}

// malformedErr is how repository errors say a stored record does not decode.
type malformedErr struct{}

func (malformedErr) Error() string   { return "repository: malformed record" }
func (malformedErr) Malformed() bool { return true }

// TestMalformedRecordInternal: a stored record that does not decode is 500
// INTERNAL, logged once with the request id like any unexpected error, but
// its detail names the key and the field to fix (not the generic detail):
// the operator who asked learns what to fix without the server's log.
func TestMalformedRecordInternal(t *testing.T) {
	t.Parallel()
	const what = `read tenant t-001: repository: malformed record: dc:task:{t-001}:task-01J field params = "{not json": invalid character`
	svc := newFake()
	svc.Err = fmt.Errorf("read tenant t-001: %w", fmt.Errorf("%w: dc:task:{t-001}:task-01J field params = \"{not json\": invalid character", malformedErr{}))
	h, logs := newAPI(t, svc, httpapi.Config{})
	p := serve(t, h, request{method: "GET", path: "/v1/tenants/t-001/task"}).problem(t, 500, httpapi.CodeInternal)
	if !strings.HasPrefix(p.Detail, what) || !strings.Contains(p.Detail, "A malformed record") {
		t.Errorf("detail = %q; want it to start %q and point at the runbook", p.Detail, what)
	}
	out := logs.String()
	if n := strings.Count(out, "field params"); n != 1 || !strings.Contains(out, `"request_id":"`+p.RequestID+`"`) {
		t.Errorf("the error is logged %d times (want once, with the request id): %s", n, out)
	}
	if facade.IsMalformed(errBoom) || !facade.IsMalformed(svc.Err) {
		t.Error("facade.IsMalformed does not tell the malformed record from another error")
	}
}

func TestPanicInternal(t *testing.T) {
	t.Parallel()
	svc := newFake()
	svc.ByTenant = func(context.Context, string) (facade.TaskView, error) { panic("boom") }
	h, logs := newAPI(t, svc, httpapi.Config{})
	serve(t, h, request{method: "GET", path: "/v1/tenants/t-001/task"}).problem(t, 500, httpapi.CodeInternal)
	if !strings.Contains(logs.String(), "handler panicked") {
		t.Errorf("panic not logged: %s", logs)
	}
}

func TestClientGoneNoBody(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	svc := newFake()
	svc.ByTenant = func(ctx context.Context, _ string) (facade.TaskView, error) {
		cancel()
		return facade.TaskView{}, fmt.Errorf("read: %w", ctx.Err())
	}
	h, logs := newAPI(t, svc, httpapi.Config{})
	req := httptest.NewRequest("GET", "/v1/tenants/t-001/task", nil).WithContext(ctx)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Body.Len() != 0 || rec.Code == http.StatusOK || rec.Code == http.StatusInternalServerError {
		t.Fatalf("answer = %d %q, want no body", rec.Code, rec.Body)
	}
	if !strings.Contains(logs.String(), `"level":"debug"`) || strings.Contains(logs.String(), `"level":"error"`) {
		t.Errorf("want a debug line and no error: %s", logs)
	}
}
