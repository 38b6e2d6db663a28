package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/rs/zerolog"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// The coordinator is what the API serves.
var _ httpapi.Service = (*facade.Coordinator)(nil)

const specPath = "../docs/openapi.yaml"

var (
	specOnce   sync.Once
	specDoc    *openapi3.T
	specRouter routers.Router
	specErr    error
)

// openAPISpec loads and validates docs/openapi.yaml once per test binary.
func openAPISpec(t *testing.T) (*openapi3.T, routers.Router) {
	t.Helper()
	specOnce.Do(func() {
		// An event stream is checked as text (kin-openapi has no decoder
		// for it): its media type must be documented.
		openapi3filter.RegisterBodyDecoder(httpapi.MediaEventStream,
			func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
				b, err := io.ReadAll(body)
				return string(b), err
			})
		loader := openapi3.NewLoader()
		specDoc, specErr = loader.LoadFromFile(specPath)
		if specErr != nil {
			return
		}
		if specErr = specDoc.Validate(loader.Context); specErr != nil {
			return
		}
		specRouter, specErr = gorillamux.NewRouter(specDoc)
	})
	if specErr != nil {
		t.Fatalf("docs/openapi.yaml: %v", specErr)
	}
	return specDoc, specRouter
}

// conform fails t unless the answer to req validates against the OpenAPI
// document (status documented, body matching its schema). Requests whose
// path and method the document does not route (unknown routes, hostile ids
// with slashes) must be answered with an error.
func conform(t *testing.T, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	openAPISpec(t)
	conformT(t, req, status, header, body)
}

// reporter is the part of testing.T that conformT uses.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// fakeT records whether a check failed, to test the check itself.
type fakeT struct{ failed bool }

func (f *fakeT) Helper()               {}
func (f *fakeT) Errorf(string, ...any) { f.failed = true }

func conformT(t reporter, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	route, params, err := specRouter.FindRoute(req)
	if err != nil {
		if status < 400 {
			t.Errorf("%s %s answered %d but the OpenAPI document has no such operation: %v", req.Method, req.URL, status, err)
		}
		return
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: status, Header: header,
		Body:    io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	})
	if err != nil {
		t.Errorf("%s %s → %d does not match docs/openapi.yaml: %v\nbody: %.2000s", req.Method, req.URL, status, err, body)
	}
}

// answer is a recorded answer.
type answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// decode unmarshals the body into a generic map (fields as the client sees them).
func (a answer) JSON(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.Body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %q", err, a.Body)
	}
	return m
}

// problem checks that the answer is a problem with status and code, and
// returns it.
func (a answer) problem(t *testing.T, status int, code string) httpapi.Problem {
	t.Helper()
	if a.Status != status {
		t.Fatalf("status = %d, want %d; body %s", a.Status, status, a.Body)
	}
	if ct := a.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json", ct)
	}
	var p httpapi.Problem
	dec := json.NewDecoder(bytes.NewReader(a.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem body %q: %v", a.Body, err)
	}
	if p.Code != code || p.Status != status || p.Type != "about:blank" || p.Title != http.StatusText(status) {
		t.Fatalf("problem = %+v, want status %d code %s", p, status, code)
	}
	if p.RequestID == "" || p.RequestID != a.Header.Get(httpapi.HeaderRequestID) {
		t.Fatalf("problem requestId %q, header %q", p.RequestID, a.Header.Get(httpapi.HeaderRequestID))
	}
	return p
}

// request describes a call to the API.
type request struct {
	method, path string
	body         string // sent as application/json unless contentType is set
	contentType  string
	header       map[string]string
	// remote is the connection's address ("192.0.2.1:1234" when empty).
	remote string
}

