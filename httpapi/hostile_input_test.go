package httpapi_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// The house rule: bad input gets a clear error and changes nothing. These
// tests send hostile path ids, malformed, mistyped, oversized and hostile
// bodies, wrong media types and bad query values to every route of the API
// over a real coordinator on a real Redis, and check that each is answered
// with a 4xx problem whose code is stable and whose detail echoes no raw
// control character, and that nothing under the test's key prefix changed:
// the same keys with the same values (DUMP) — the plan record, its task
// records, the tenant lock and its fence, the checkpoints, the indexes.
//
// Two things do change, by design, and are checked for what they are
// rather than forbidden:
//
//   - every refused POST or DELETE (but the read-only POST
//     /v1/tenants:status) appends one operator.refused event to the event
//     stream (docs/operations.md, "Logs"): the stream must grow by exactly
//     that one event per such request, carrying the request's id, and by
//     nothing for every other request; its fields must hold no raw control
//     character and no invalid plan or tenant id. The publisher batches
//     events asynchronously, so the stream is checked once all requests of
//     a fixture were sent (the Feed subtests), event by event, by request
//     id;
//   - the instance registry (instances, instance:{id}) is rewritten by the
//     coordinator's heartbeat: its keys must stay, their values are not
//     compared.

// hostileInstance is the coordinator instance of the fixtures.
const hostileInstance = "coord-h"

// The tenants of a hostile fixture, and a body its actions would accept.
const (
	hxTenant  = "t-h1"    // a PENDING task of the CREATED plan
	hxTenant2 = "t-h2"    // another PENDING task of it
	hxFailed  = "t-hfail" // a FAILED task (its plan is finished)
	hxLocked  = "t-hlock" // a tenant whose lock is held
	hxReason  = `{"reason": "INC-7 hostile input test"}`
	// hxRetryPlan is a bulk retry body (of the FAILED plan's failed task).
	hxRetryPlan = `{"reason": "INC-7 hostile input test", "statuses": ["FAILED"]}`
)

// hxFixture is a real coordinator on a fresh key prefix of the real Redis,
// with state a hostile request could damage: a CREATED plan (start, cancel
// would change it), its PENDING tasks (cancel would change them), a FAILED
// task (retry would re-run it), a held tenant lock (release would delete
// it).
type hxFixture struct {
	s       *stack
	client  redis.UniversalClient
	prefix  string
	planID  string // the CREATED plan
	failed  string // the finished (FAILED) plan
	taskID  string // task of hxTenant
	failTID string // task of hxFailed
	fence   int64  // fence of hxLocked's lock

	// feedBase is the last stream entry id when the fixture was ready.
	feedBase string
	// base is the state the next request must leave unchanged.
	base hxState

	mu   sync.Mutex
	sent []hxSent
}

// hxSent is a request sent to a fixture, to match feed events to.
type hxSent struct {
	name      string
	requestID string
	// refusal is set when the request must have made one operator.refused
	// event (a refused mutating request on a matched route).
	refusal bool
}

func newHxFixture(t *testing.T) *hxFixture {
	t.Helper()
	client, prefix := redistest.Real(t)
	f := &hxFixture{client: client, prefix: prefix}
	f.s = newStackOn(t, client, prefix, hostileInstance, httpapi.Config{RateLimit: -1},
		func(fc *facade.Config, _ *redislock.Config) { fc.Lease = time.Minute })
	s := f.s

	// A FAILED task: one http stage pushing to the stack's target, which
	// fails the tenant.
	s.failing.Store(hxFailed)
	spec := fmt.Sprintf(`{"name": "hostile-failed", "stages": [{"name": "push", "kind": "http", "retry": {"maxAttempts": 1},
		"http": {"method": "POST", "url": "%s/tenants/{{.TenantID}}/push", "successStatus": [200]}}],
		"tenants": [{"tenantId": %q}]}`, s.target.URL, hxFailed)
	f.failed = s.do(t, "POST", "/v1/plans", spec, 201)["planId"].(string)
	f.failTID = s.await(t, "/v1/tenants/"+hxFailed+"/task", "status", "FAILED")["taskId"].(string)
	s.await(t, "/v1/plans/"+f.failed, "status", "FAILED")

	// A CREATED plan with two PENDING tasks.
	p := s.do(t, "POST", "/v1/plans", fmt.Sprintf(`{"name": "hostile-target", "pipeline": "standard-deploy",
		"tenants": [{"tenantId": %q}, {"tenantId": %q}], "start": false}`, hxTenant, hxTenant2), 201)
	f.planID = p["planId"].(string)
	tk := s.do(t, "GET", "/v1/tenants/"+hxTenant+"/task", "", 200)
	f.taskID = tk["taskId"].(string)
	if p["status"] != "CREATED" || tk["status"] != "PENDING" {
		t.Fatalf("fixture: plan %v, task %v", p["status"], tk["status"])
	}

	// A held tenant lock (the lease outlives the test; released at the end).
	lease, err := s.locks.Acquire(context.Background(), hxLocked, tenantlock.Holder{
		PlanID: f.planID, TaskID: task.NewID(time.Now()), Instance: "coord-x"})
	if err != nil {
		t.Fatalf("fixture: lock: %v", err)
	}
	t.Cleanup(func() { _ = lease.Release(context.Background()) })
	f.fence = lease.Fence()

	f.base = f.quiesce(t)
	f.feedBase = f.base.lastEvent
	return f
}

// hxState is what a fixture holds in Redis.
type hxState struct {
	// values maps every key under the prefix to its DUMP and whether it has
	// a TTL ("" for the keys whose value is not compared).
	values    map[string]string
	xlen      int64
	lastEvent string
}

// registry reports whether key is one of the instance registry's keys, which
// the heartbeat rewrites.
func (f *hxFixture) registry(key string) bool {
	rest := strings.TrimPrefix(key, f.prefix)
	return rest == "instances" || strings.HasPrefix(rest, "instance:{")
}

func (f *hxFixture) events() string { return f.prefix + "events" }

func (f *hxFixture) state(t *testing.T) hxState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []string
	iter := f.client.Scan(ctx, 0, f.prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN %s*: %v", f.prefix, err)
	}
	pp := f.client.Pipeline()
	dumps := make(map[string]*redis.StringCmd, len(keys))
	ttls := make(map[string]*redis.DurationCmd, len(keys))
	for _, k := range keys {
		if f.registry(k) || k == f.events() {
			continue
		}
		dumps[k] = pp.Dump(ctx, k)
		ttls[k] = pp.PTTL(ctx, k)
	}
	xlen := pp.XLen(ctx, f.events())
	last := pp.XRevRangeN(ctx, f.events(), "+", "-", 1)
	if _, err := pp.Exec(ctx); err != nil && err != redis.Nil {
		t.Fatalf("snapshot of %s*: %v", f.prefix, err)
	}
	st := hxState{values: make(map[string]string, len(keys)), xlen: xlen.Val()}
	if msgs := last.Val(); len(msgs) == 1 {
		st.lastEvent = msgs[0].ID
	}
	for _, k := range keys {
		v := ""
		if d, ok := dumps[k]; ok {
			// A key gone between SCAN and DUMP reads as redis.Nil: "".
			v = hex.EncodeToString([]byte(d.Val())) + fmt.Sprintf(" ttl=%t", ttls[k].Val() > 0)
		}
		st.values[k] = v
	}
	return st
}

// quiesce waits until nothing under the prefix changes for a while (the
// setup's events are published, its writes landed) and returns the state.
func (f *hxFixture) quiesce(t *testing.T) hxState {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	prev := f.state(t)
	stable := 0
	for stable < 3 {
		time.Sleep(40 * time.Millisecond)
		cur := f.state(t)
		if cur.xlen == prev.xlen && cur.lastEvent == prev.lastEvent && len(f.diff(prev, cur, nil)) == 0 {
			stable++
		} else {
			stable = 0
		}
		prev = cur
		if time.Now().After(deadline) {
			t.Fatalf("the fixture's Redis state did not settle in 10s")
		}
	}
	return prev
}

// label names the fixture's records in diffs.
func (f *hxFixture) label(key string) string {
	rest := strings.TrimPrefix(key, f.prefix)
	switch {
	case rest == "plan:{"+f.planID+"}":
		return key + " (the CREATED plan's record)"
	case strings.HasPrefix(rest, "plan:{"+f.planID+"}"):
		return key + " (the CREATED plan)"
	case rest == "task:{"+hxTenant+"}:"+f.taskID:
		return key + " (the PENDING task's record)"
	case rest == "task:{"+hxFailed+"}:"+f.failTID:
		return key + " (the FAILED task's record)"
	case rest == "lock:tenant:{"+hxLocked+"}" || rest == "fence:tenant:{"+hxLocked+"}":
		return key + " (the held tenant lock)"
	}
	return key
}

// diff lists what changed from a to b; allow, when set, says which new keys
// may appear.
func (f *hxFixture) diff(a, b hxState, allow func(key string) bool) []string {
	var out []string
	for k, v := range b.values {
		old, ok := a.values[k]
		switch {
		case !ok && allow != nil && allow(k):
		case !ok:
			out = append(out, "new key "+f.label(k))
		case old != v:
			out = append(out, "changed "+f.label(k))
		}
	}
	for k := range a.values {
		if _, ok := b.values[k]; !ok {
			out = append(out, "deleted "+f.label(k))
		}
	}
	sort.Strings(out)
	return out
}

