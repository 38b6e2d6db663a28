package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
)

func TestEventsQuery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		path   string
		header map[string]string
		want   task.FeedFilter
		wait   time.Duration
		status int
	}{
		{"DefaultsOK", "/v1/events", nil, task.FeedFilter{}, 0, 200},
		{"AllOK", "/v1/events?after=1732233600000-7&limit=1000&wait=30s&planId=" + planID + "&tenantId=t-001&type=task.failed", nil,
			task.FeedFilter{After: "1732233600000-7", Limit: 1000, PlanID: planID, TenantID: "t-001", Type: "task.failed"}, httpapi.LongPollChunk, 200},
		{"ShortWaitOK", "/v1/events?after=$&wait=1500ms", nil, task.FeedFilter{After: "$"}, 1500 * time.Millisecond, 200},
		{"EmptyAfterOK", "/v1/events?after=", nil, task.FeedFilter{}, 0, 200},
		{"ErrBadCursor", "/v1/events?after=abc", nil, task.FeedFilter{}, 0, 400},
		{"ErrCursorWithBraces", "/v1/events?after=1-%7B0%7D", nil, task.FeedFilter{}, 0, 400},
		{"ErrLimitZero", "/v1/events?limit=0", nil, task.FeedFilter{}, 0, 400},
		{"ErrLimitTooLarge", "/v1/events?limit=1001", nil, task.FeedFilter{}, 0, 400},
		{"ErrWaitNegative", "/v1/events?wait=-1s", nil, task.FeedFilter{}, 0, 400},
		{"ErrWaitTooLong", "/v1/events?wait=61s", nil, task.FeedFilter{}, 0, 400},
		{"ErrWaitNotDuration", "/v1/events?wait=30", nil, task.FeedFilter{}, 0, 400},
		{"ErrBadPlan", "/v1/events?planId=plan-x", nil, task.FeedFilter{}, 0, 400},
		{"ErrBadTenant", "/v1/events?tenantId=a:b", nil, task.FeedFilter{}, 0, 400},
		{"ErrBadType", "/v1/events?type=Task.Failed", nil, task.FeedFilter{}, 0, 400},
		{"ErrUnknownParam", "/v1/events?cursor=1-0", nil, task.FeedFilter{}, 0, 400},
		{"ErrRepeatedParam", "/v1/events?limit=1&limit=2", nil, task.FeedFilter{}, 0, 400},
		{"ErrStreamBadLastEventID", "/v1/events", map[string]string{"Accept": httpapi.MediaEventStream, httpapi.HeaderLastEventID: "x"}, task.FeedFilter{}, 0, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := newFake()
			h, _ := newAPI(t, svc, httpapi.Config{})
			a := serve(t, h, request{method: "GET", path: tt.path, header: tt.header})
			if tt.status != 200 {
				a.problem(t, tt.status, httpapi.CodeInvalidArgument)
				if svc.Calls() != 0 {
					t.Fatalf("service called for a bad request")
				}
				return
			}
			calls := svc.FeedCalls()
			if a.Status != 200 || len(calls) == 0 {
				t.Fatalf("answer %d after %d reads", a.Status, len(calls))
			}
			// A wait is served in chunks: the first read carries the query.
			if c := calls[0]; c.Feed != tt.want || c.Wait != tt.wait {
				t.Fatalf("read (%+v, %s), want (%+v, %s)", c.Feed, c.Wait, tt.want, tt.wait)
			}
		})
	}
}

func TestEventsPage(t *testing.T) {
	t.Parallel()
	svc := newFake()
	svc.Feed = func(context.Context, task.FeedFilter, time.Duration) ([]task.FeedEvent, string, error) {
		return []task.FeedEvent{
			{ID: "1732233600000-0", Type: "plan.created", At: t0.In(time.FixedZone("CET", 3600)), PlanID: planID},
			{ID: "1732233600000-1", Type: "task.failed", At: t0, PlanID: planID, TaskID: taskID, TenantID: "t-001",
				Data: map[string]any{"status": "FAILED", "attempt": 1}},
		}, "1732233600000-1", nil
	}
	h, _ := newAPI(t, svc, httpapi.Config{})
	a := serve(t, h, request{method: "GET", path: "/v1/events"})
	want := `{"events":[` +
		`{"id":"1732233600000-0","type":"plan.created","at":"2026-11-21T09:30:00Z","planId":"` + planID + `","taskId":"","tenantId":"","data":{}},` +
		`{"id":"1732233600000-1","type":"task.failed","at":"2026-11-21T09:30:00Z","planId":"` + planID + `","taskId":"` + taskID +
		`","tenantId":"t-001","data":{"attempt":1,"status":"FAILED"}}],"nextCursor":"1732233600000-1"}`
	if a.Status != 200 || strings.TrimSpace(string(a.Body)) != want {
		t.Fatalf("answer = %d\n%s\nwant\n%s", a.Status, a.Body, want)
	}
	t.Run("ErrUnavailable", func(t *testing.T) {
		t.Parallel()
		svc := newFake()
		svc.Err = fmt.Errorf("read events: %w", facade.ErrUnavailable)
		h, _ := newAPI(t, svc, httpapi.Config{})
		serve(t, h, request{method: "GET", path: "/v1/events?wait=1s"}).problem(t, 503, httpapi.CodeUnavailable)
	})
}

