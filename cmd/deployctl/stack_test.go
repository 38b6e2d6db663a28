package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
	"github.com/deploycoord/deploycoord/tenantlock"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// testToken is the bearer token the stack demands. The runner fails a test
// whose output shows it.
const testToken = "s3cret-T0ken-d0-not-print"

// stack is the real API (coordinator on a Redis store on miniredis, tenant
// locks, http stages calling a real target) behind a wrapper that records
// what deployctl sends and answers 401 without the right bearer token.
type stack struct {
	url    string
	coord  *facade.Coordinator
	locks  *redislock.Locker
	target *httptest.Server

	mu sync.Mutex
	// failing tenants get HTTP 500 from the target.
	failing map[string]bool
	seen    []seenRequest
}

// seenRequest is a request the API received.
type seenRequest struct {
	method, path, auth, idempotencyKey string
	body                               string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{failing: map[string]bool{}}
	s.target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/t/"), "/")
		s.mu.Lock()
		bad := s.failing[tenant]
		s.mu.Unlock()
		if bad {
			http.Error(w, "config server down", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"pushed": true}`)
	}))
	t.Cleanup(s.target.Close)

	_, client := redistest.Mini(t)
	rs, err := repository.NewRedis(client, repository.Config{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	keys := rs.Keys()
	const lease = 5 * time.Second
	s.locks, err = redislock.New(client, redislock.Config{
		Lease:    lease,
		LockKey:  func(id string) string { k, _ := keys.Lock(id); return k },
		FenceKey: func(id string) string { k, _ := keys.Fence(id); return k },
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := stage.NewRegistry(stage.Options{InlineHTTPHosts: []string{"127.0.0.1"}})
	s.coord, err = facade.New(rs, s.locks, facade.Config{
		Instance: "coord-a", Lease: lease, Stages: reg, PlanPoll: 50 * time.Millisecond, LockWaitPoll: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	api := httpapi.New(s.coord, httpapi.Config{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.mu.Lock()
		s.seen = append(s.seen, seenRequest{method: r.Method, path: r.URL.Path, auth: r.Header.Get("Authorization"),
			idempotencyKey: r.Header.Get("Idempotency-Key"), body: string(body)})
		s.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			httpapi.WriteProblem(w, r, http.StatusUnauthorized, httpapi.CodeUnauthenticated, "missing or unknown bearer token")
			return
		}
		api.ServeHTTP(w, r)
	}))
	s.url = srv.URL
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.coord.Shutdown(ctx)
	})
	return s
}

func (s *stack) fail(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing[tenant] = true
}

func (s *stack) heal(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.failing, tenant)
}

// requests returns the requests seen so far for method and path.
func (s *stack) requests(method, path string) []seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []seenRequest
	for _, r := range s.seen {
		if r.method == method && r.path == path {
			out = append(out, r)
		}
	}
	return out
}

// result is one deployctl run.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// cli runs deployctl against the stack with the token in the environment.
func (s *stack) cli(t *testing.T, args ...string) result {
	t.Helper()
	return s.cliIn(t, "", args...)
}

// cliIn runs deployctl with stdin.
func (s *stack) cliIn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runCLI(t, context.Background(), map[string]string{"DEPLOYCTL_SERVER": s.url, "DEPLOYCTL_TOKEN": testToken}, stdin, args...)
}

// runCLI runs deployctl in-process and fails the test if the token shows
// in its output.
func runCLI(t *testing.T, ctx context.Context, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := runWithInput(ctx, args, strings.NewReader(stdin), &out, &errb, func(k string) string { return env[k] })
	r := result{code: code, stdout: out.String(), stderr: errb.String()}
	if strings.Contains(r.stdout+r.stderr, testToken) {
		t.Errorf("deployctl %q printed the token:\n%s", args, r)
	}
	return r
}

// must checks that r exited with code and that stream ("stdout" or
// "stderr") holds every fragment.
func must(t *testing.T, r result, code int, stream string, fragments ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\n%s", r.code, code, r)
	}
	text := r.stdout
	if stream == "stderr" {
		text = r.stderr
	}
	for _, f := range fragments {
		if !strings.Contains(text, f) {
			t.Fatalf("%s lacks %q\n%s", stream, f, r)
		}
	}
}

// writeFile writes a file in a test directory and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// planJSON is a plan over tenants running stages (a JSON array).
func planJSON(name, stages string, tenants ...string) string {
	ts := make([]string, len(tenants))
	for i, tn := range tenants {
		ts[i] = fmt.Sprintf(`{"tenantId": %q}`, tn)
	}
	return fmt.Sprintf(`{"name": %q, "stages": %s, "tenants": [%s], "params": {"version": "1.2.3"}, "maxConcurrency": 4}`,
		name, stages, strings.Join(ts, ", "))
}

const (
	noopStages  = `[{"name": "prepare", "kind": "noop"}]`
	sleepStages = `[{"name": "wait", "kind": "sleep", "sleep": {"duration": "300ms"}}, {"name": "done", "kind": "noop"}]`
)

// pushStages are prepare (noop), push (http to the target, no retry) and
// settle (noop): a failing tenant fails at push with a checkpoint after
// prepare.
func (s *stack) pushStages() string {
	return fmt.Sprintf(`[{"name": "prepare", "kind": "noop"},
		{"name": "push", "kind": "http", "retry": {"maxAttempts": 1},
		 "http": {"method": "POST", "url": "%s/t/{{.TenantID}}/push", "successStatus": [200]}},
		{"name": "settle", "kind": "noop"}]`, s.target.URL)
}

// create creates a plan through the facade and returns its id.
func (s *stack) create(t *testing.T, spec string) string {
	t.Helper()
	r := s.cli(t, "plan", "create", "-f", writeFile(t, "plan.json", spec), "-o", "json")
	must(t, r, 0, "stdout", `"planId"`)
	return field(t, r.stdout, "planId").(string)
}

func (s *stack) waitPlan(t *testing.T, id string, want plan.Status) {
	t.Helper()
	eventually(t, func() error {
		v, err := s.coord.Plan(context.Background(), id)
		if err != nil {
			return err
		}
		if v.Status != want {
			return fmt.Errorf("plan %s is %s, want %s", id, v.Status, want)
		}
		return nil
	})
}

func (s *stack) waitTask(t *testing.T, tenant string, want task.Status) facade.TaskView {
	t.Helper()
	var v facade.TaskView
	eventually(t, func() error {
		var err error
		if v, err = s.coord.TaskByTenant(context.Background(), tenant); err != nil {
			return err
		}
		if v.Status != want {
			return fmt.Errorf("task of %s is %s (%s), want %s", tenant, v.Status, v.LastError, want)
		}
		return nil
	})
	return v
}

// idle waits until no task runs on the coordinator (a retried task's
// run has ended, not just its status).
func (s *stack) idle(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := s.coord.Idle(ctx); err != nil {
		t.Fatalf("coordinator not idle: %v", err)
	}
}

func eventually(t *testing.T, f func() error) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 15s: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holdLock takes tenantID's lock for holder as another instance would. The
// SET NX of Acquire is bounded by Lease/20 (250ms here), which a loaded
// machine running the race detector can exceed (seen in CI: "acquire tenant
// t-lock: context deadline exceeded"): such a call is tried again, after
// freeing the lock if the timed-out attempt took it after all.
func (s *stack) holdLock(t *testing.T, tenantID string, holder tenantlock.Holder) *redislock.Lease {
	t.Helper()
	var err error
	for range 20 {
		var lease *redislock.Lease
		lease, err = s.locks.Acquire(context.Background(), tenantID, holder)
		if err == nil {
			return lease
		}
		var re *redislock.RedisError
		var locked *tenantlock.LockedError
		switch {
		case errors.As(err, &re) && re.Unavailable():
		case errors.As(err, &locked) && locked.Holder == holder:
			if _, ferr := s.locks.ForceRelease(context.Background(), tenantID, locked.Fence); ferr != nil {
				t.Logf("free the lock a timed-out attempt took: %v", ferr)
			}
		default:
			t.Fatalf("lock of %s: %v", tenantID, err)
		}
		t.Logf("lock of %s, tried again: %v", tenantID, err)
	}
	t.Fatalf("lock of %s: %v", tenantID, err)
	return nil
}