// hxCase is one hostile request and the answers it may get.
type hxCase struct {
	name   string
	method string
	path   string // escaped, as sent
	body   string
	// big, when set, is the body (too large to build per case).
	big *string
	// chunked hides the body's length (Content-Length unknown).
	chunked bool
	// ctype is the Content-Type: "" means application/json when there is a
	// body, hxNoCT none.
	ctype  string
	header map[string]string
	// want lists the statuses and codes the answer may have.
	want []hxWant
	// idem allows the one Idempotency-Key record a kept 4xx answer makes
	// (see the idempotent middleware) and checks its replay.
	idem bool
	// check, when set, checks more of the answer.
	check func(t *testing.T, a answer)
}

const hxNoCT = "-"

type hxWant struct {
	status int
	code   string
}

var (
	hxBad      = []hxWant{{400, httpapi.CodeInvalidArgument}}
	hxTooLarge = []hxWant{{413, httpapi.CodePayloadTooLarge}}
	hxMedia    = []hxWant{{415, httpapi.CodeUnsupportedMediaType}}
	// hxNoRoute: an empty or path-breaking id may leave the route
	// unmatched.
	hxNoRoute = []hxWant{{400, httpapi.CodeInvalidArgument}, {404, httpapi.CodeNotFound}, {405, httpapi.CodeMethodNotAllowed}}
)