func TestInstancesRoute(t *testing.T) {
	t.Parallel()
	svc := newFake()
	svc.InstancesV = []facade.InstanceView{
		{Instance: task.Instance{ID: "coord-a", Addr: "10.0.0.1:8080", Version: "1.2.3", StartedAt: t0, LastSeen: t0.Add(time.Minute),
			TasksRunning: 3}, Alive: true},
		{Instance: task.Instance{ID: "coord-b", LastSeen: t0}},
	}
	h, _ := newAPI(t, svc, httpapi.Config{})
	a := serve(t, h, request{method: "GET", path: "/v1/instances"})
	want := `{"instances":[` +
		`{"id":"coord-a","addr":"10.0.0.1:8080","version":"1.2.3","startedAt":"2026-11-21T09:30:00Z","lastSeen":"2026-11-21T09:31:00Z","tasksRunning":3,"singleInstance":false,"alive":true},` +
		`{"id":"coord-b","addr":"","version":"","startedAt":null,"lastSeen":"2026-11-21T09:30:00Z","tasksRunning":0,"singleInstance":false,"alive":false}],"degraded":false}`
	if a.Status != 200 || strings.TrimSpace(string(a.Body)) != want || a.Header.Get(httpapi.HeaderDegraded) != "" {
		t.Fatalf("answer = %d\n%s\nwant\n%s", a.Status, a.Body, want)
	}
	// From memory (Redis unreachable): itself only, marked.
	svc.InstancesV = []facade.InstanceView{{Instance: task.Instance{ID: "coord-a", LastSeen: t0}, Alive: true, Degraded: true}}
	a = serve(t, h, request{method: "GET", path: "/v1/instances"})
	if a.Status != 200 || !strings.HasSuffix(strings.TrimSpace(string(a.Body)), `"alive":true}],"degraded":true}`) || a.Header.Get(httpapi.HeaderDegraded) != "true" {
		t.Fatalf("degraded answer = %d %v\n%s", a.Status, a.Header, a.Body)
	}
	serve(t, h, request{method: "GET", path: "/v1/instances?all=true"}).problem(t, 400, httpapi.CodeInvalidArgument)
	svc.Err = fmt.Errorf("instances: %w", facade.ErrUnavailable)
	serve(t, h, request{method: "GET", path: "/v1/instances"}).problem(t, 503, httpapi.CodeUnavailable)
}

// TestLongPollSlots fills Config.MaxLongPolls: one more long poll is
// refused with 503 and Retry-After, a read without wait still served.
func TestLongPollSlots(t *testing.T) {
	t.Parallel()
	svc := newFake()
	release := make(chan struct{})
	waiting := make(chan struct{}, 1)
	svc.Feed = func(ctx context.Context, _ task.FeedFilter, wait time.Duration) ([]task.FeedEvent, string, error) {
		if wait > 0 {
			select {
			case waiting <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return []task.FeedEvent{}, "0-0", nil
	}
	h, _ := newAPI(t, svc, httpapi.Config{MaxLongPolls: 1})
	done := make(chan answer)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/events?wait=30s", nil))
		done <- answer{Status: rec.Code}
	}()
	<-waiting
	a := serve(t, h, request{method: "GET", path: "/v1/events?wait=1s"})
	a.problem(t, 503, httpapi.CodeUnavailable)
	if a.Header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After = %q", a.Header.Get("Retry-After"))
	}
	if a := serve(t, h, request{method: "GET", path: "/v1/events"}); a.Status != 200 {
		t.Errorf("a read without wait = %d while the long polls are taken", a.Status)
	}
	close(release)
	if a := <-done; a.Status != 200 {
		t.Fatalf("first long poll = %d", a.Status)
	}
	if a := serve(t, h, request{method: "GET", path: "/v1/events?wait=1ms"}); a.Status != 200 {
		t.Errorf("long poll after the slot was freed = %d", a.Status)
	}
}