// serve runs req through h and checks the answer against the OpenAPI
// document.
func serve(t *testing.T, h http.Handler, rq request) answer {
	t.Helper()
	var body io.Reader
	if rq.body != "" {
		body = strings.NewReader(rq.body)
	}
	req := httptest.NewRequest(rq.method, rq.path, body)
	if rq.body != "" {
		ct := rq.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	for k, v := range rq.header {
		req.Header.Set(k, v)
	}
	if rq.remote != "" {
		req.RemoteAddr = rq.remote
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	a := answer{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
	check := httptest.NewRequest(rq.method, rq.path, nil)
	conform(t, check, a.Status, a.Header, a.Body)
	return a
}

// fakeService answers with canned values or Err, and records the calls.
type fakeService struct {
	Err error

	PlanV  facade.PlanView
	PlansV []facade.PlanView
	TaskV  facade.TaskView
	TasksV []facade.TaskView
	Ckpt   *checkpoint.Checkpoint
	// TimelineEvs answers Timeline.
	TimelineEvs []task.Event
	LockInfo    tenantlock.Info
	// Feed answers Events (nil: no events, cursor "0-0").
	Feed func(ctx context.Context, f task.FeedFilter, wait time.Duration) ([]task.FeedEvent, string, error)
	// InstancesV answers Instances.
	InstancesV []facade.InstanceView
	RetryRes   facade.RetryResult
	Next       string
	refusals   []facade.Refusal
	// ByTenant, when set, answers TaskByTenant and TasksByTenant (a tenant
	// whose lookup is not found is absent).
	ByTenant func(ctx context.Context, tenantID string) (facade.TaskView, error)
	// Hook, when set, runs at every call, after it is recorded.
	Hook func(method string)
	// PlanRetryRes answers RetryPlan (its PlanID defaults to the plan asked).
	PlanRetryRes facade.PlanRetryResult

	calls atomic.Int64
	mu    sync.Mutex
	last  call
	// feedCalls holds every Events call, in order.
	feedCalls []call
}

// call holds the arguments of the last call.
type call struct {
	Method     string
	ID         string // plan, tenant or task id
	Reason     string
	Actor      facade.Actor
	Spec       plan.Spec
	ListFilter plan.ListFilter
	TaskFilter plan.TaskFilter
	TaskQuery  facade.TaskQuery
	Resume     facade.ResumeOptions
	Retry      facade.RetryRequest
	PlanRetry  facade.PlanRetryRequest
	Fence      int64
	Limit      int
	IDs        []string
	Feed       task.FeedFilter
	Wait       time.Duration
}

func (f *fakeService) record(c call) {
	f.calls.Add(1)
	f.mu.Lock()
	f.last = c
	if c.Method == "Events" {
		f.feedCalls = append(f.feedCalls, c)
	}
	hook := f.Hook
	f.mu.Unlock()
	if hook != nil {
		hook(c.Method)
	}
}

func (f *fakeService) Last() call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func (f *fakeService) Calls() int64 { return f.calls.Load() }

// FeedCalls returns the Events calls made so far.
func (f *fakeService) FeedCalls() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.feedCalls)
}

func (f *fakeService) CreatePlan(_ context.Context, spec plan.Spec, a facade.Actor) (facade.PlanView, error) {
	f.record(call{Method: "CreatePlan", Spec: spec, Actor: a})
	return f.PlanV, f.Err
}

func (f *fakeService) StartPlan(_ context.Context, id, reason string, a facade.Actor) (facade.PlanView, error) {
	f.record(call{Method: "StartPlan", ID: id, Reason: reason, Actor: a})
	return f.PlanV, f.Err
}

func (f *fakeService) PausePlan(_ context.Context, id, reason string, a facade.Actor) (facade.PlanView, error) {
	f.record(call{Method: "PausePlan", ID: id, Reason: reason, Actor: a})
	return f.PlanV, f.Err
}

func (f *fakeService) ResumePlan(_ context.Context, id string, o facade.ResumeOptions, a facade.Actor) (facade.PlanView, error) {
	f.record(call{Method: "ResumePlan", ID: id, Resume: o, Reason: o.Reason, Actor: a})
	return f.PlanV, f.Err
}

func (f *fakeService) RepairCounts(_ context.Context, id, reason string, a facade.Actor) (facade.PlanView, error) {
	f.record(call{Method: "RepairCounts", ID: id, Reason: reason, Actor: a})
	return f.PlanV, f.Err
}

func (f *fakeService) CancelPlan(_ context.Context, id, reason string, a facade.Actor) (facade.PlanView, error) {
	f.record(call{Method: "CancelPlan", ID: id, Reason: reason, Actor: a})
	return f.PlanV, f.Err
}

func (f *fakeService) Plan(_ context.Context, id string) (facade.PlanView, error) {
	f.record(call{Method: "Plan", ID: id})
	return f.PlanV, f.Err
}

func (f *fakeService) Plans(_ context.Context, lf plan.ListFilter) ([]facade.PlanView, string, error) {
	f.record(call{Method: "Plans", ListFilter: lf})
	return f.PlansV, f.Next, f.Err
}

func (f *fakeService) PlanTasks(_ context.Context, id string, tf plan.TaskFilter) ([]facade.TaskView, string, error) {
	f.record(call{Method: "PlanTasks", ID: id, TaskFilter: tf})
	return f.TasksV, f.Next, f.Err
}

func (f *fakeService) SearchTasks(_ context.Context, q facade.TaskQuery) (facade.TaskPage, error) {
	f.record(call{Method: "SearchTasks", TaskQuery: q})
	return facade.TaskPage{Tasks: f.TasksV, NextCursor: f.Next}, f.Err
}

func (f *fakeService) TaskByTenant(ctx context.Context, id string) (facade.TaskView, error) {
	f.record(call{Method: "TaskByTenant", ID: id})
	if f.ByTenant != nil {
		return f.ByTenant(ctx, id)
	}
	return f.TaskV, f.Err
}

func (f *fakeService) TasksByTenant(ctx context.Context, ids []string) (map[string]facade.TaskView, error) {
	f.record(call{Method: "TasksByTenant", IDs: ids})
	if f.Err != nil {
		return nil, f.Err
	}
	out := map[string]facade.TaskView{}
	for _, id := range ids {
		v := f.TaskV
		if f.ByTenant != nil {
			var err error
			v, err = f.ByTenant(ctx, id)
			if errors.Is(err, facade.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
		}
		out[id] = v
	}
	return out, nil
}

func (f *fakeService) Events(ctx context.Context, ff task.FeedFilter, wait time.Duration) ([]task.FeedEvent, string, error) {
	f.record(call{Method: "Events", Feed: ff, Wait: wait})
	if f.Err != nil {
		return nil, "", f.Err
	}
	if f.Feed != nil {
		return f.Feed(ctx, ff, wait)
	}
	return []task.FeedEvent{}, "0-0", nil
}

func (f *fakeService) Instances(context.Context) ([]facade.InstanceView, error) {
	f.record(call{Method: "Instances"})
	return f.InstancesV, f.Err
}

func (f *fakeService) Task(_ context.Context, id string) (facade.TaskView, error) {
	f.record(call{Method: "Task", ID: id})
	return f.TaskV, f.Err
}

func (f *fakeService) Checkpoint(_ context.Context, id string) (checkpoint.Checkpoint, error) {
	f.record(call{Method: "Checkpoint", ID: id})
	if f.Err != nil {
		return checkpoint.Checkpoint{}, f.Err
	}
	if f.Ckpt == nil {
		return checkpoint.Checkpoint{}, fmt.Errorf("tenant %s: %w", id, facade.ErrNotFound)
	}
	return *f.Ckpt, nil
}

func (f *fakeService) HasCheckpoint(_ context.Context, id string) (bool, error) {
	f.record(call{Method: "HasCheckpoint", ID: id})
	return f.Ckpt != nil && f.Err == nil, f.Err
}

func (f *fakeService) History(_ context.Context, id string, limit int) ([]facade.TaskView, error) {
	f.record(call{Method: "History", ID: id, Limit: limit})
	return f.TasksV, f.Err
}

func (f *fakeService) Timeline(_ context.Context, id string, limit int) (facade.TimelineView, error) {
	f.record(call{Method: "Timeline", ID: id, Limit: limit})
	taskID := ""
	if f.TaskV.Task != nil {
		taskID = f.TaskV.ID
	}
	return facade.TimelineView{TenantID: id, TaskID: taskID, Events: f.TimelineEvs, Degraded: f.TaskV.Degraded}, f.Err
}

func (f *fakeService) Lock(_ context.Context, id string) (tenantlock.Info, error) {
	f.record(call{Method: "Lock", ID: id})
	return f.LockInfo, f.Err
}

func (f *fakeService) ReleaseLock(_ context.Context, id string, fence int64, reason string, a facade.Actor) (tenantlock.Info, error) {
	f.record(call{Method: "ReleaseLock", ID: id, Fence: fence, Reason: reason, Actor: a})
	return f.LockInfo, f.Err
}

func (f *fakeService) Retry(_ context.Context, id string, req facade.RetryRequest, a facade.Actor) (facade.RetryResult, error) {
	f.record(call{Method: "Retry", ID: id, Retry: req, Reason: req.Reason, Actor: a})
	return f.RetryRes, f.Err
}

func (f *fakeService) RetryPlan(_ context.Context, id string, req facade.PlanRetryRequest, a facade.Actor) (facade.PlanRetryResult, error) {
	f.record(call{Method: "RetryPlan", ID: id, PlanRetry: req, Reason: req.Reason, Actor: a})
	res := f.PlanRetryRes
	if res.PlanID == "" {
		res.PlanID = id
	}
	res.DryRun = res.DryRun || req.DryRun
	return res, f.Err
}

func (f *fakeService) PauseTask(_ context.Context, id, reason string, a facade.Actor) (facade.TaskView, error) {
	f.record(call{Method: "PauseTask", ID: id, Reason: reason, Actor: a})
	return f.TaskV, f.Err
}

func (f *fakeService) ResumeTask(_ context.Context, id, reason string, a facade.Actor) (facade.TaskView, error) {
	f.record(call{Method: "ResumeTask", ID: id, Reason: reason, Actor: a})
	return f.TaskV, f.Err
}

func (f *fakeService) CancelTask(_ context.Context, id, reason string, a facade.Actor) (facade.TaskView, error) {
	f.record(call{Method: "CancelTask", ID: id, Reason: reason, Actor: a})
	return f.TaskV, f.Err
}

// Sample data, fixed ids and times.
var (
	t0       = time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC)
	planID   = plan.NewID(t0)
	taskID   = task.NewID(t0)
	tenantID = "t-001"
)

func samplePlan() facade.PlanView {
	p := &plan.Plan{
		ID: planID, Name: "config-rollout", Status: plan.StatusRunning, Pipeline: "standard-deploy",
		Stages:         []task.StageSpec{{Name: "push-config", Kind: "noop"}, {Name: "settle", Kind: "noop"}},
		MaxConcurrency: 5, OnTenantLocked: plan.LockFail, Owner: "coord-a", TotalTasks: 2,
		CreatedAt: t0, StartedAt: t0.Add(time.Second), UpdatedAt: t0.Add(2 * time.Second),
	}
	return facade.PlanView{Plan: p, Counts: plan.Counts{task.StatusRunning: 1, task.StatusCompleted: 1}}
}

func sampleTask() facade.TaskView {
	t := &task.Task{
		ID: taskID, TenantID: tenantID, PlanID: planID, Status: task.StatusFailed, Attempt: 1,
		StageIndex: 1, StageName: "settle", TotalStages: 2, LastError: "stage push-config: HTTP 500 after 3 attempts",
		Owner: "coord-a", HeartbeatAt: t0.Add(3 * time.Second), Fence: 7,
		CreatedAt: t0, StartedAt: t0.Add(time.Second), FinishedAt: t0.Add(4 * time.Second), UpdatedAt: t0.Add(4 * time.Second),
	}
	ck := checkpoint.Checkpoint{
		LastCompletedStageIndex: 0, CompletedStages: []string{"push-config"},
		ContextData: map[string]any{"push-config": map[string]any{"status": 200.0}},
		SavedAt:     t0.Add(2 * time.Second), Attempt: 1, Fence: 7,
	}
	return facade.TaskView{Task: t, Checkpoint: &ck}
}

// newFake returns a fake service answering with the sample data.
func newFake() *fakeService {
	tv := sampleTask()
	listed := sampleTask()
	listed.Checkpoint = nil
	return &fakeService{
		PlanV: samplePlan(), PlansV: []facade.PlanView{{Plan: samplePlan().Plan, Counts: samplePlan().Counts}},
		TaskV: tv, TasksV: []facade.TaskView{listed}, Ckpt: tv.Checkpoint,
		RetryRes: facade.RetryResult{Task: &tv, WouldRun: []string{"settle"}},
		TimelineEvs: []task.Event{
			{At: t0.Add(time.Second), Type: task.EventStarted, Attempt: 1, Instance: "coord-a", Fence: 7},
			task.Event{At: t0.Add(2 * time.Second), Type: task.EventStageSucceeded, Attempt: 1, StageAttempt: 1,
				Duration: task.Duration(time.Second)}.AtStage(0, "push-config"),
		},
		LockInfo: tenantlock.Info{TenantID: tenantID, Held: true, Holder: tenantlock.Holder{PlanID: planID, TaskID: taskID, Instance: "coord-a"},
			TTL: 41234 * time.Millisecond, Fence: 7},
	}
}

// newAPI returns the API over svc with a logger writing to the returned buffer.
func newAPI(t *testing.T, svc httpapi.Service, cfg httpapi.Config) (http.Handler, *syncBuffer) {
	t.Helper()
	buf := &syncBuffer{}
	if cfg.Logger == nil {
		l := zerolog.New(buf).Level(zerolog.DebugLevel)
		cfg.Logger = &l
	}
	return httpapi.New(svc, cfg), buf
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Lines returns the log lines with message msg, decoded.
func (s *syncBuffer) Lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, l)
		}
		if m["message"] == msg {
			out = append(out, m)
		}
	}
	return out
}

var errBoom = errors.New("redis: connection pool exhausted at 10.0.0.7:6379")

// RecordRefusal keeps the refusal; it is not counted as a call (the
// routes' tests count the calls a request makes to the service).
func (f *fakeService) RecordRefusal(r facade.Refusal) {
	f.mu.Lock()
	f.refusals = append(f.refusals, r)
	f.mu.Unlock()
}

// Refusals returns the refusals recorded so far.
func (f *fakeService) Refusals() []facade.Refusal {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]facade.Refusal(nil), f.refusals...)
}
