package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// TestFeedStack runs the instance registry, the event feed and the batched
// tenant status over real coordinators, on miniredis and the real Redis.
func TestFeedStack(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			t.Run("Instances", func(t *testing.T) { t.Parallel(); testInstances(t, b) })
			t.Run("LongPollWakesOnEvent", func(t *testing.T) { t.Parallel(); testLongPollWakes(t, newStack(t, b)) })
			t.Run("LongPollEmptyAfterWait", func(t *testing.T) { t.Parallel(); testLongPollEmpty(t, newStack(t, b)) })
			t.Run("CursorContinues", func(t *testing.T) { t.Parallel(); testCursor(t, newStack(t, b)) })
			t.Run("Filters", func(t *testing.T) { t.Parallel(); testFilters(t, newStack(t, b)) })
			t.Run("Stream", func(t *testing.T) { t.Parallel(); testStackStream(t, newStack(t, b)) })
			t.Run("TenantsStatusRoundTrips", func(t *testing.T) { t.Parallel(); testStatusRoundTrips(t, b) })
		})
	}
}

// feed reads GET path as a feed page.
func (s *stack) feed(t *testing.T, path string) httpapi.Feed {
	t.Helper()
	a := serve(t, s.h, request{method: "GET", path: path})
	var f httpapi.Feed
	if err := json.Unmarshal(a.Body, &f); err != nil || a.Status != 200 {
		t.Fatalf("GET %s = %d %s", path, a.Status, a.Body)
	}
	return f
}