// send sends c to the fixture's API.
func (f *hxFixture) send(t *testing.T, c hxCase) answer {
	t.Helper()
	var body io.Reader
	switch {
	case c.big != nil:
		body = strings.NewReader(*c.big)
	case c.body != "":
		body = strings.NewReader(c.body)
	}
	if c.chunked && body != nil {
		body = struct{ io.Reader }{body} // no Len: Content-Length -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, c.method, c.path, body)
	switch {
	case c.ctype == hxNoCT:
	case c.ctype != "":
		req.Header.Set("Content-Type", c.ctype)
	case body != nil:
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	f.s.h.ServeHTTP(rec, req)
	a := answer{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
	conform(t, httptest.NewRequest(c.method, c.path, nil), a.Status, a.Header, a.Body)
	return a
}

// run sends c and checks the answer and that Redis did not change.
func (f *hxFixture) run(t *testing.T, c hxCase) {
	t.Helper()
	a := f.send(t, c)
	f.note(c, a)
	f.checkAnswer(t, c, a)
	if c.check != nil {
		c.check(t, a)
	}

	var allow func(string) bool
	if c.idem {
		allow = func(k string) bool { return strings.HasPrefix(k, f.prefix+"idem:") }
	}
	after := f.state(t)
	if d := f.diff(f.base, after, allow); len(d) > 0 {
		t.Errorf("%s %s answered %d but changed Redis:\n  %s\nanswer: %.500s", c.method, c.path, a.Status, strings.Join(d, "\n  "), a.Body)
	}
	f.base = after

	if c.idem && a.Status >= 400 && a.Status < 500 {
		// The kept answer is replayed, and the replay changes nothing either.
		again := f.send(t, c)
		f.note(c, again)
		if again.Status != a.Status || string(again.Body) != string(a.Body) || again.Header.Get(httpapi.HeaderIdempotentReplayed) != "true" {
			t.Errorf("replay = %d (replayed %q) %s, want the first answer %d %s", again.Status,
				again.Header.Get(httpapi.HeaderIdempotentReplayed), again.Body, a.Status, a.Body)
		}
		after := f.state(t)
		if d := f.diff(f.base, after, nil); len(d) > 0 {
			t.Errorf("the replay changed Redis:\n  %s", strings.Join(d, "\n  "))
		}
		f.base = after
	}
}

// note records a request for the feed check.
func (f *hxFixture) note(c hxCase, a answer) {
	path, _, _ := strings.Cut(c.path, "?")
	mutating := (c.method == http.MethodPost || c.method == http.MethodDelete) && path != "/v1/tenants:status"
	// A request whose route did not match (404 "no such route", 405) is not
	// an operator action.
	matched := a.Status != http.StatusMethodNotAllowed && !(a.Status == http.StatusNotFound && strings.Contains(string(a.Body), "no such route"))
	f.mu.Lock()
	f.sent = append(f.sent, hxSent{name: c.name, requestID: a.Header.Get(httpapi.HeaderRequestID), refusal: mutating && matched && a.Status >= 400})
	f.mu.Unlock()
}

// hxHostileRune reports a rune a problem detail must not carry raw: control
// characters (C0, DEL, C1), line and paragraph separators and bidi controls.
func hxHostileRune(r rune) bool {
	return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || (r >= '\u202a' && r <= '\u202e') ||
		(r >= '\u2066' && r <= '\u2069') || r == '\ufeff'
}

func (f *hxFixture) checkAnswer(t *testing.T, c hxCase, a answer) {
	t.Helper()
	ok := false
	for _, w := range c.want {
		ok = ok || a.Status == w.status
	}
	if !ok {
		note := ""
		switch {
		case a.Status < 400:
			note = " — hostile input ACCEPTED"
		case a.Status >= 500:
			note = " — hostile input answered with a server error"
		}
		t.Errorf("%s %s with body %.200q = %d, want one of %v%s; answer %.1000s", c.method, c.path, c.body, a.Status, c.want, note, a.Body)
		return
	}
	if c.method == http.MethodHead {
		if len(a.Body) != 0 {
			t.Errorf("HEAD answer has a body: %q", a.Body)
		}
		return
	}
	if ct := a.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json; body %.500s", ct, a.Body)
		return
	}
	trimmed := strings.TrimSuffix(string(a.Body), "\n")
	if i := strings.IndexFunc(trimmed, func(r rune) bool { return r < 0x20 || r == 0x7f }); i >= 0 {
		t.Errorf("problem body holds a raw control byte at %d: %q", i, a.Body)
	}
	var p httpapi.Problem
	dec := json.NewDecoder(strings.NewReader(string(a.Body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Errorf("problem body %q: %v", a.Body, err)
		return
	}
	codeOK := false
	for _, w := range c.want {
		codeOK = codeOK || (a.Status == w.status && p.Code == w.code)
	}
	if !codeOK || p.Status != a.Status || p.Type != "about:blank" || p.Title != http.StatusText(a.Status) {
		t.Errorf("problem = %+v, want one of %v", p, c.want)
	}
	if p.RequestID == "" || p.RequestID != a.Header.Get(httpapi.HeaderRequestID) {
		t.Errorf("problem requestId %q, header %q", p.RequestID, a.Header.Get(httpapi.HeaderRequestID))
	}
	if strings.TrimSpace(p.Detail) == "" {
		t.Errorf("problem has no detail: %s", a.Body)
	}
	if i := strings.IndexFunc(p.Detail, hxHostileRune); i >= 0 {
		t.Errorf("detail echoes a raw control character (%U at byte %d): %q", []rune(p.Detail[i:])[0], i, p.Detail)
	}
	if len(p.Detail) > 2100 {
		t.Errorf("detail of %d bytes", len(p.Detail))
	}
}

// checkFeed waits for the event publisher and checks every event appended
// since the fixture was ready: exactly one operator.refused event per
// refused mutating request, none for anything else, each carrying only
// valid ids and no raw control characters.
func (f *hxFixture) checkFeed(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	sent := slices.Clone(f.sent)
	f.mu.Unlock()
	want := 0
	byID := make(map[string]hxSent, len(sent))
	for _, s := range sent {
		byID[s.requestID] = s
		if s.refusal {
			want++
		}
	}
	ctx := context.Background()
	read := func() []redis.XMessage {
		start := "-"
		if f.feedBase != "" {
			start = "(" + f.feedBase
		}
		msgs, err := f.client.XRange(ctx, f.events(), start, "+").Result()
		if err != nil {
			t.Fatalf("XRANGE %s: %v", f.events(), err)
		}
		return hxFeedEvents(t, msgs)
	}
	// The publisher sends every 20ms; wait until the expected number of
	// events arrived and nothing more came for a while.
	deadline := time.Now().Add(10 * time.Second)
	msgs := read()
	for stable := 0; stable < 3 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		next := read()
		if len(next) == len(msgs) && len(next) >= want {
			stable++
		} else {
			stable = 0
		}
		msgs = next
	}
	got := map[string]int{}
	for _, m := range msgs {
		typ, _ := m.Values["type"].(string)
		planID, _ := m.Values["planId"].(string)
		tenantID, _ := m.Values["tenantId"].(string)
		taskID, _ := m.Values["taskId"].(string)
		rawData, _ := m.Values["data"].(string)
		var data map[string]any
		if rawData != "" {
			if err := json.Unmarshal([]byte(rawData), &data); err != nil {
				t.Errorf("event %s: data is not JSON: %v: %q", m.ID, err, rawData)
			}
		}
		rid, _ := data["requestId"].(string)
		s, known := byID[rid]
		name := s.name
		if !known {
			name = "(an event of no request, requestId " + task.Quote(rid) + ": the work of an accepted hostile request?)"
		}
		got[rid]++
		if typ != facade.EventOperatorRefused {
			t.Errorf("%s: hostile request made a %s event: %v", name, typ, m.Values)
			continue
		}
		if !s.refusal {
			t.Errorf("%s: made an %s event but it was not a refused operator action: %v", name, typ, m.Values)
		}
		if planID != "" && !plan.ValidID(planID) || tenantID != "" && !task.ValidTenantID(tenantID) || taskID != "" && !task.ValidID(taskID) {
			t.Errorf("%s: the operator.refused event carries an invalid id: %v", name, m.Values)
		}
		for k, v := range data {
			if str, ok := v.(string); ok && strings.IndexFunc(str, hxHostileRune) >= 0 {
				t.Errorf("%s: the operator.refused event stored in Redis carries raw control characters in data.%s: %q (event %s)",
					name, k, str, m.ID)
			}
		}
	}
	for _, s := range sent {
		if n := got[s.requestID]; s.refusal && n != 1 {
			t.Errorf("%s: %d operator.refused events for request %s, want 1", s.name, n, s.requestID)
		}
	}
}

// hxRoute is a route with a path parameter and a request it serves.
type hxRoute struct {
	method, prefix, suffix string
	body                   string
}

func (r hxRoute) name() string {
	param := "{planId}"
	switch r.prefix {
	case "/v1/tenants/":
		param = "{tenantId}"
	case "/v1/tasks/":
		param = "{taskId}"
	}
	return r.method + "_" + r.prefix + param + r.suffix
}

// hxIDRoutes are every route with a path id.
func hxIDRoutes() []hxRoute {
	return []hxRoute{
		{"GET", "/v1/plans/", "", ""},
		{"GET", "/v1/plans/", "/tasks", ""},
		{"POST", "/v1/plans/", "/start", hxReason},
		{"POST", "/v1/plans/", "/pause", hxReason},
		{"POST", "/v1/plans/", "/resume", hxReason},
		{"POST", "/v1/plans/", "/cancel", hxReason},
		{"POST", "/v1/plans/", "/repair-counts", hxReason},
		{"POST", "/v1/plans/", "/retry", hxRetryPlan},
		{"GET", "/v1/tenants/", "/task", ""},
		{"GET", "/v1/tenants/", "/checkpoint", ""},
		{"HEAD", "/v1/tenants/", "/checkpoint", ""},
		{"GET", "/v1/tenants/", "/history", ""},
		{"GET", "/v1/tenants/", "/timeline", ""},
		{"POST", "/v1/tenants/", "/retry", hxReason},
		{"POST", "/v1/tenants/", "/pause", hxReason},
		{"POST", "/v1/tenants/", "/resume", hxReason},
		{"POST", "/v1/tenants/", "/cancel", hxReason},
		{"GET", "/v1/tenants/", "/lock", ""},
		{"DELETE", "/v1/tenants/", "/lock", `{"reason": "INC-7", "expectedFence": 1}`},
		{"GET", "/v1/tasks/", "", ""},
	}
}

// hxIDs are hostile path ids, escaped as sent on the wire, and whether the
// route may go unmatched.
func hxIDs() []struct {
	name, raw string
	noRoute   bool
} {
	return []struct {
		name, raw string
		noRoute   bool
	}{
		{"Braces", "a{b}", false},
		{"BracesEscaped", "a%7Bb%7D", false},
		{"HashTagOfAnotherTenant", "x%7Bt-h1%7D", false},
		{"Colon", "a:b", false},
		{"KeySeparatorOfTask", "t-h1:task-01", false},
		{"GlobStar", "a*", false},
		{"GlobStarEscaped", "a%2A", false},
		{"GlobQuestion", "a%3Fb", false},
		{"GlobClass", "a[0]", false},
		{"GlobClassEscaped", "a%5B0%5D", false},
		{"NUL", "a%00b", false},
		{"Newline", "a%0Ab", false},
		{"CRLFInjection", "a%0D%0AX-Injected:%201", false},
		{"Escape", "a%1B%5B31mred", false},
		{"Tab", "a%09b", false},
		{"DEL", "a%7F", false},
		{"C1NextLine", "a%C2%85b", false},
		{"BidiOverride", "a%E2%80%AEb", false},
		{"InvalidUTF8", "a%FF%FE", false},
		{"Long300", strings.Repeat("a", 300), false},
		{"Long300Braces", strings.Repeat("a{", 150), false},
		{"Empty", "", true},
		{"Space", "%20", false},
		{"Unicode", "t-%C3%A9", false},
		{"UnicodeRaw", "t-é", false},
		{"Fullwidth", "%EF%BD%94-1", false},
		{"DotDot", "..", true},
		{"Dot", ".", true},
		{"DotDotEscaped", "%2E%2E", true},
		{"TraversalEscaped", "..%2F..%2Fetc", false},
		{"SlashEscaped", "a%2Fb", false},
		{"Percent", "a%25b", false},
		{"LeadingDash", "-a", false},
	}
}

// hxIDCases: every route with a path id × every hostile id, with a body
// that would be accepted for a good id.
func hxIDCases() []hxCase {
	var out []hxCase
	for _, rt := range hxIDRoutes() {
		for _, id := range hxIDs() {
			want := hxBad
			if id.noRoute {
				want = hxNoRoute
			}
			out = append(out, hxCase{
				name: "PathID/" + rt.name() + "/" + id.name, method: rt.method,
				path: rt.prefix + id.raw + rt.suffix, body: rt.body, want: want,
			})
		}
		// Valid ids of another kind are not this route's ids.
		var others []struct{ name, raw string }
		switch rt.prefix {
		case "/v1/plans/":
			others = []struct{ name, raw string }{
				{"TenantID", hxTenant}, {"LowercaseULID", "plan-01jdqzv5x8m7r2k9c3b4n6p0qs"},
				{"TaskID", "task-01JDQZV5X8M7R2K9C3B4N6P0QS"}, {"ULIDWithI", "plan-01JDQZV5X8M7R2K9C3B4N6P0QI"},
				{"ULIDTooLong", "plan-01JDQZV5X8M7R2K9C3B4N6P0QSS"},
			}
		case "/v1/tasks/":
			others = []struct{ name, raw string }{
				{"TenantID", hxTenant}, {"LowercaseULID", "task-01jdqzv5x8m7r2k9c3b4n6p0qs"},
				{"PlanID", "plan-01JDQZV5X8M7R2K9C3B4N6P0QS"}, {"ULIDWithI", "task-01JDQZV5X8M7R2K9C3B4N6P0QI"},
				{"ULIDTooLong", "task-01JDQZV5X8M7R2K9C3B4N6P0QSS"},
			}
		}
		for _, id := range others {
			out = append(out, hxCase{
				name: "PathID/" + rt.name() + "/" + id.name, method: rt.method,
				path: rt.prefix + id.raw + rt.suffix, body: rt.body, want: hxBad,
			})
		}
	}
	return out
}

// hxBodyRoute is a route taking a JSON body, on the fixture's records.
type hxBodyRoute struct {
	name, method, path string
	good               string // a body that would be accepted
	// fields lists each field of the body with values of a wrong JSON type.
	fields map[string][]string
	limit  int // the route's body limit
}

func (f *hxFixture) hxBodyRoutes() []hxBodyRoute {
	pp := "/v1/plans/" + f.planID
	reasonOnly := map[string][]string{"reason": {`7`, `true`, `["r"]`, `{"r": 1}`, `1.5`}}
	small := httpapi.MaxSmallBodyBytesDefault
	return []hxBodyRoute{
		{"CreatePlan", "POST", "/v1/plans",
			`{"name": "hostile", "pipeline": "standard-deploy", "tenants": [{"tenantId": "t-new"}], "start": false}`,
			map[string][]string{
				"name": {`5`, `["n"]`}, "pipeline": {`[]`, `1`}, "stages": {`{}`, `"noop"`, `[5]`, `[[]]`},
				"tenants": {`{}`, `"t-new"`, `[5]`, `[{"tenantId": 5}]`, `[{"tenantId": "t-new", "params": []}]`},
				"params":  {`[]`, `"v"`}, "maxConcurrency": {`"5"`, `1.5`, `1e400`, `99999999999999999999`},
				"onTenantLocked": {`5`, `["fail"]`}, "lockWait": {`"soon"`, `true`, `{}`, `1e400`},
				"failureThreshold": {`5`, `{"maxFailed": "1"}`, `{"maxFailed": 1, "x": 1}`}, "start": {`"false"`, `0`},
			}, httpapi.MaxBodyBytesDefault},
		{"StartPlan", "POST", pp + "/start", hxReason, reasonOnly, small},
		{"PausePlan", "POST", pp + "/pause", hxReason, reasonOnly, small},
		{"ResumePlan", "POST", pp + "/resume", hxReason,
			map[string][]string{"reason": reasonOnly["reason"], "includeOrphaned": {`"true"`, `1`, `[]`}}, small},
		{"CancelPlan", "POST", pp + "/cancel", hxReason, reasonOnly, small},
		{"RepairCounts", "POST", pp + "/repair-counts", hxReason, reasonOnly, small},
		{"RetryPlan", "POST", "/v1/plans/" + f.failed + "/retry", hxRetryPlan,
			map[string][]string{
				"reason":   reasonOnly["reason"],
				"statuses": {`"FAILED"`, `[1]`, `{}`, `[["FAILED"]]`, `true`, `{"FAILED": true}`},
				"orphaned": {`"true"`, `1`, `[]`}, "tenants": {`"t-hfail"`, `[1]`, `{}`, `[["t-hfail"]]`, `true`},
				"fromCheckpoint": {`"true"`, `1`}, "fromStage": {`5`, `["push"]`}, "dryRun": {`"true"`, `0`},
			}, httpapi.MaxRetryPlanBodyBytes},
		{"TenantsStatus", "POST", "/v1/tenants:status", `{"tenantIds": ["t-h1"]}`,
			map[string][]string{"tenantIds": {`"t-h1"`, `[1]`, `{"t-h1": true}`, `[["t-h1"]]`, `true`}}, 256 << 10},
		{"RetryTask", "POST", "/v1/tenants/" + hxFailed + "/retry", hxReason,
			map[string][]string{
				"reason": reasonOnly["reason"], "fromCheckpoint": {`"true"`, `1`}, "fromStage": {`5`, `["push"]`},
				"skipStage": {`"yes"`, `1`}, "outputs": {`[]`, `"x"`, `5`}, "dryRun": {`"true"`, `0`},
				"expectedAttempt": {`"1"`, `1.5`, `1e400`, `99999999999999999999`, `true`},
			}, small},
		{"PauseTask", "POST", "/v1/tenants/" + hxTenant + "/pause", hxReason, reasonOnly, small},
		{"ResumeTask", "POST", "/v1/tenants/" + hxTenant + "/resume", hxReason, reasonOnly, small},
		{"CancelTask", "POST", "/v1/tenants/" + hxTenant + "/cancel", hxReason, reasonOnly, small},
		{"ReleaseLock", "DELETE", "/v1/tenants/" + hxLocked + "/lock", fmt.Sprintf(`{"reason": "INC-7", "expectedFence": %d}`, f.fence),
			map[string][]string{
				"reason":        reasonOnly["reason"],
				"expectedFence": {fmt.Sprintf(`"%d"`, f.fence), fmt.Sprintf(`%d.5`, f.fence), `1e3`, `9223372036854775808`, `true`, `[1]`},
			}, small},
	}
}

// withField returns good with field set to raw (a JSON value).
func withField(good, field, raw string) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(good), &m); err != nil {
		panic(err)
	}
	m[field] = json.RawMessage(raw)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q: %s", k, m[k])
	}
	b.WriteByte('}')
	return b.String()
}