// memFeed backs the fake service's Events with a memory store's feed,
// which has the store's semantics (cursors, filters, blocking reads).
func memFeed(t *testing.T, svc *fakeService) *repository.Memory {
	t.Helper()
	mem := repository.NewMemory(repository.MemoryConfig{})
	svc.Feed = mem.ReadEvents
	return mem
}

func publish(t *testing.T, mem *repository.Memory, tenants ...string) {
	t.Helper()
	evs := make([]task.FeedEvent, len(tenants))
	for i, tn := range tenants {
		evs[i] = task.FeedEvent{Type: "task.completed", TenantID: tn, Data: map[string]any{"status": "COMPLETED"}}
	}
	if err := mem.PublishEvents(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
}

// sseEvent is one Server-Sent Event as a client parses it.
type sseEvent struct {
	ID, Type string
	Data     httpapi.FeedEvent
}

// sseClient reads a stream: events, comments and the retry field.
type sseClient struct {
	t      *testing.T
	resp   *http.Response
	cancel context.CancelFunc
	events chan sseEvent
	pings  atomic.Int64
	retry  atomic.Value
	ended  chan struct{}
}

// openStream opens GET path with Accept: text/event-stream on srv.
func openStream(t *testing.T, srv *httptest.Server, path string, header map[string]string) *sseClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
	req.Header.Set("Accept", httpapi.MediaEventStream)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &sseClient{t: t, resp: resp, cancel: cancel, events: make(chan sseEvent, 1000), ended: make(chan struct{})}
	t.Cleanup(c.close)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != httpapi.MediaEventStream {
		t.Fatalf("stream answer = %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	check, _ := http.NewRequest("GET", path, nil)
	check.Header.Set("Accept", httpapi.MediaEventStream)
	conform(t, check, resp.StatusCode, resp.Header, []byte(": ping\n\n"))
	go c.read()
	return c
}

func (c *sseClient) read() {
	defer close(c.ended)
	sc := bufio.NewScanner(c.resp.Body)
	var ev sseEvent
	var data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data != "" {
				if err := json.Unmarshal([]byte(data), &ev.Data); err != nil {
					c.t.Errorf("event data %q: %v", data, err)
				}
				c.events <- ev
			}
			ev, data = sseEvent{}, ""
		case strings.HasPrefix(line, ":"):
			c.pings.Add(1)
		case strings.HasPrefix(line, "id: "):
			ev.ID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			ev.Type = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		case strings.HasPrefix(line, "retry: "):
			c.retry.Store(strings.TrimPrefix(line, "retry: "))
		default:
			c.t.Errorf("unexpected stream line %q", line)
		}
	}
}

// next returns the next n events, failing the test after 10s.
func (c *sseClient) next(n int) []sseEvent {
	c.t.Helper()
	var out []sseEvent
	timeout := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case ev := <-c.events:
			out = append(out, ev)
		case <-timeout:
			c.t.Fatalf("got %d of %d events in 10s: %+v", len(out), n, out)
		}
	}
	return out
}

// quiet fails the test if an event arrives within d.
func (c *sseClient) quiet(d time.Duration) {
	c.t.Helper()
	select {
	case ev := <-c.events:
		c.t.Fatalf("unexpected event %+v", ev)
	case <-time.After(d):
	}
}

func (c *sseClient) close() {
	c.cancel()
	_ = c.resp.Body.Close()
}

// served wraps h and tells when its ServeHTTP calls return.
type served struct {
	h      http.Handler
	active atomic.Int64
}

func (s *served) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.active.Add(1)
	defer s.active.Add(-1)
	s.h.ServeHTTP(w, r)
}

