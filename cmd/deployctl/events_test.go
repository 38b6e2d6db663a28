package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
)

// The event feed endpoint is being built elsewhere; these tests run the
// command against a fake implementing its contract: GET /v1/events?after=
// &limit=&wait=&planId=&tenantId=&type= answers {"events": [...],
// "nextCursor": "..."}, long-polling up to wait when nothing matches.

const feedPlan = "plan-01JDQZV5X8M7R2K9C3B4N6P0QS"

// feed is a fake event feed; the cursor of event n is "n-0".
type feed struct {
	url string

	mu      sync.Mutex
	events  []map[string]any
	added   chan struct{} // closed when events are added
	queries []url.Values
	// fail holds statuses to answer, one per request, before serving.
	fail []int
	// examine, when set, bounds the events a request looks at, as the real
	// feed bounds a filtered read (a page may come back short or empty).
	examine int
}

func newFeed(t *testing.T) *feed {
	f := &feed{added: make(chan struct{})}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *feed) add(evs ...map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range evs {
		e["id"] = strconv.Itoa(len(f.events)+1) + "-0"
		f.events = append(f.events, e)
	}
	close(f.added)
	f.added = make(chan struct{})
}

func event(typ, tenant string, data map[string]any) map[string]any {
	return map[string]any{"type": typ, "at": "2026-11-21T10:00:00Z", "planId": feedPlan,
		"taskId": "task-01JDQZV5X8M7R2K9C3B4N6P0QT", "tenantId": tenant, "data": data}
}

func (f *feed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/events" || r.Method != http.MethodGet {
		httpapi.WriteProblem(w, r, http.StatusNotFound, httpapi.CodeNotFound, "no such route")
		return
	}
	q := r.URL.Query()
	f.mu.Lock()
	f.queries = append(f.queries, q)
	if len(f.fail) > 0 {
		status := f.fail[0]
		f.fail = f.fail[1:]
		f.mu.Unlock()
		code := httpapi.CodeUnavailable
		if status < 500 {
			code = httpapi.CodeInvalidArgument
		}
		httpapi.WriteProblem(w, r, status, code, "feed says no")
		return
	}
	f.mu.Unlock()
	after := seq(q.Get("after"))
	limit, _ := strconv.Atoi(q.Get("limit"))
	wait, _ := time.ParseDuration(q.Get("wait"))
	timeout := time.After(wait)
	for {
		f.mu.Lock()
		page, next, examined := []map[string]any{}, q.Get("after"), 0
		for _, e := range f.events {
			if seq(e["id"].(string)) <= after {
				continue
			}
			if len(page) == limit || (f.examine > 0 && examined == f.examine) {
				break
			}
			examined++
			next = e["id"].(string)
			if (q.Get("tenantId") == "" || q.Get("tenantId") == e["tenantId"]) &&
				(q.Get("planId") == "" || q.Get("planId") == e["planId"]) &&
				(q.Get("type") == "" || q.Get("type") == e["type"]) {
				page = append(page, e)
			}
		}
		added := f.added
		f.mu.Unlock()
		if len(page) > 0 || wait == 0 {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"events": page, "nextCursor": next})
			return
		}
		select {
		case <-added:
		case <-timeout:
			wait = 0
		case <-r.Context().Done():
			return
		}
	}
}

// seq is the event number of cursor "n-0" (0 for none).
func seq(cursor string) int {
	n, _, _ := strings.Cut(cursor, "-")
	i, _ := strconv.Atoi(n)
	return i
}

func (f *feed) seen() []url.Values {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]url.Values(nil), f.queries...)
}

// syncBuffer is a bytes.Buffer safe to read while deployctl writes it.
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

// following is a deployctl run in the background.
type following struct {
	out, err syncBuffer
	cancel   context.CancelFunc
	done     chan int
}

func follow(t *testing.T, f *feed, args ...string) *following {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	fl := &following{cancel: cancel, done: make(chan int, 1)}
	env := map[string]string{"DEPLOYCTL_SERVER": f.url, "DEPLOYCTL_TOKEN": testToken}
	go func() {
		fl.done <- runWithInput(ctx, args, strings.NewReader(""), &fl.out, &fl.err, func(k string) string { return env[k] })
	}()
	t.Cleanup(func() {
		cancel()
		<-fl.done
	})
	return fl
}