// hxBodyCases: malformed bodies, wrong types for every field, unknown
// fields, media types, query parameters and oversized bodies on every route
// taking a body, aimed at the fixture's records.
func (f *hxFixture) hxBodyCases(big map[int]*string) []hxCase {
	var out []hxCase
	for _, rt := range f.hxBodyRoutes() {
		add := func(name, body, ctype string, want []hxWant) {
			out = append(out, hxCase{name: "Body/" + rt.name + "/" + name, method: rt.method, path: rt.path, body: body, ctype: ctype, want: want})
		}
		good := rt.good
		trunc := strings.TrimSuffix(good, "}")
		add("Empty", "", "application/json", hxBad)
		add("Whitespace", " \n\t ", "", hxBad)
		add("TruncatedObject", trunc, "", hxBad)
		add("TruncatedString", good[:strings.LastIndex(good, `"`)], "", hxBad)
		add("OpenBrace", "{", "", hxBad)
		add("Array", "["+good+"]", "", hxBad)
		add("EmptyArray", "[]", "", hxBad)
		add("Null", "null", "", hxBad)
		add("String", `"`+strings.ReplaceAll(good, `"`, `\"`)+`"`, "", hxBad)
		add("Number", "42", "", hxBad)
		add("TrailingGarbage", good+" x", "", hxBad)
		add("TrailingObject", good+good, "", hxBad)
		add("TrailingBracket", good+"]", "", hxBad)
		add("TrailingNUL", good+"\x00", "", hxBad)
		add("LeadingBOM", "\ufeff"+good, "", hxBad)
		add("SingleQuotes", strings.ReplaceAll(good, `"`, `'`), "", hxBad)
		add("Comment", "/* c */"+good, "", hxBad)
		add("NaN", withField(good, "x", "NaN"), "", hxBad)
		add("UnknownField", withField(good, "bogus", "1"), "", hxBad)
		add("UnknownFieldHostileName", strings.Replace(good, "{", `{"a\u0000{b}*\u001b[31m\n": 1, `, 1), "", hxBad)
		add("UnknownFieldInvalidUTF8Name", strings.Replace(good, "{", "{\"\xff\xfe\": 1, ", 1), "", hxBad)
		add("UnknownFieldLongName", withField(good, strings.Repeat("x", 5000), "1"), "", hxBad)
		add("ControlCharInJSON", strings.Replace(good, `"`, "\"\x01", 1), "", hxBad)
		fields := make([]string, 0, len(rt.fields))
		for k := range rt.fields {
			fields = append(fields, k)
		}
		sort.Strings(fields)
		for _, field := range fields {
			for i, v := range rt.fields[field] {
				add(fmt.Sprintf("WrongType/%s/%d", field, i), withField(good, field, v), "", hxBad)
			}
		}
		// Media types.
		add("ContentType/None", good, hxNoCT, hxMedia)
		add("ContentType/TextPlain", good, "text/plain", hxMedia)
		add("ContentType/Form", "reason=INC-7", "application/x-www-form-urlencoded", hxMedia)
		add("ContentType/Multipart", good, "multipart/form-data; boundary=x", hxMedia)
		add("ContentType/Latin1", good, "application/json; charset=latin1", hxMedia)
		add("ContentType/JSONSeq", good, "application/json-seq", hxMedia)
		add("ContentType/Malformed", good, "application/json; charset", hxMedia)
		add("ContentType/DuplicateParam", good, "application/json; charset=utf-8; charset=latin1", hxMedia)
		add("ContentType/NUL", good, "application/json\x00", hxMedia)
		// Query parameters: these routes take none.
		for _, q := range []struct{ name, raw string }{
			{"Unknown", "force=true"}, {"HostileName", "a%7Bb%7D%00=1"}, {"Malformed", "x=%zz"},
		} {
			out = append(out, hxCase{name: "Body/" + rt.name + "/Query/" + q.name, method: rt.method, path: rt.path + "?" + q.raw, body: good, want: hxBad})
		}
		// Over the body limit: with its length announced, and streamed.
		b, ok := big[rt.limit]
		if !ok {
			s := `{"reason": "` + strings.Repeat("a", rt.limit) + `"}`
			b = &s
			big[rt.limit] = b
		}
		for _, chunked := range []bool{false, true} {
			name := "TooLarge/ContentLength"
			if chunked {
				name = "TooLarge/Chunked"
			}
			out = append(out, hxCase{name: "Body/" + rt.name + "/" + name, method: rt.method, path: rt.path, big: b, chunked: chunked, want: hxTooLarge})
		}
	}
	return out
}