// idle waits until no request is being served, failing the test after
// within.
func (s *served) idle(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for s.active.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d handlers still running %s after their clients went away", s.active.Load(), within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestEventStream(t *testing.T) {
	t.Parallel()
	t.Run("DeliversAndResumes", func(t *testing.T) {
		t.Parallel()
		svc := newFake()
		mem := memFeed(t, svc)
		h, _ := newAPI(t, svc, httpapi.Config{StreamKeepAlive: time.Hour})
		s := &served{h: h}
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		publish(t, mem, "t-1", "t-2", "t-3")
		c := openStream(t, srv, "/v1/events?limit=2", nil)
		first := c.next(3)
		for i, ev := range first {
			if want := fmt.Sprintf("t-%d", i+1); ev.Data.TenantID != want || ev.Type != "task.completed" || ev.ID != ev.Data.ID || ev.Data.Type != ev.Type {
				t.Fatalf("event %d = %+v, want tenant %s with id and type as in its data", i, ev, want)
			}
		}
		if c.retry.Load() != "2000" {
			t.Errorf("retry field = %v", c.retry.Load())
		}
		// Published while the stream waits: delivered.
		publish(t, mem, "t-4")
		if ev := c.next(1)[0]; ev.Data.TenantID != "t-4" {
			t.Fatalf("live event = %+v", ev)
		}
		c.quiet(50 * time.Millisecond)

		// A reconnecting client gets exactly the events after its
		// Last-Event-ID, whatever its URL's after says.
		c.close()
		r := openStream(t, srv, "/v1/events?after="+first[0].ID, map[string]string{httpapi.HeaderLastEventID: first[1].ID})
		got := r.next(2)
		if got[0].Data.TenantID != "t-3" || got[1].Data.TenantID != "t-4" {
			t.Fatalf("resumed stream = %+v", got)
		}
		r.quiet(50 * time.Millisecond)
		r.close()
		s.idle(t, time.Second)
	})
	t.Run("FilterOK", func(t *testing.T) {
		t.Parallel()
		svc := newFake()
		mem := memFeed(t, svc)
		h, _ := newAPI(t, svc, httpapi.Config{})
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		c := openStream(t, srv, "/v1/events?after=$&tenantId=t-2", nil)
		publish(t, mem, "t-1", "t-2", "t-1", "t-2")
		for _, ev := range c.next(2) {
			if ev.Data.TenantID != "t-2" {
				t.Fatalf("filtered stream delivered %+v", ev)
			}
		}
		c.quiet(50 * time.Millisecond)
	})
	t.Run("KeepAliveOK", func(t *testing.T) {
		t.Parallel()
		svc := newFake()
		memFeed(t, svc)
		h, _ := newAPI(t, svc, httpapi.Config{StreamKeepAlive: 20 * time.Millisecond})
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		c := openStream(t, srv, "/v1/events", nil)
		deadline := time.Now().Add(5 * time.Second)
		for c.pings.Load() < 3 {
			if time.Now().After(deadline) {
				t.Fatalf("%d pings in 5s with a 20ms keep-alive", c.pings.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	t.Run("OutlivesWriteTimeout", func(t *testing.T) {
		t.Parallel()
		svc := newFake()
		mem := memFeed(t, svc)
		h, _ := newAPI(t, svc, httpapi.Config{StreamKeepAlive: 100 * time.Millisecond})
		srv := httptest.NewUnstartedServer(h)
		srv.Config.WriteTimeout = 200 * time.Millisecond
		srv.Start()
		t.Cleanup(srv.Close)
		c := openStream(t, srv, "/v1/events", nil)
		time.Sleep(600 * time.Millisecond) // three write timeouts
		publish(t, mem, "t-late")
		if ev := c.next(1)[0]; ev.Data.TenantID != "t-late" {
			t.Fatalf("event after the write timeout = %+v", ev)
		}
	})
	t.Run("ClientGoneEndsHandler", func(t *testing.T) {
		t.Parallel()
		svc := newFake()
		memFeed(t, svc)
		h, _ := newAPI(t, svc, httpapi.Config{})
		s := &served{h: h}
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		c := openStream(t, srv, "/v1/events", nil)
		time.Sleep(50 * time.Millisecond) // the stream waits in a long poll
		if s.active.Load() != 1 {
			t.Fatalf("%d handlers running, want the stream's", s.active.Load())
		}
		c.close()
		s.idle(t, time.Second)
	})
	t.Run("ErrUnavailableBeforeStart", func(t *testing.T) {
		t.Parallel()
		svc := newFake()
		svc.Err = fmt.Errorf("read events: %w", facade.ErrUnavailable)
		h, _ := newAPI(t, svc, httpapi.Config{})
		serve(t, h, request{method: "GET", path: "/v1/events", header: map[string]string{"Accept": "text/event-stream"}}).
			problem(t, 503, httpapi.CodeUnavailable)
	})
	t.Run("BusySlotsPollOK", func(t *testing.T) {
		t.Parallel()
		svc := newFake()
		mem := memFeed(t, svc)
		block := make(chan struct{})
		// One long poll holds the only slot: the stream reads without
		// waiting, once a second, and still delivers.
		h, _ := newAPI(t, svc, httpapi.Config{MaxLongPolls: 1})
		inner := svc.Feed
		var held atomic.Bool
		svc.Feed = func(ctx context.Context, f task.FeedFilter, wait time.Duration) ([]task.FeedEvent, string, error) {
			if f.TenantID == "t-hold" && wait > 0 && held.CompareAndSwap(false, true) {
				<-block
				return []task.FeedEvent{}, "0-0", nil
			}
			return inner(ctx, f, wait)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		ctx, cancel := context.WithCancel(context.Background())
		// Before srv.Close, which waits for the handlers.
		t.Cleanup(func() { cancel(); close(block) })
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/events?tenantId=t-hold&wait=60s", nil)
			resp, err := srv.Client().Do(req)
			if err == nil {
				resp.Body.Close()
			}
		}()
		for !held.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		c := openStream(t, srv, "/v1/events", nil)
		publish(t, mem, "t-busy")
		if ev := c.next(1)[0]; ev.Data.TenantID != "t-busy" {
			t.Fatalf("event = %+v", ev)
		}
	})
}

// TestLongPollOutlivesWriteTimeout runs a long poll longer than the
// server's WriteTimeout: the answer still arrives.
func TestLongPollOutlivesWriteTimeout(t *testing.T) {
	t.Parallel()
	svc := newFake()
	mem := memFeed(t, svc)
	h, _ := newAPI(t, svc, httpapi.Config{})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.WriteTimeout = 100 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	go func() {
		time.Sleep(400 * time.Millisecond)
		publish(t, mem, "t-slow")
	}()
	resp, err := srv.Client().Get(srv.URL + "/v1/events?wait=10s")
	if err != nil {
		t.Fatalf("long poll past the write timeout: %v", err)
	}
	defer resp.Body.Close()
	var f httpapi.Feed
	if err := json.NewDecoder(resp.Body).Decode(&f); err != nil || resp.StatusCode != 200 || len(f.Events) != 1 || f.Events[0].TenantID != "t-slow" {
		t.Fatalf("answer = %d %+v (%v)", resp.StatusCode, f, err)
	}
}

// TestStreamsLeaveInFlight opens as many event streams as Config.MaxInFlight
// allows requests: the other requests are still served, since a stream
// gives its in-flight slot back once it holds a stream slot.
func TestStreamsLeaveInFlight(t *testing.T) {
	t.Parallel()
	svc := newFake()
	mem := memFeed(t, svc)
	h, _ := newAPI(t, svc, httpapi.Config{MaxInFlight: 2, StreamKeepAlive: time.Hour})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	streams := []*sseClient{openStream(t, srv, "/v1/events", nil), openStream(t, srv, "/v1/events", nil)}
	for range 3 {
		if a := serve(t, h, request{method: "GET", path: "/v1/instances"}); a.Status != 200 {
			t.Fatalf("GET /v1/instances with 2 streams open and MaxInFlight 2 = %d %s", a.Status, a.Body)
		}
	}
	if a := serve(t, h, request{method: "POST", path: "/v1/tenants/t-001/pause", body: `{"reason": "hold"}`}); a.Status != 200 {
		t.Fatalf("a change with 2 streams open and MaxInFlight 2 = %d %s", a.Status, a.Body)
	}
	// The streams still deliver.
	publish(t, mem, "t-open")
	for _, c := range streams {
		if ev := c.next(1)[0]; ev.Data.TenantID != "t-open" {
			t.Fatalf("event = %+v", ev)
		}
	}
}

// TestStreamSlots fills Config.MaxStreams: one more stream is refused with
// 503 and Retry-After, other reads are still served, and a stream that
// ends frees its slot.
func TestStreamSlots(t *testing.T) {
	t.Parallel()
	svc := newFake()
	memFeed(t, svc)
	h, _ := newAPI(t, svc, httpapi.Config{MaxStreams: 1, StreamKeepAlive: time.Hour})
	s := &served{h: h}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c := openStream(t, srv, "/v1/events", nil)
	stream := request{method: "GET", path: "/v1/events", header: map[string]string{"Accept": httpapi.MediaEventStream}}
	a := serve(t, h, stream)
	a.problem(t, 503, httpapi.CodeUnavailable)
	if a.Header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After = %q", a.Header.Get("Retry-After"))
	}
	if a := serve(t, h, request{method: "GET", path: "/v1/events"}); a.Status != 200 {
		t.Errorf("a page read while the streams are taken = %d", a.Status)
	}
	if a := serve(t, h, request{method: "GET", path: "/v1/events?wait=1ms"}); a.Status != 200 {
		t.Errorf("a long poll while the streams are taken = %d", a.Status)
	}
	c.close()
	s.idle(t, time.Second)
	openStream(t, srv, "/v1/events", nil).close()
}