// waitOut waits until stdout holds n occurrences of s.
func (fl *following) waitOut(t *testing.T, s string, n int) {
	t.Helper()
	eventually(t, func() error {
		if got := strings.Count(fl.out.String(), s); got < n {
			return fmt.Errorf("%d of %q in stdout, want %d:\n%s\nstderr:\n%s", got, s, n, fl.out.String(), fl.err.String())
		}
		return nil
	})
}

// stop ends the run as Ctrl-C does and returns its exit code.
func (fl *following) stop(t *testing.T) int {
	t.Helper()
	fl.cancel()
	select {
	case code := <-fl.done:
		fl.done <- code
		return code
	case <-time.After(10 * time.Second):
		t.Fatal("deployctl did not stop")
		return -1
	}
}

func TestEventsPage(t *testing.T) {
	t.Parallel()
	f := newFeed(t)
	f.add(event("task.failed", "t-1", map[string]any{"error": "HTTP 500"}), event("task.completed", "t-2", nil), event("task.failed", "t-1", nil))
	env := map[string]string{"DEPLOYCTL_SERVER": f.url, "DEPLOYCTL_TOKEN": testToken}

	r := runCLI(t, context.Background(), env, "", "events", "--tenant", "t-1", "--type", "task.failed", "--plan", feedPlan, "--limit", "2")
	must(t, r, 0, "stdout", "AT", "TYPE", "2026-11-21T10:00:00Z", `{"error":"HTTP 500"}`)
	must(t, r, 0, "stderr", "next: --after 3-0\n")
	if n := strings.Count(r.stdout, "task.failed"); n != 2 || strings.Contains(r.stdout, "t-2") {
		t.Fatalf("%d task.failed rows\n%s", n, r)
	}
	q := f.seen()[0]
	if q.Get("tenantId") != "t-1" || q.Get("type") != "task.failed" || q.Get("planId") != feedPlan || q.Get("limit") != "1000" || q.Has("wait") || q.Has("after") {
		t.Fatalf("query = %v", q)
	}

	r = runCLI(t, context.Background(), env, "", "events", "--after", "1-0", "-o", "json")
	must(t, r, 0, "stdout")
	m := decode(t, r.stdout)
	if evs := m["events"].([]any); len(evs) != 2 || m["nextCursor"] != "3-0" || evs[0].(map[string]any)["id"] != "2-0" {
		t.Fatalf("events -o json = %v", m)
	}
	if q := f.seen()[1]; q.Get("after") != "1-0" {
		t.Fatalf("query = %v", q)
	}
}

// TestEventsPageReadsOn: a filtered read may answer a short or empty page
// with events further on (the feed examines a bounded stretch); deployctl
// events reads on from its cursor until the page is full or the feed ends,
// where it used to print an empty table.
func TestEventsPageReadsOn(t *testing.T) {
	t.Parallel()
	f := newFeed(t)
	f.examine = 2
	f.add(event("task.started", "t-1", nil), event("task.completed", "t-1", nil), event("task.started", "t-2", nil),
		event("task.completed", "t-2", nil), event("plan.completed", "", nil), event("task.started", "t-3", nil))
	env := map[string]string{"DEPLOYCTL_SERVER": f.url, "DEPLOYCTL_TOKEN": testToken}
	r := runCLI(t, context.Background(), env, "", "events", "--type", "plan.completed", "--limit", "5")
	must(t, r, 0, "stdout", "plan.completed")
	must(t, r, 0, "stderr", "next: --after 6-0\n") // the end of the feed
	if n := len(f.seen()); n != 4 {
		t.Fatalf("%d requests, want 4 (three pages of two, then one that finds the end)", n)
	}
	// With -o json too (it printed the first, empty, page), and however far
	// the match is (it stopped after 50 pages: a feed of 100 000 events, a
	// plan's events past the first 50 000, showed nothing).
	for range 60 {
		f.add(event("task.started", "t-4", nil), event("task.completed", "t-4", nil))
	}
	f.add(event("task.failed", "t-far", nil))
	r = runCLI(t, context.Background(), env, "", "events", "--tenant", "t-far", "-o", "json")
	must(t, r, 0, "stdout")
	m := decode(t, r.stdout)
	if evs := m["events"].([]any); len(evs) != 1 || evs[0].(map[string]any)["tenantId"] != "t-far" || m["nextCursor"] != "127-0" {
		t.Fatalf("events --tenant t-far -o json = %v, want its one event and the end of the feed", m)
	}
}