// hxValueCases: well-formed bodies holding hostile or out-of-range values,
// which reach the coordinator; it must refuse them before it writes.
func (f *hxFixture) hxValueCases() []hxCase {
	var out []hxCase
	add := func(name, method, path, body string) {
		out = append(out, hxCase{name: "Value/" + name, method: method, path: path, body: body, want: hxBad})
	}
	pp := "/v1/plans/" + f.planID
	reasons := []struct{ name, raw string }{
		{"Missing", `{}`},
		{"Null", `{"reason": null}`},
		{"Empty", `{"reason": ""}`},
		{"NUL", `{"reason": "INC-7\u0000"}`},
		{"Newline", `{"reason": "INC-7\nforged log line"}`},
		{"CRLF", `{"reason": "INC-7\r\nX-Injected: 1"}`},
		{"Escape", `{"reason": "INC-7\u001b[2J\u001b[31mred"}`},
		{"DEL", `{"reason": "INC-7\u007f"}`},
		{"C1", `{"reason": "INC-7\u0085\u009b31m"}`},
		{"TooLong", `{"reason": "` + strings.Repeat("r", 501) + `"}`},
		{"TooLongNearBodyLimit", `{"reason": "` + strings.Repeat("r", 60<<10) + `"}`},
		// Not UTF-8, so not JSON (RFC 8259 section 8.1); the API accepts
		// only utf-8 and plan.CheckReason refuses invalid UTF-8.
		{"InvalidUTF8", "{\"reason\": \"INC-7 \xff\xfe\"}"},
	}
	for _, r := range reasons {
		add("StartPlan/Reason/"+r.name, "POST", pp+"/start", r.raw)
		add("PausePlan/Reason/"+r.name, "POST", pp+"/pause", r.raw)
		add("ResumePlan/Reason/"+r.name, "POST", pp+"/resume", r.raw)
		add("CancelPlan/Reason/"+r.name, "POST", pp+"/cancel", r.raw)
		add("RepairCounts/Reason/"+r.name, "POST", pp+"/repair-counts", r.raw)
		add("RetryTask/Reason/"+r.name, "POST", "/v1/tenants/"+hxFailed+"/retry", r.raw)
		add("RetryPlan/Reason/"+r.name, "POST", "/v1/plans/"+f.failed+"/retry", withField(r.raw, "statuses", `["FAILED"]`))
		add("PauseTask/Reason/"+r.name, "POST", "/v1/tenants/"+hxTenant+"/pause", r.raw)
		add("ResumeTask/Reason/"+r.name, "POST", "/v1/tenants/"+hxTenant+"/resume", r.raw)
		add("CancelTask/Reason/"+r.name, "POST", "/v1/tenants/"+hxTenant+"/cancel", r.raw)
		add("ReleaseLock/Reason/"+r.name, "DELETE", "/v1/tenants/"+hxLocked+"/lock",
			withField(r.raw, "expectedFence", fmt.Sprint(f.fence)))
	}
	// Retry: each mode's hostile values, with a good reason, on the FAILED task.
	rp := "/v1/tenants/" + hxFailed + "/retry"
	for _, v := range []struct{ name, body string }{
		{"FromStageBraces", `{"reason": "r", "fromStage": "a{b}"}`},
		{"FromStageGlob", `{"reason": "r", "fromStage": "pu*"}`},
		{"FromStageNUL", `{"reason": "r", "fromStage": "push\u0000"}`},
		{"FromStageNewline", `{"reason": "r", "fromStage": "push\n"}`},
		{"FromStageLong", `{"reason": "r", "fromStage": "` + strings.Repeat("p", 300) + `"}`},
		{"FromStageUnknown", `{"reason": "r", "fromStage": "nope"}`},
		{"TwoModes", `{"reason": "r", "fromCheckpoint": false, "fromStage": "push"}`},
		{"SkipAndFromStage", `{"reason": "r", "skipStage": true, "fromStage": "push"}`},
		{"OutputsWithoutSkip", `{"reason": "r", "outputs": {"a": 1}}`},
		{"ExpectedAttemptNegative", `{"reason": "r", "expectedAttempt": -1}`},
		{"ExpectedAttemptHugeNegative", `{"reason": "r", "expectedAttempt": -9223372036854775808}`},
	} {
		add("RetryTask/"+v.name, "POST", rp, v.body)
	}
	// Bulk retry: hostile selections and modes, with a good reason, on the
	// FAILED plan (any of them accepted would re-run its FAILED task).
	bp := "/v1/plans/" + f.failed + "/retry"
	for _, v := range []struct{ name, body string }{
		{"NoSelection", `{"reason": "r"}`},
		{"StatusesEmpty", `{"reason": "r", "statuses": []}`},
		{"StatusesNull", `{"reason": "r", "statuses": null}`},
		{"OrphanedFalseOnly", `{"reason": "r", "orphaned": false}`},
		{"StatusLowercase", `{"reason": "r", "statuses": ["failed"]}`},
		{"StatusUnknown", `{"reason": "r", "statuses": ["BOGUS"]}`},
		{"StatusCompleted", `{"reason": "r", "statuses": ["COMPLETED"]}`},
		{"StatusRunning", `{"reason": "r", "statuses": ["RUNNING"]}`},
		{"StatusPending", `{"reason": "r", "statuses": ["PENDING"]}`},
		{"StatusPlanStatus", `{"reason": "r", "statuses": ["CREATED"]}`},
		{"StatusTwice", `{"reason": "r", "statuses": ["FAILED", "FAILED"]}`},
		{"StatusGlob", `{"reason": "r", "statuses": ["FAIL*"]}`},
		{"StatusNUL", `{"reason": "r", "statuses": ["FAILED\u0000"]}`},
		{"StatusNewline", `{"reason": "r", "statuses": ["FAILED\n"]}`},
		{"StatusEmpty", `{"reason": "r", "statuses": [""]}`},
		{"StatusNull", `{"reason": "r", "statuses": [null]}`},
		{"StatusLong", `{"reason": "r", "statuses": ["` + strings.Repeat("F", 300) + `"]}`},
		{"TenantsEmpty", `{"reason": "r", "statuses": ["FAILED"], "tenants": []}`},
		{"TenantBraces", `{"reason": "r", "statuses": ["FAILED"], "tenants": ["t-hfail", "a{b}"]}`},
		{"TenantHashTag", `{"reason": "r", "statuses": ["FAILED"], "tenants": ["x{t-hfail}"]}`},
		{"TenantColon", `{"reason": "r", "statuses": ["FAILED"], "tenants": ["t-hfail:x"]}`},
		{"TenantGlob", `{"reason": "r", "statuses": ["FAILED"], "tenants": ["t-*"]}`},
		{"TenantQuestion", `{"reason": "r", "statuses": ["FAILED"], "tenants": ["t-hfai?"]}`},
		{"TenantClass", `{"reason": "r", "statuses": ["FAILED"], "tenants": ["t-h[f]ail"]}`},
		{"TenantNUL", `{"reason": "r", "statuses": ["FAILED"], "tenants": ["t-hfail\u0000"]}`},
		{"TenantNewline", `{"reason": "r", "statuses": ["FAILED"], "tenants": ["t-hfail\n"]}`},
		{"TenantEscape", `{"reason": "r", "statuses": ["FAILED"], "tenants": ["\u001b[31m"]}`},
		{"TenantEmpty", `{"reason": "r", "statuses": ["FAILED"], "tenants": [""]}`},
		{"TenantNull", `{"reason": "r", "statuses": ["FAILED"], "tenants": [null]}`},
		{"TenantDotDot", `{"reason": "r", "statuses": ["FAILED"], "tenants": [".."]}`},
		{"TenantLong", `{"reason": "r", "statuses": ["FAILED"], "tenants": ["` + strings.Repeat("t", 129) + `"]}`},
		{"TenantUnicode", `{"reason": "r", "statuses": ["FAILED"], "tenants": ["t-é"]}`},
		{"TenantInvalidUTF8", "{\"reason\": \"r\", \"statuses\": [\"FAILED\"], \"tenants\": [\"t-\xff\"]}"},
		{"TenantTwice", `{"reason": "r", "statuses": ["FAILED"], "tenants": ["t-hfail", "t-hfail"]}`},
		{"TenantsTooMany", `{"reason": "r", "statuses": ["FAILED"], "tenants": [` + hxTenantList(facade.MaxBulkTenants+1) + `]}`},
		{"FromStageBraces", `{"reason": "r", "statuses": ["FAILED"], "fromStage": "a{b}"}`},
		{"FromStageGlob", `{"reason": "r", "statuses": ["FAILED"], "fromStage": "pu*"}`},
		{"FromStageNUL", `{"reason": "r", "statuses": ["FAILED"], "fromStage": "push\u0000"}`},
		{"FromStageUnknown", `{"reason": "r", "statuses": ["FAILED"], "fromStage": "nope"}`},
		{"TwoModes", `{"reason": "r", "statuses": ["FAILED"], "fromCheckpoint": false, "fromStage": "push"}`},
		{"SkipStageNotBulk", `{"reason": "r", "statuses": ["FAILED"], "skipStage": true}`},
		{"ExpectedAttemptNotBulk", `{"reason": "r", "statuses": ["FAILED"], "expectedAttempt": 1}`},
	} {
		add("RetryPlan/"+v.name, "POST", bp, v.body)
	}
	// Lock release: a right fence is needed, a wrong one is refused.
	lp := "/v1/tenants/" + hxLocked + "/lock"
	for _, v := range []struct{ name, body string }{
		{"FenceMissing", `{"reason": "r"}`},
		{"FenceNull", `{"reason": "r", "expectedFence": null}`},
		{"FenceZero", `{"reason": "r", "expectedFence": 0}`},
		{"FenceNegative", fmt.Sprintf(`{"reason": "r", "expectedFence": -%d}`, f.fence)},
		{"FenceMin", `{"reason": "r", "expectedFence": -9223372036854775808}`},
	} {
		add("ReleaseLock/"+v.name, "DELETE", lp, v.body)
	}
	out = append(out, hxCase{name: "Value/ReleaseLock/FenceStale", method: "DELETE", path: lp,
		body: fmt.Sprintf(`{"reason": "r", "expectedFence": %d}`, f.fence-1), want: []hxWant{{409, httpapi.CodeLockMismatch}}})
	// Tenants status: hostile ids in the list (read-only, but refused).
	for _, v := range []struct{ name, id string }{
		{"Braces", "a{b}"}, {"Colon", "t-h1:x"}, {"Glob", "t-*"}, {"Question", "t-h?"}, {"Class", "t-h[12]"},
		{"NUL", `t\u0000`}, {"Newline", `t\n`}, {"Escape", `\u001b[31m`}, {"Empty", ""}, {"DotDot", ".."},
		{"Long", strings.Repeat("t", 129)}, {"Unicode", "t-é"}, {"InvalidUTF8", "t-\xff"}, {"Null", "null"},
	} {
		id := `"` + v.id + `"`
		if v.name == "Null" {
			id = "null"
		}
		add("TenantsStatus/"+v.name, "POST", "/v1/tenants:status", `{"tenantIds": ["t-h1", `+id+`]}`)
	}
	add("TenantsStatus/None", "POST", "/v1/tenants:status", `{"tenantIds": []}`)
	add("TenantsStatus/NullList", "POST", "/v1/tenants:status", `{"tenantIds": null}`)
	add("TenantsStatus/TooMany", "POST", "/v1/tenants:status", tenantIDs(httpapi.MaxStatusTenants+1, 0))
	// Plans: hostile values in a spec that is otherwise good (not started,
	// so an accepted one would only add records).
	spec := func(over string) string {
		out := `{"name": "hostile", "pipeline": "standard-deploy", "tenants": [{"tenantId": "t-new"}], "start": false}`
		var o map[string]json.RawMessage
		if err := json.Unmarshal([]byte(over), &o); err != nil {
			panic(over + ": " + err.Error())
		}
		for k, v := range o {
			out = withField(out, k, string(v))
		}
		return out
	}
	for _, v := range []struct{ name, over string }{
		{"TenantIDBraces", `{"tenants": [{"tenantId": "a{b}"}]}`},
		{"TenantIDHashTag", `{"tenants": [{"tenantId": "x{t-h1}"}]}`},
		{"TenantIDColon", `{"tenants": [{"tenantId": "a:b"}]}`},
		{"TenantIDGlob", `{"tenants": [{"tenantId": "a*"}]}`},
		{"TenantIDQuestion", `{"tenants": [{"tenantId": "a?b"}]}`},
		{"TenantIDClass", `{"tenants": [{"tenantId": "a[0]"}]}`},
		{"TenantIDNUL", `{"tenants": [{"tenantId": "a\u0000"}]}`},
		{"TenantIDNewline", `{"tenants": [{"tenantId": "a\nb"}]}`},
		{"TenantIDEscape", `{"tenants": [{"tenantId": "\u001b[31m"}]}`},
		{"TenantIDEmpty", `{"tenants": [{"tenantId": ""}]}`},
		{"TenantIDMissing", `{"tenants": [{}]}`},
		{"TenantIDDotDot", `{"tenants": [{"tenantId": ".."}]}`},
		{"TenantIDLong", `{"tenants": [{"tenantId": "` + strings.Repeat("t", 129) + `"}]}`},
		{"TenantIDUnicode", `{"tenants": [{"tenantId": "t-é"}]}`},
		{"TenantTwice", `{"tenants": [{"tenantId": "t-new"}, {"tenantId": "t-new"}]}`},
		{"TenantsNone", `{"tenants": []}`},
		{"TenantsNull", `{"tenants": null}`},
		{"TenantNull", `{"tenants": [null]}`},
		{"NameEmpty", `{"name": ""}`},
		{"NameNUL", `{"name": "a\u0000"}`},
		{"NameEscape", `{"name": "a\u001b[2J"}`},
		{"NameNewline", `{"name": "a\nb"}`},
		{"NameLong", `{"name": "` + strings.Repeat("n", plan.MaxNameLen+1) + `"}`},
		{"NameInvalidUTF8", "{\"name\": \"hostile \xff\xfe\"}"},
		{"TenantIDInvalidUTF8", "{\"tenants\": [{\"tenantId\": \"t-\xff\"}]}"},
		{"PipelineBraces", `{"pipeline": "a{b}"}`},
		{"PipelineNUL", `{"pipeline": "standard-deploy\u0000"}`},
		{"PipelineUnknown", `{"pipeline": "nope"}`},
		{"PipelineAndStages", `{"stages": [{"name": "s", "kind": "noop"}]}`},
		{"NoPipelineNoStages", `{"pipeline": ""}`},
		{"StageNameBraces", `{"pipeline": "", "stages": [{"name": "a{b}", "kind": "noop"}]}`},
		{"StageNameNUL", `{"pipeline": "", "stages": [{"name": "s\u0000", "kind": "noop"}]}`},
		{"StageKindGlob", `{"pipeline": "", "stages": [{"name": "s", "kind": "no*"}]}`},
		{"StageKindUnknown", `{"pipeline": "", "stages": [{"name": "s", "kind": "nope"}]}`},
		{"StageUnknownField", `{"pipeline": "", "stages": [{"name": "s", "kind": "noop", "x\u0000": 1}]}`},
		{"StageTwice", `{"pipeline": "", "stages": [{"name": "s", "kind": "noop"}, {"name": "s", "kind": "noop"}]}`},
		{"StageTimeoutNegative", `{"pipeline": "", "stages": [{"name": "s", "kind": "noop", "timeout": "-1s"}]}`},
		{"StageTimeoutHuge", `{"pipeline": "", "stages": [{"name": "s", "kind": "noop", "timeout": "100000h"}]}`},
		{"StageHTTPHostNotAllowed", `{"pipeline": "", "stages": [{"name": "s", "kind": "http", "http": {"method": "POST", "url": "http://169.254.169.254/latest/meta-data/"}}]}`},
		{"ParamKeyBraces", `{"params": {"a{b}": 1}}`},
		{"ParamKeyNUL", `{"params": {"a\u0000": 1}}`},
		{"TenantParamKeyColon", `{"tenants": [{"tenantId": "t-new", "params": {"a:b": 1}}]}`},
		{"ParamsTooMany", `{"params": {` + hxManyParams(plan.MaxParams+1) + `}}`},
		{"ParamsTooBig", `{"params": {"a": "` + strings.Repeat("v", plan.MaxParamsBytes) + `"}}`},
		{"MaxConcurrencyNegative", `{"maxConcurrency": -1}`},
		{"MaxConcurrencyHuge", `{"maxConcurrency": 1000000}`},
		{"OnTenantLockedUnknown", `{"onTenantLocked": "retry"}`},
		{"OnTenantLockedNUL", `{"onTenantLocked": "fail\u0000"}`},
		{"LockWaitNegative", `{"lockWait": "-1s"}`},
		{"LockWaitHuge", `{"lockWait": "1000h"}`},
		{"LockWaitOverflow", `{"lockWait": "9999999999h"}`},
		{"FailureThresholdNegative", `{"failureThreshold": {"maxFailed": -1}}`},
		{"FailureThresholdHuge", `{"failureThreshold": {"maxFailed": 1000000000}}`},
	} {
		add("CreatePlan/"+v.name, "POST", "/v1/plans", spec(v.over))
	}
	return out
}