// awaitEvent reads the whole feed until an event of type typ is in it (the
// coordinator publishes in the background).
func (s *stack) awaitEvent(t *testing.T, typ, planID string) []httpapi.FeedEvent {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		evs := s.feed(t, "/v1/events?limit=1000").Events
		for _, ev := range evs {
			if ev.Type == typ && (planID == "" || ev.PlanID == planID) {
				return evs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s event (plan %q) in the feed after 15s: %+v", typ, planID, evs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func shortLease(fc *facade.Config, _ *redislock.Config) { fc.Lease = time.Second }

func testInstances(t *testing.T, b redistest.Backend) {
	client, prefix := b.New(t)
	a := newStackOn(t, client, prefix, "coord-a", httpapi.Config{}, shortLease,
		func(fc *facade.Config, _ *redislock.Config) { fc.Addr, fc.Version = "10.0.0.1:8080", "1.2.3" })
	other := newStackOn(t, client, prefix, "coord-b", httpapi.Config{}, shortLease)
	list := func() map[string]httpapi.Instance {
		a := serve(t, a.h, request{method: "GET", path: "/v1/instances"})
		var l httpapi.InstanceList
		if err := json.Unmarshal(a.Body, &l); err != nil || a.Status != 200 {
			t.Fatalf("GET /v1/instances = %d %s", a.Status, a.Body)
		}
		out := map[string]httpapi.Instance{}
		for _, in := range l.Instances {
			out[in.ID] = in
		}
		return out
	}
	await := func(what string, ok func(map[string]httpapi.Instance) bool) map[string]httpapi.Instance {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			m := list()
			if ok(m) {
				return m
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: instances %+v after 10s", what, m)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	m := await("both registered", func(m map[string]httpapi.Instance) bool { return m["coord-a"].Alive && m["coord-b"].Alive })
	if in := m["coord-a"]; in.Addr != "10.0.0.1:8080" || in.Version != "1.2.3" || in.StartedAt == nil || in.LastSeen == nil {
		t.Errorf("coord-a = %+v", in)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := other.coord.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// Stopped one lease ago: listed, not alive. The running one stays alive.
	await("coord-b dead after its lease", func(m map[string]httpapi.Instance) bool {
		_, listed := m["coord-b"]
		return listed && !m["coord-b"].Alive && m["coord-a"].Alive
	})
}

func testLongPollWakes(t *testing.T, s *stack) {
	cursor := s.feed(t, "/v1/events").NextCursor
	type result struct {
		a    answer
		took time.Duration
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		a := serve(t, s.h, request{method: "GET", path: "/v1/events?wait=30s&after=" + cursor})
		done <- result{a, time.Since(start)}
	}()
	time.Sleep(100 * time.Millisecond) // let the poll start waiting
	p := s.do(t, "POST", "/v1/plans", `{"name": "wake", "pipeline": "standard-deploy", "tenants": [{"tenantId": "t-wake"}]}`, 201)
	r := <-done
	var f httpapi.Feed
	if err := json.Unmarshal(r.a.Body, &f); err != nil || r.a.Status != 200 || len(f.Events) == 0 {
		t.Fatalf("long poll = %d %s", r.a.Status, r.a.Body)
	}
	// Woken by the event, long before its 30s wait ended.
	if r.took > 20*time.Second {
		t.Errorf("long poll answered after %s", r.took)
	}
	if ev := f.Events[0]; ev.PlanID != p["planId"] || f.NextCursor != f.Events[len(f.Events)-1].ID {
		t.Errorf("events %+v, next %s", f.Events, f.NextCursor)
	}
}

func testLongPollEmpty(t *testing.T, s *stack) {
	start := time.Now()
	f := s.feed(t, "/v1/events?wait=300ms")
	if took := time.Since(start); len(f.Events) != 0 || f.NextCursor != "0-0" || took < 250*time.Millisecond {
		t.Fatalf("empty long poll = %+v after %s, want no event after the 300ms wait", f, took)
	}
	f = s.feed(t, "/v1/events?after=$")
	if len(f.Events) != 0 || f.NextCursor != "0-0" {
		t.Fatalf("new events only = %+v", f)
	}
}

func testCursor(t *testing.T, s *stack) {
	s.do(t, "POST", "/v1/plans", `{"name": "c", "stages": [{"name": "a", "kind": "noop"}, {"name": "b", "kind": "noop"}],
		"tenants": [{"tenantId": "t-1"}, {"tenantId": "t-2"}, {"tenantId": "t-3"}]}`, 201)
	all := s.awaitEvent(t, "plan.completed", "")
	if len(all) < 10 {
		t.Fatalf("only %d events for a plan of 3 tasks of 2 stages: %+v", len(all), all)
	}
	var paged []string
	cursor := ""
	for range 100 {
		f := s.feed(t, "/v1/events?limit=2&after="+cursor)
		if len(f.Events) == 0 {
			if f.NextCursor != cursor {
				t.Fatalf("an empty page moved the cursor from %q to %q", cursor, f.NextCursor)
			}
			break
		}
		for _, ev := range f.Events {
			paged = append(paged, ev.ID)
		}
		cursor = f.NextCursor
	}
	var want []string
	for i, ev := range all {
		want = append(want, ev.ID)
		if i > 0 && !cursorLess(all[i-1].ID, ev.ID) {
			t.Errorf("event ids not increasing: %s then %s", all[i-1].ID, ev.ID)
		}
	}
	if strings.Join(paged, " ") != strings.Join(want, " ") {
		t.Fatalf("pages of 2 gave\n%v\nthe whole feed is\n%v", paged, want)
	}
}

// cursorLess compares two feed cursors <ms>-<seq>.
func cursorLess(a, b string) bool {
	var am, as, bm, bs uint64
	fmt.Sscanf(a, "%d-%d", &am, &as)
	fmt.Sscanf(b, "%d-%d", &bm, &bs)
	return am < bm || (am == bm && as < bs)
}

func testFilters(t *testing.T, s *stack) {
	p1 := s.do(t, "POST", "/v1/plans", `{"name": "f1", "pipeline": "standard-deploy", "tenants": [{"tenantId": "t-1"}, {"tenantId": "t-2"}]}`, 201)
	s.await(t, "/v1/plans/"+p1["planId"].(string), "status", "COMPLETED")
	p2 := s.do(t, "POST", "/v1/plans", `{"name": "f2", "pipeline": "standard-deploy", "tenants": [{"tenantId": "t-2"}]}`, 201)
	s.await(t, "/v1/plans/"+p2["planId"].(string), "status", "COMPLETED")
	// The feed is published in the background: wait for the last plan's
	// end, so that both plans' events are in it.
	all := s.awaitEvent(t, "plan.completed", p2["planId"].(string))
	tests := []struct {
		name  string
		query string
		keep  func(httpapi.FeedEvent) bool
	}{
		{"Tenant", "tenantId=t-2", func(ev httpapi.FeedEvent) bool { return ev.TenantID == "t-2" }},
		{"Type", "type=task.completed", func(ev httpapi.FeedEvent) bool { return ev.Type == "task.completed" }},
		{"Plan", "planId=" + p1["planId"].(string), func(ev httpapi.FeedEvent) bool { return ev.PlanID == p1["planId"] }},
		{"PlanAndType", "type=task.completed&planId=" + p2["planId"].(string),
			func(ev httpapi.FeedEvent) bool { return ev.Type == "task.completed" && ev.PlanID == p2["planId"] }},
	}
	for _, tt := range tests {
		// The feed may still receive the plans' last events: read the
		// filtered page first, then the whole feed, and compare up to the
		// filtered page's cursor.
		f := s.feed(t, "/v1/events?limit=1000&"+tt.query)
		var got, want []string
		for _, ev := range f.Events {
			got = append(got, ev.ID)
		}
		for _, ev := range s.feed(t, "/v1/events?limit=1000").Events {
			if tt.keep(ev) && !cursorLess(f.NextCursor, ev.ID) {
				want = append(want, ev.ID)
			}
		}
		if len(want) == 0 || strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: filtered %v, want %v (of %d events)", tt.name, got, want, len(all))
		}
	}
}

func testStackStream(t *testing.T, s *stack) {
	h := &served{h: s.h}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := openStream(t, srv, "/v1/events?after=$&type=task.completed", nil)
	s.do(t, "POST", "/v1/plans", `{"name": "s", "pipeline": "standard-deploy", "tenants": [{"tenantId": "t-s1"}, {"tenantId": "t-s2"}]}`, 201)
	got := map[string]bool{}
	for _, ev := range c.next(2) {
		if ev.Type != "task.completed" {
			t.Fatalf("stream delivered %+v", ev)
		}
		got[ev.Data.TenantID] = true
	}
	if !got["t-s1"] || !got["t-s2"] {
		t.Fatalf("completed tenants = %v", got)
	}
	// A read blocked in Redis does not see the client go; the handler ends
	// with its chunk.
	c.close()
	h.idle(t, httpapi.LongPollChunk+3*time.Second)
}

// testStatusRoundTrips asks the status of 1000 tenants: two Redis round
// trips, whatever the number of tenants.
func testStatusRoundTrips(t *testing.T, b redistest.Backend) {
	client, prefix := b.New(t)
	counter := &redistest.Counter{}
	client.AddHook(counter)
	s := newStackOn(t, client, prefix, "coord-a", httpapi.Config{},
		func(fc *facade.Config, _ *redislock.Config) { fc.Heartbeat = time.Hour }) // no background round trips
	ids := make([]string, httpapi.MaxStatusTenants-1) // and one without a task
	tenants := make([]string, len(ids))
	for i := range ids {
		ids[i] = fmt.Sprintf("t-%04d", i)
		tenants[i] = fmt.Sprintf(`{"tenantId": %q}`, ids[i])
	}
	s.do(t, "POST", "/v1/plans", `{"name": "many", "pipeline": "standard-deploy", "start": false, "tenants": [`+strings.Join(tenants, ",")+`]}`, 201)
	s.awaitEvent(t, "plan.created", "") // the feed publisher is done
	body, _ := json.Marshal(httpapi.TenantsStatusRequest{TenantIDs: append(ids[1:], "t-none", ids[0])})
	var a answer
	trips := counter.Count(func() { a = serve(t, s.h, request{method: "POST", path: "/v1/tenants:status", body: string(body)}) })
	var st httpapi.TenantsStatus
	if err := json.Unmarshal(a.Body, &st); err != nil || a.Status != 200 {
		t.Fatalf("tenants:status = %d %.300s", a.Status, a.Body)
	}
	if len(st.Tasks) != httpapi.MaxStatusTenants || st.Tasks["t-none"] != nil || st.Tasks["t-0000"] == nil || st.Tasks["t-0998"].Status != "PENDING" {
		t.Fatalf("%d tasks, t-none %v, t-0000 %v", len(st.Tasks), st.Tasks["t-none"], st.Tasks["t-0000"])
	}
	if trips != 2 {
		t.Fatalf("tenants:status of %d tenants took %d round trips, want 2", httpapi.MaxStatusTenants, trips)
	}
}