func TestEventsFollow(t *testing.T) {
	t.Parallel()

	t.Run("ResumesFromCursor", func(t *testing.T) {
		t.Parallel()
		f := newFeed(t)
		f.add(event("task.failed", "t-1", nil), event("task.completed", "t-1", nil), event("task.failed", "t-1", nil))
		fl := follow(t, f, "events", "--follow", "--tenant", "t-1", "--type", "task.failed", "--plan", feedPlan, "--wait", "5s")
		fl.waitOut(t, "task.failed", 2)
		// The follow is now parked in a long poll; new events end it.
		f.add(event("task.failed", "t-9", nil), event("task.failed", "t-1", map[string]any{"stage": "push"}))
		fl.waitOut(t, "task.failed", 3)
		if code := fl.stop(t); code != 0 {
			t.Fatalf("exit %d after Ctrl-C, want 0; stderr:\n%s", code, fl.err.String())
		}
		if e := fl.err.String(); !strings.HasSuffix(e, "next: --after 5-0\n") {
			t.Errorf("stderr after Ctrl-C = %q, want it to end with the cursor to resume from: next: --after 5-0", e)
		}
		qs := f.seen()
		if len(qs) < 2 {
			t.Fatalf("%d requests", len(qs))
		}
		var afters []string
		for _, q := range qs {
			if q.Get("wait") != "5s" || q.Get("tenantId") != "t-1" || q.Get("type") != "task.failed" || q.Get("planId") != feedPlan || q.Get("limit") != "100" {
				t.Fatalf("query = %v", q)
			}
			afters = append(afters, q.Get("after"))
		}
		if afters[0] != "" || afters[1] != "3-0" || (len(afters) > 2 && afters[2] != "5-0") {
			t.Fatalf("after cursors = %q, want \"\", 3-0, 5-0", afters)
		}
		if strings.Contains(fl.out.String(), "t-9") || !strings.Contains(fl.out.String(), `{"stage":"push"}`) {
			t.Fatalf("stdout:\n%s", fl.out.String())
		}
	})
	t.Run("StartsAfterCursorJSONLines", func(t *testing.T) {
		t.Parallel()
		f := newFeed(t)
		f.add(event("task.started", "t-1", nil), event("task.completed", "t-1", nil))
		fl := follow(t, f, "events", "--follow", "--after", "1-0", "-o", "json", "--wait", "5s")
		fl.waitOut(t, "\n", 1)
		f.add(event("task.failed", "t-2", nil))
		fl.waitOut(t, "\n", 2)
		if code := fl.stop(t); code != 0 {
			t.Fatalf("exit %d", code)
		}
		lines := strings.Split(strings.TrimSpace(fl.out.String()), "\n")
		if len(lines) != 2 || decode(t, lines[0])["id"] != "2-0" || decode(t, lines[1])["type"] != "task.failed" {
			t.Fatalf("lines = %q", lines)
		}
		if q := f.seen()[0]; q.Get("after") != "1-0" {
			t.Fatalf("first query = %v", q)
		}
	})
	t.Run("RetriesUnavailable", func(t *testing.T) {
		t.Parallel()
		f := newFeed(t)
		f.fail = []int{http.StatusServiceUnavailable}
		f.add(event("task.failed", "t-1", nil))
		fl := follow(t, f, "events", "--follow", "--wait", "5s")
		fl.waitOut(t, "task.failed", 1)
		if code := fl.stop(t); code != 0 {
			t.Fatalf("exit %d", code)
		}
		if e := fl.err.String(); !strings.Contains(e, "warning: UNAVAILABLE: feed says no (retrying in 1s)") || strings.Contains(e, testToken) {
			t.Fatalf("stderr = %q", e)
		}
	})
	t.Run("ErrClientErrorEnds", func(t *testing.T) {
		t.Parallel()
		f := newFeed(t)
		f.fail = []int{http.StatusBadRequest}
		r := runCLI(t, context.Background(), map[string]string{"DEPLOYCTL_SERVER": f.url}, "", "events", "--follow")
		must(t, r, 1, "stderr", "error: INVALID_ARGUMENT: feed says no")
	})
}