func hxManyParams(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"p%d": 1`, i)
	}
	return strings.Join(parts, ", ")
}

// hxIdemCases: the Idempotency-Key header of the two idempotent routes.
func (f *hxFixture) hxIdemCases(big map[int]*string) []hxCase {
	var out []hxCase
	routes := []struct{ name, path, good, bad string }{
		{"CreatePlan", "/v1/plans", `{"name": "hostile", "pipeline": "standard-deploy", "tenants": [{"tenantId": "t-new"}], "start": false}`,
			`{"name": "hostile", "pipeline": "standard-deploy", "tenants": [{"tenantId": "a{b}"}], "start": false}`},
		{"RetryTask", "/v1/tenants/" + hxFailed + "/retry", hxReason, `{"reason": "r", "fromStage": "a{b}"}`},
		{"RetryPlan", "/v1/plans/" + f.failed + "/retry", hxRetryPlan, `{"reason": "r", "statuses": ["FAILED"], "tenants": ["a{b}"]}`},
	}
	for _, rt := range routes {
		for _, k := range []struct{ name, key string }{
			{"Braces", "a{b}"}, {"Glob", "a*"}, {"Space", "a b"}, {"Empty", ""}, {"NUL", "a\x00b"}, {"Escape", "a\x1b[31m"},
			{"Unicode", "clé"}, {"Long", strings.Repeat("k", 129)},
		} {
			out = append(out, hxCase{name: "IdempotencyKey/" + rt.name + "/" + k.name, method: "POST", path: rt.path, body: rt.good,
				header: map[string]string{httpapi.HeaderIdempotencyKey: k.key}, want: hxBad})
		}
		// A good key on a refused request: the refusal is kept for the key
		// (documented), and nothing else is written.
		out = append(out, hxCase{name: "IdempotencyKey/" + rt.name + "/GoodKeyMalformedBody", method: "POST", path: rt.path,
			body: `{"reason": `, header: map[string]string{httpapi.HeaderIdempotencyKey: "hostile-" + rt.name + "-1"}, want: hxBad, idem: true})
		out = append(out, hxCase{name: "IdempotencyKey/" + rt.name + "/GoodKeyHostileValue", method: "POST", path: rt.path,
			body: rt.bad, header: map[string]string{httpapi.HeaderIdempotencyKey: "hostile-" + rt.name + "-2"}, want: hxBad, idem: true})
		// Too large: nothing is kept.
		limit := httpapi.MaxSmallBodyBytesDefault
		switch rt.name {
		case "CreatePlan":
			limit = httpapi.MaxBodyBytesDefault
		case "RetryPlan":
			limit = httpapi.MaxRetryPlanBodyBytes
		}
		for _, chunked := range []bool{false, true} {
			out = append(out, hxCase{name: fmt.Sprintf("IdempotencyKey/%s/TooLarge/chunked=%t", rt.name, chunked), method: "POST",
				path: rt.path, big: big[limit], chunked: chunked,
				header: map[string]string{httpapi.HeaderIdempotencyKey: fmt.Sprintf("hostile-%s-big-%t", rt.name, chunked)}, want: hxTooLarge})
		}
	}
	// A hostile X-Request-Id is replaced by a generated one (it would go
	// into the logs and the operator.refused event).
	for _, id := range []struct{ name, raw string }{
		{"Braces", "a{b}"}, {"Colon", "a:b"}, {"Glob", "a*"}, {"Newline", "a\nb"}, {"NUL", "a\x00"}, {"Escape", "\x1b[31m"},
		{"Long", strings.Repeat("r", 65)}, {"Unicode", "ré"},
	} {
		out = append(out, hxCase{name: "RequestIDHeader/" + id.name, method: "POST", path: "/v1/tenants/" + hxTenant + "/cancel",
			body: `{"reason": }`, header: map[string]string{httpapi.HeaderRequestID: id.raw}, want: hxBad,
			check: func(t *testing.T, a answer) {
				got := a.Header.Get(httpapi.HeaderRequestID)
				if got == id.raw || got == "" || strings.IndexFunc(got, func(r rune) bool {
					return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
				}) >= 0 {
					t.Errorf("X-Request-Id %q answered as %q", id.raw, got)
				}
			}})
	}
	return out
}

// hxQueryCases: bad query values on every route reading a query.
func (f *hxFixture) hxQueryCases() []hxCase {
	var out []hxCase
	add := func(name, method, path string) {
		out = append(out, hxCase{name: "Query/" + name, method: method, path: path, want: hxBad})
	}
	pp := "/v1/plans/" + f.planID
	badLimits := []struct{ name, raw string }{
		{"Negative", "-1"}, {"Zero", "0"}, {"Huge", "99999999999999999999"}, {"NotANumber", "ten"}, {"Float", "1.5"},
		{"Exponent", "1e3"}, {"Hex", "0x10"}, {"Empty", ""}, {"Space", "%201"}, {"NUL", "1%00"}, {"Newline", "1%0A"},
		{"Braces", "%7B1%7D"}, {"MinInt", "-9223372036854775808"},
	}
	badCursors := []struct{ name, raw string }{
		{"Braces", "a%7Bb%7D"}, {"Glob", "a*"}, {"Question", "a%3F"}, {"Class", "a%5B0%5D"}, {"NUL", "a%00"},
		{"Newline", "%0Aa"}, {"Escape", "%1B%5B31m"}, {"Long", strings.Repeat("a", 257)}, {"Space", "a%20b"},
		{"Unicode", "%C3%A9"}, {"Empty", ""},
	}
	for _, l := range badLimits {
		add("ListPlans/Limit/"+l.name, "GET", "/v1/plans?limit="+l.raw)
		add("PlanTasks/Limit/"+l.name, "GET", pp+"/tasks?limit="+l.raw)
		add("History/Limit/"+l.name, "GET", "/v1/tenants/"+hxTenant+"/history?limit="+l.raw)
		add("Timeline/Limit/"+l.name, "GET", "/v1/tenants/"+hxTenant+"/timeline?limit="+l.raw)
		add("Events/Limit/"+l.name, "GET", "/v1/events?limit="+l.raw)
	}
	add("ListPlans/Limit/Over", "GET", fmt.Sprintf("/v1/plans?limit=%d", plan.LimitMax+1))
	add("PlanTasks/Limit/Over", "GET", fmt.Sprintf("%s/tasks?limit=%d", pp, plan.LimitMax+1))
	add("History/Limit/Over", "GET", fmt.Sprintf("/v1/tenants/%s/history?limit=%d", hxTenant, plan.LimitMax+1))
	add("Timeline/Limit/Over", "GET", fmt.Sprintf("/v1/tenants/%s/timeline?limit=%d", hxTenant, task.MaxTimeline+1))
	add("Events/Limit/Over", "GET", fmt.Sprintf("/v1/events?limit=%d", httpapi.EventsLimitMax+1))
	for _, c := range badCursors {
		add("ListPlans/Cursor/"+c.name, "GET", "/v1/plans?cursor="+c.raw)
		add("PlanTasks/Cursor/"+c.name, "GET", pp+"/tasks?cursor="+c.raw)
	}
	// Cursors of the API's alphabet that it never returned: the store must
	// refuse them, not fail.
	for _, c := range []struct{ name, raw string }{
		{"DotDot", ".."}, {"Word", "abc"}, {"Colon", "%3A"}, {"NoPlanID", "1732181400000%3A"},
		{"BadPlanID", "1732181400000%3Aplan-x"}, {"Slash", "a%2Fb"},
		{"HugeScore", "99999999999999999999%3Aplan-01JDQZV5X8M7R2K9C3B4N6P0QS"},
	} {
		add("ListPlans/ForgedCursor/"+c.name, "GET", "/v1/plans?cursor="+c.raw)
	}
	for _, c := range []struct{ name, raw string }{
		{"Negative", "-1"}, {"Word", "abc"}, {"DotDot", ".."}, {"Huge", "99999999999999999999"}, {"PlanCursor", "1%3Aplan-01JDQZV5X8M7R2K9C3B4N6P0QS"},
		{"Float", "1.5"}, {"Exponent", "1e3"},
	} {
		add("PlanTasks/ForgedCursor/"+c.name, "GET", pp+"/tasks?cursor="+c.raw)
	}
	for _, s := range []struct{ name, raw string }{
		{"Lowercase", "running"}, {"Unknown", "BOGUS"}, {"TaskStatus", "PENDING"}, {"Empty", ""}, {"NUL", "RUNNING%00"},
		{"Braces", "%7BRUNNING%7D"}, {"Glob", "RUN*"}, {"Long", strings.Repeat("R", 300)},
	} {
		add("ListPlans/Status/"+s.name, "GET", "/v1/plans?status="+s.raw)
	}
	for _, s := range []struct{ name, raw string }{
		{"Lowercase", "failed"}, {"Unknown", "BOGUS"}, {"PlanStatus", "CREATED"}, {"Empty", ""}, {"Newline", "FAILED%0A"}, {"Glob", "FAIL*"},
	} {
		add("PlanTasks/Status/"+s.name, "GET", pp+"/tasks?status="+s.raw)
	}
	for _, o := range []string{"yes", "1", "TRUE", "", "true%00"} {
		add("PlanTasks/Orphaned/"+o, "GET", pp+"/tasks?orphaned="+o)
		add("SearchTasks/Orphaned/"+o, "GET", "/v1/tasks?orphaned="+o)
	}
	// GET /v1/tasks: the cross-plan search.
	for _, l := range badLimits {
		add("SearchTasks/Limit/"+l.name, "GET", "/v1/tasks?limit="+l.raw)
	}
	add("SearchTasks/Limit/Over", "GET", fmt.Sprintf("/v1/tasks?limit=%d", plan.LimitMax+1))
	for _, c := range badCursors {
		add("SearchTasks/Cursor/"+c.name, "GET", "/v1/tasks?cursor="+c.raw)
	}
	for _, c := range []struct{ name, raw string }{
		{"Word", "abc"}, {"NoTaskID", "1764034352123456~"}, {"BadTaskID", "1~task-x"}, {"PlanCursor", "1%3Aplan-01JDQZV5X8M7R2K9C3B4N6P0QS"},
		{"Negative", "-1~task-01JDQZV5X8M7R2K9C3B4N6P0QS"}, {"HugeScore", "99999999999999999999~task-01JDQZV5X8M7R2K9C3B4N6P0QS"},
		{"LeadingZero", "01~task-01JDQZV5X8M7R2K9C3B4N6P0QS"}, {"Extra", "1~task-01JDQZV5X8M7R2K9C3B4N6P0QS~t-1"},
		{"Float", "1.5~task-01JDQZV5X8M7R2K9C3B4N6P0QS"},
	} {
		add("SearchTasks/ForgedCursor/"+c.name, "GET", "/v1/tasks?cursor="+c.raw)
	}
	for _, s := range []struct{ name, raw string }{
		{"Lowercase", "failed"}, {"Unknown", "BOGUS"}, {"PlanStatus", "CREATED"}, {"Empty", ""}, {"Newline", "FAILED%0A"},
		{"Glob", "FAIL*"}, {"Braces", "%7BFAILED%7D"}, {"Colon", "FAILED%3ARUNNING"}, {"TrailingComma", "FAILED,"},
		{"Twice", "FAILED,FAILED"}, {"Space", "FAILED,%20RUNNING"}, {"TooMany", strings.Repeat("FAILED,", 7) + "FAILED"},
		{"Long", strings.Repeat("F", 300)},
	} {
		add("SearchTasks/Status/"+s.name, "GET", "/v1/tasks?status="+s.raw)
	}
	for _, d := range []struct{ name, raw string }{
		{"Empty", ""}, {"NoUnit", "10"}, {"Negative", "-10m"}, {"Zero", "0s"}, {"Word", "ten"}, {"Huge", "999999h"},
		{"OverMax", "25h"}, {"NUL", "10m%00"}, {"Glob", "10m*"}, {"Braces", "%7B10m%7D"}, {"Long", strings.Repeat("1", 40) + "ns"},
		{"Overflow", "9999999999999999999h"},
	} {
		add("SearchTasks/RunningLongerThan/"+d.name, "GET", "/v1/tasks?runningLongerThan="+d.raw)
	}
	for _, st := range []struct{ name, raw string }{
		{"Empty", ""}, {"Space", "a%20b"}, {"Braces", "%7Bx%7D"}, {"Colon", "a%3Ab"}, {"Glob", "a*"}, {"Newline", "a%0A"},
		{"Escape", "%1B%5B31m"}, {"Long", strings.Repeat("s", 65)}, {"Unicode", "%C3%A9"},
	} {
		add("SearchTasks/Stage/"+st.name, "GET", "/v1/tasks?stage="+st.raw)
	}
	for _, id := range []struct{ name, raw string }{
		{"Empty", ""}, {"Word", "abc"}, {"Braces", "plan-%7Bx%7D"}, {"Glob", "plan-*"}, {"Colon", "plan%3A1"},
		{"TaskID", "task-01JDQZV5X8M7R2K9C3B4N6P0QS"}, {"Lowercase", "plan-01jdqzv5x8m7r2k9c3b4n6p0qs"}, {"NUL", "plan-01JDQZV5X8M7R2K9C3B4N6P0QS%00"},
	} {
		add("SearchTasks/PlanID/"+id.name, "GET", "/v1/tasks?planId="+id.raw)
	}
	for _, t := range []struct{ name, raw string }{
		{"Empty", ""}, {"Date", "2026-11-25"}, {"Unix", "1764034352"}, {"NoZone", "2026-11-25T01:00:00"}, {"Word", "yesterday"},
		{"Long", strings.Repeat("2", 70)}, {"NUL", "2026-11-25T01:00:00Z%00"},
	} {
		add("SearchTasks/Since/"+t.name, "GET", "/v1/tasks?since="+t.raw)
	}
	add("SearchTasks/Unknown", "GET", "/v1/tasks?tenant=t-1")
	add("SearchTasks/Repeated", "GET", "/v1/tasks?status=FAILED&status=RUNNING")
	// Events.
	for _, a := range []struct{ name, raw string }{
		{"Word", "abc"}, {"NoSeq", "1-"}, {"Negative", "-1"}, {"ThreeParts", "1-2-3"}, {"Newline", "%0A"}, {"Braces", "%7B%7D"},
		{"TooManyDigits", "123456789012345678901-0"}, {"DoubleDollar", "%24%24"}, {"Glob", "1-*"}, {"Plus", "%2B"}, {"Space", "1-0%20"},
	} {
		add("Events/After/"+a.name, "GET", "/v1/events?after="+a.raw)
	}
	for _, w := range []struct{ name, raw string }{
		{"Negative", "-1s"}, {"NoUnit", "30"}, {"Word", "soon"}, {"OverMax", "61s"}, {"Hour", "1h"}, {"Overflow", "9999999999h"},
		{"MaxDuration", "9223372036854775807ns"}, {"NUL", "1s%00"}, {"Empty", ""}, {"Exponent", "1e3s"},
	} {
		add("Events/Wait/"+w.name, "GET", "/v1/events?wait="+w.raw)
	}
	for _, v := range []struct{ name, raw string }{
		{"PlanID/Braces", "planId=a%7Bb%7D"}, {"PlanID/TenantID", "planId=t-h1"}, {"PlanID/NUL", "planId=%00"},
		{"TenantID/Colon", "tenantId=a%3Ab"}, {"TenantID/Glob", "tenantId=t-*"}, {"TenantID/Newline", "tenantId=t%0A"},
		{"TenantID/Long", "tenantId=" + strings.Repeat("t", 129)},
		{"Type/Upper", "type=TASK.FAILED"}, {"Type/Glob", "type=task.*"}, {"Type/NoDot", "type=task"}, {"Type/Escape", "type=task.%1B"},
		{"Unknown", "x=1"}, {"Repeated", "limit=1&limit=2"}, {"Malformed", "limit=%zz"},
	} {
		add("Events/"+v.name, "GET", "/v1/events?"+v.raw)
	}
	// An event stream with a hostile Last-Event-ID is refused before it starts.
	for _, id := range []struct{ name, raw string }{
		{"Word", "abc"}, {"Braces", "{1-0}"}, {"Escape", "1-0\x1b[31m"}, {"NUL", "1-0\x00"}, {"Long", strings.Repeat("1", 50) + "-0"},
	} {
		out = append(out, hxCase{name: "Query/Events/LastEventID/" + id.name, method: "GET", path: "/v1/events",
			header: map[string]string{"Accept": httpapi.MediaEventStream, httpapi.HeaderLastEventID: id.raw}, want: hxBad})
	}
	// Routes taking no query: unknown, repeated and malformed parameters.
	for _, r := range []struct{ name, method, path string }{
		{"GetPlan", "GET", pp}, {"TenantTask", "GET", "/v1/tenants/" + hxTenant + "/task"},
		{"Checkpoint", "GET", "/v1/tenants/" + hxFailed + "/checkpoint"}, {"HeadCheckpoint", "HEAD", "/v1/tenants/" + hxFailed + "/checkpoint"},
		{"Lock", "GET", "/v1/tenants/" + hxLocked + "/lock"}, {"Task", "GET", "/v1/tasks/" + f.taskID}, {"Instances", "GET", "/v1/instances"},
		{"ListPlans", "GET", "/v1/plans"}, {"PlanTasks", "GET", pp + "/tasks"}, {"History", "GET", "/v1/tenants/" + hxTenant + "/history"},
		{"Timeline", "GET", "/v1/tenants/" + hxTenant + "/timeline"},
	} {
		for _, q := range []struct{ name, raw string }{
			{"Unknown", "verbose=true"}, {"HostileName", "a%7Bb%7D%0A=1"}, {"Malformed", "a=%zz"}, {"Repeated", "limit=1&limit=1"},
		} {
			add(r.name+"/"+q.name, r.method, r.path+"?"+q.raw)
		}
	}
	return out
}

// TestHostileInput sends every hostile request that the API itself must
// refuse — bad path ids, malformed bodies, wrong types, unknown fields,
// media types, query values, oversized bodies, Idempotency-Keys — to one
// fixture, and checks after each that Redis did not change.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	f := newHxFixture(t)
	big := map[int]*string{}
	var cases []hxCase
	cases = append(cases, hxIDCases()...)
	cases = append(cases, f.hxBodyCases(big)...)
	cases = append(cases, f.hxQueryCases()...)
	cases = append(cases, f.hxIdemCases(big)...)
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.name] {
			t.Fatalf("two cases named %s", c.name)
		}
		seen[c.name] = true
		t.Run(c.name, func(t *testing.T) { f.run(t, c) })
	}
	t.Run("Feed", f.checkFeed)
	t.Logf("%d hostile requests", len(cases))
}

// TestHostileValues sends well-formed requests holding hostile or
// out-of-range values, which the coordinator must refuse before it writes
// anything. A case that changed Redis leaves the fixture dirty: the next
// case gets a fresh one, so one defect does not fail the cases after it.
func TestHostileValues(t *testing.T) {
	t.Parallel()
	f := newHxFixture(t)
	fixtures := []*hxFixture{f}
	cases := f.hxValueCases()
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.name] {
			t.Fatalf("two cases named %s", c.name)
		}
		seen[c.name] = true
	}
	for i := range cases {
		dirty := false
		t.Run(cases[i].name, func(t *testing.T) {
			f.run(t, cases[i])
			dirty = t.Failed()
		})
		if dirty && i+1 < len(cases) {
			// The cases name the fixture's records: make them anew.
			f = newHxFixture(t)
			fixtures = append(fixtures, f)
			cases = f.hxValueCases()
		}
	}
	t.Run("Feed", func(t *testing.T) {
		for _, f := range fixtures {
			f.checkFeed(t)
		}
	})
	t.Logf("%d hostile requests on %d fixtures", len(cases), len(fixtures))
}

// hxFeedEvents returns the events stored in feed entries, one message each
// with the fields of an event (type, planId, taskId, tenantId, data as
// JSON): an entry holds a batch of events in field b (a JSON array), or one
// event in those fields (entries written before batching).
func hxFeedEvents(t *testing.T, msgs []redis.XMessage) []redis.XMessage {
	t.Helper()
	var out []redis.XMessage
	for _, m := range msgs {
		b, ok := m.Values["b"].(string)
		if !ok {
			out = append(out, m)
			continue
		}
		var batch []struct {
			Type     string          `json:"type"`
			PlanID   string          `json:"planId"`
			TaskID   string          `json:"taskId"`
			TenantID string          `json:"tenantId"`
			Data     json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal([]byte(b), &batch); err != nil {
			t.Fatalf("feed entry %s: field b is not a JSON array of events: %v", m.ID, err)
		}
		for i, ev := range batch {
			out = append(out, redis.XMessage{ID: fmt.Sprintf("%s[%d]", m.ID, i), Values: map[string]any{
				"type": ev.Type, "planId": ev.PlanID, "taskId": ev.TaskID, "tenantId": ev.TenantID, "data": string(ev.Data)}})
		}
	}
	return out
}

// hxTenantList is n valid tenant ids, quoted and comma-separated.
func hxTenantList(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"t-%05d"`, i)
	}
	return strings.Join(parts, ", ")
}
