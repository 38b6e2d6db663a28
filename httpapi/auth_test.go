package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
)

// Test tokens: the secrets must never show in a log.
const (
	opsSecret     = "ops-secret-7f3a9c1d2e4b5a60"
	viewerSecret  = "viewer-secret-0b1c2d3e4f5a6b7c"
	unknownSecret = "nobody-knows-this-0123456789"
)

func testTokens() []httpapi.Token {
	return []httpapi.Token{
		{Name: "ops", Role: httpapi.RoleOperator, Hash: httpapi.HashSecret(opsSecret)},
		{Name: "watcher", Role: httpapi.RoleViewer, Hash: httpapi.HashSecret(viewerSecret)},
	}
}

func bearer(secret string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + secret}
}

// endpoint is one route of the API with a request that succeeds on the
// fake service.
type endpoint struct {
	req    request
	status int
	// change is set for the routes a viewer may not call.
	change bool
}

func endpoints() []endpoint {
	pp := "/v1/plans/" + planID
	tp := "/v1/tenants/" + tenantID
	reason := `{"reason": "INC-1"}`
	return []endpoint{
		{request{method: "POST", path: "/v1/plans", body: `{"name": "r", "pipeline": "standard-deploy", "tenants": [{"tenantId": "t-001"}]}`}, 201, true},
		{request{method: "GET", path: "/v1/plans"}, 200, false},
		{request{method: "GET", path: pp}, 200, false},
		{request{method: "GET", path: pp + "/tasks"}, 200, false},
		{request{method: "POST", path: pp + "/start", body: reason}, 200, true},
		{request{method: "POST", path: pp + "/pause", body: reason}, 200, true},
		{request{method: "POST", path: pp + "/resume", body: reason}, 200, true},
		{request{method: "POST", path: pp + "/cancel", body: reason}, 200, true},
		{request{method: "POST", path: pp + "/repair-counts", body: reason}, 200, true},
		{request{method: "POST", path: pp + "/retry", body: `{"statuses": ["FAILED"], "reason": "INC-1"}`}, 202, true},
		{request{method: "POST", path: "/v1/tenants:status", body: `{"tenantIds": ["t-001"]}`}, 200, false},
		{request{method: "GET", path: tp + "/task"}, 200, false},
		{request{method: "GET", path: tp + "/checkpoint"}, 200, false},
		{request{method: "HEAD", path: tp + "/checkpoint"}, 200, false},
		{request{method: "GET", path: tp + "/history"}, 200, false},
		{request{method: "GET", path: tp + "/timeline"}, 200, false},
		{request{method: "POST", path: tp + "/retry", body: reason}, 202, true},
		{request{method: "POST", path: tp + "/pause", body: reason}, 200, true},
		{request{method: "POST", path: tp + "/resume", body: reason}, 200, true},
		{request{method: "POST", path: tp + "/cancel", body: reason}, 200, true},
		{request{method: "GET", path: tp + "/lock"}, 200, false},
		{request{method: "DELETE", path: tp + "/lock", body: `{"reason": "INC-1", "expectedFence": 7}`}, 200, true},
		{request{method: "GET", path: "/v1/tasks/" + taskID}, 200, false},
		{request{method: "GET", path: "/v1/tasks?status=FAILED"}, 200, false},
		{request{method: "GET", path: "/v1/events"}, 200, false},
		{request{method: "GET", path: "/v1/instances"}, 200, false},
	}
}

// openRoutes are the routes served outside the /v1 authentication: GET
// path → whether a client off loopback needs a token (any valid token; a
// viewer's will do).
var openRoutes = map[string]bool{
	"/healthz":      false,
	"/readyz":       false,
	"/openapi.yaml": false,
	"/metrics":      true,
}

// TestAuthTableCoversRouter fails when the router serves a route that has
// no row in endpoints() (the per-role table of TestAuthRoles) or in
// openRoutes, or when a row names no route: a new route must say which
// roles may call it.
func TestAuthTableCoversRouter(t *testing.T) {
	t.Parallel()
	h, _ := newAPI(t, newFake(), httpapi.Config{Tokens: testTokens()})
	routes, ok := h.(chi.Routes)
	if !ok {
		t.Fatalf("httpapi.New returned a %T, not a chi router", h)
	}
	rows := map[string]bool{} // "METHOD pattern" of every row
	for _, ep := range endpoints() {
		path, _, _ := strings.Cut(ep.req.path, "?")
		pattern := routes.Find(chi.NewRouteContext(), ep.req.method, path)
		if pattern == "" {
			t.Errorf("row %s %s matches no route of the router", ep.req.method, ep.req.path)
			continue
		}
		key := ep.req.method + " " + pattern
		if rows[key] {
			t.Errorf("two rows of endpoints() for %s", key)
		}
		rows[key] = true
	}
	for path := range openRoutes {
		key := "GET " + path
		if rows[key] {
			t.Errorf("%s is both in endpoints() and in openRoutes", key)
		}
		rows[key] = true
	}
	walked := map[string]bool{}
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		key := method + " " + strings.TrimSuffix(route, "/*")
		walked[key] = true
		if !rows[key] {
			t.Errorf("route %s has no row in endpoints() (nor in openRoutes): add one saying which roles may call it", key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for key := range rows {
		if !walked[key] {
			t.Errorf("the table lists %s, which the router does not serve", key)
		}
	}
	if len(walked) < 25 {
		t.Errorf("only %d routes walked: %v", len(walked), walked)
	}
}

func TestAuthRoles(t *testing.T) {
	t.Parallel()
	creds := []struct {
		name   string
		header map[string]string
	}{
		{"NoToken", nil},
		{"BadToken", bearer(unknownSecret)},
		{"NotBearer", map[string]string{"Authorization": "Basic " + opsSecret}},
		{"Viewer", bearer(viewerSecret)},
		{"Operator", bearer(opsSecret)},
	}
	for _, ep := range endpoints() {
		for _, cr := range creds {
			t.Run(ep.req.method+ep.req.path+"/"+cr.name, func(t *testing.T) {
				t.Parallel()
				svc := newFake()
				h, logs := newAPI(t, svc, httpapi.Config{Tokens: testTokens()})
				rq := ep.req
				rq.header = cr.header
				a := serve(t, h, rq)
				switch {
				case cr.name == "Operator" || cr.name == "Viewer" && !ep.change:
					if a.Status != ep.status || svc.Calls() == 0 {
						t.Fatalf("answer = %d after %d calls, want %d: %s", a.Status, svc.Calls(), ep.status, a.Body)
					}
					if act := svc.Last().Actor; ep.change && (act.Name != "ops" || act.Role != "operator" || act.Addr != "192.0.2.1") {
						t.Errorf("actor = %+v", act)
					}
				case cr.name == "Viewer":
					if a.Status != http.StatusForbidden || svc.Calls() != 0 {
						t.Fatalf("viewer answer = %d after %d calls, want 403 and no call: %s", a.Status, svc.Calls(), a.Body)
					}
					if rq.method != "HEAD" {
						a.problem(t, 403, httpapi.CodePermissionDenied)
					}
				default:
					if a.Status != http.StatusUnauthorized || svc.Calls() != 0 {
						t.Fatalf("answer = %d after %d calls, want 401 and no call: %s", a.Status, svc.Calls(), a.Body)
					}
					if rq.method != "HEAD" {
						a.problem(t, 401, httpapi.CodeUnauthenticated)
					}
					if ch := a.Header.Get("WWW-Authenticate"); !strings.HasPrefix(ch, `Bearer realm="deploycoord"`) {
						t.Errorf("WWW-Authenticate = %q", ch)
					}
				}
				for _, secret := range []string{opsSecret, viewerSecret, unknownSecret} {
					if strings.Contains(logs.String(), secret) {
						t.Fatalf("a token secret is in the logs:\n%s", logs)
					}
				}
			})
		}
	}
}

// TestAuthOpenRoutes: the open routes answer every caller, whatever its
// token, without calling the service — but /metrics off loopback wants a
// valid token (401 without one).
func TestAuthOpenRoutes(t *testing.T) {
	t.Parallel()
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "deploycoord_up 1")
	})
	creds := []struct {
		name   string
		header map[string]string
		valid  bool
	}{
		{"NoToken", nil, false},
		{"BadToken", bearer(unknownSecret), false},
		{"NotBearer", map[string]string{"Authorization": "Basic " + opsSecret}, false},
		{"Viewer", bearer(viewerSecret), true},
		{"Operator", bearer(opsSecret), true},
	}
	for path, needsToken := range openRoutes {
		for _, remote := range []string{"192.0.2.1:4000", "127.0.0.1:4000", "[::1]:4000"} {
			for _, cr := range creds {
				svc := newFake()
				h, _ := newAPI(t, svc, httpapi.Config{Tokens: testTokens(), Metrics: metrics, Ready: func(context.Context) error { return nil }})
				a := serve(t, h, request{method: "GET", path: path, header: cr.header, remote: remote})
				loopback := !strings.HasPrefix(remote, "192.")
				want := http.StatusOK
				if needsToken && !loopback && !cr.valid {
					want = http.StatusUnauthorized
				}
				if a.Status != want {
					t.Errorf("GET %s from %s with %s = %d, want %d: %s", path, remote, cr.name, a.Status, want, a.Body)
					continue
				}
				if want == http.StatusUnauthorized {
					a.problem(t, 401, httpapi.CodeUnauthenticated)
				}
				if svc.Calls() != 0 {
					t.Errorf("GET %s called the service %d times", path, svc.Calls())
				}
			}
		}
	}
}

func TestAuthOffIsAnonymousOperator(t *testing.T) {
	t.Parallel()
	svc := newFake()
	h, _ := newAPI(t, svc, httpapi.Config{})
	serve(t, h, request{method: "POST", path: "/v1/tenants/t-001/cancel", body: `{"reason": "r"}`, header: bearer(unknownSecret)})
	if a := svc.Last().Actor; a.Name != "anonymous" || a.Role != "operator" || a.Addr != "192.0.2.1" || a.RequestID == "" {
		t.Errorf("actor with auth off = %+v", a)
	}
}

func TestValidateTokens(t *testing.T) {
	t.Parallel()
	h := httpapi.HashSecret
	tests := []struct {
		name   string
		tokens []httpapi.Token
		want   string // in the error; "" for none
	}{
		{"OK", testTokens(), ""},
		{"NoneOK", nil, ""},
		{"ErrBadName", []httpapi.Token{{Name: "a b", Role: httpapi.RoleViewer, Hash: h("x")}}, "token name"},
		{"ErrDuplicateName", []httpapi.Token{{Name: "a", Role: httpapi.RoleViewer, Hash: h("x")}, {Name: "a", Role: httpapi.RoleViewer, Hash: h("y")}}, "used twice"},
		{"ErrBadRole", []httpapi.Token{{Name: "a", Role: "admin", Hash: h("x")}}, "role"},
		{"ErrSameSecret", []httpapi.Token{{Name: "a", Role: httpapi.RoleViewer, Hash: h("x")}, {Name: "b", Role: httpapi.RoleOperator, Hash: h("x")}}, "same secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := httpapi.ValidateTokens(tt.tokens)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("ValidateTokens = %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("ValidateTokens = %v, want an error about %q", err, tt.want)
			}
		})
	}
	t.Run("NewPanicsOnInvalid", func(t *testing.T) {
		t.Parallel()
		defer func() {
			if recover() == nil {
				t.Error("New accepted two tokens with one name")
			}
		}()
		httpapi.New(newFake(), httpapi.Config{Tokens: []httpapi.Token{{Name: "a", Role: httpapi.RoleViewer}, {Name: "a", Role: httpapi.RoleViewer}}})
	})
}

func TestAuditLog(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		req   request
		audit map[string]any // fields the audit line must have; nil: no audit line
	}{
		{"ChangeOK", request{method: "POST", path: "/v1/tenants/t-001/pause", body: `{"reason": "INC-77 hold \"it\""}`, header: bearer(opsSecret)},
			map[string]any{"level": "info", "actor": "ops", "role": "operator", "action": "POST /v1/tenants/{tenantId}/pause",
				"tenant_id": "t-001", "reason": `INC-77 hold "it"`, "status": 200.0, "client_addr": "192.0.2.1"}},
		{"PlanChangeOK", request{method: "POST", path: "/v1/plans/" + planID + "/cancel", body: `{"reason": "stop"}`, header: bearer(opsSecret)},
			map[string]any{"actor": "ops", "action": "POST /v1/plans/{planId}/cancel", "plan_id": planID, "reason": "stop", "status": 200.0}},
		{"CreatedPlanOK", request{method: "POST", path: "/v1/plans", body: `{"name": "r", "pipeline": "standard-deploy", "tenants": [{"tenantId": "t-001"}]}`, header: bearer(opsSecret)},
			map[string]any{"actor": "ops", "action": "POST /v1/plans", "plan_id": planID, "status": 201.0}},
		{"LockReleaseOK", request{method: "DELETE", path: "/v1/tenants/t-001/lock", body: `{"reason": "INC-9 stuck", "expectedFence": 7}`, header: bearer(opsSecret)},
			map[string]any{"actor": "ops", "action": "DELETE /v1/tenants/{tenantId}/lock", "reason": "INC-9 stuck", "status": 200.0}},
		{"RefusedChangeOK", request{method: "POST", path: "/v1/tenants/t-001/retry", body: `{"reason": "x", "bogus": 1}`, header: bearer(opsSecret)},
			map[string]any{"actor": "ops", "action": "POST /v1/tenants/{tenantId}/retry", "status": 400.0}},
		{"ViewerDenied", request{method: "POST", path: "/v1/tenants/t-001/cancel", body: `{"reason": "r"}`, header: bearer(viewerSecret)},
			map[string]any{"level": "warn", "actor": "watcher", "role": "viewer", "status": 403.0, "denied": "role viewer may not change state"}},
		{"UnknownTokenDenied", request{method: "POST", path: "/v1/plans/" + planID + "/pause", body: `{"reason": "r"}`, header: bearer(unknownSecret)},
			map[string]any{"level": "warn", "actor": "", "status": 401.0, "denied": "unknown token", "plan_id": planID}},
		{"NoTokenOnReadDenied", request{method: "GET", path: "/v1/tenants/t-001/task"},
			map[string]any{"level": "warn", "status": 401.0, "denied": "no bearer token", "action": "GET /v1/tenants/{tenantId}/task"}},
		{"ReadNotAudited", request{method: "GET", path: "/v1/tenants/t-001/task", header: bearer(viewerSecret)}, nil},
		{"StatusReadNotAudited", request{method: "POST", path: "/v1/tenants:status", body: `{"tenantIds": ["t-001"]}`, header: bearer(viewerSecret)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, logs := newAPI(t, newFake(), httpapi.Config{Tokens: testTokens()})
			rq := tt.req
			rq.header = map[string]string{"X-Request-Id": "req-" + tt.name}
			for k, v := range tt.req.header {
				rq.header[k] = v
			}
			serve(t, h, rq)
			lines := logs.Lines(t, "audit")
			if tt.audit == nil {
				if len(lines) != 0 {
					t.Fatalf("audit lines for a read: %v", lines)
				}
				return
			}
			if len(lines) != 1 {
				t.Fatalf("%d audit lines, want 1:\n%s", len(lines), logs)
			}
			l := lines[0]
			if l["request_id"] != "req-"+tt.name || l["component"] != "httpapi" {
				t.Errorf("audit line lacks the request id or component: %v", l)
			}
			for k, want := range tt.audit {
				if l[k] != want {
					t.Errorf("audit %s = %#v, want %#v (line %v)", k, l[k], want, l)
				}
			}
			if strings.Contains(logs.String(), opsSecret) || strings.Contains(logs.String(), viewerSecret) || strings.Contains(logs.String(), unknownSecret) {
				t.Fatal("a token secret is in the logs")
			}
		})
	}
}

func TestAccessLog(t *testing.T) {
	t.Parallel()
	h, logs := newAPI(t, newFake(), httpapi.Config{Tokens: testTokens()})
	serve(t, h, request{method: "GET", path: "/v1/tenants/t-001/task", header: map[string]string{
		"Authorization": "Bearer " + viewerSecret, "X-Request-Id": "req-acc"}})
	lines := logs.Lines(t, "request")
	if len(lines) != 1 {
		t.Fatalf("%d access lines:\n%s", len(lines), logs)
	}
	l := lines[0]
	want := map[string]any{"method": "GET", "route": "/v1/tenants/{tenantId}/task", "status": 200.0, "actor": "watcher",
		"client_addr": "192.0.2.1", "request_id": "req-acc", "component": "httpapi"}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("access %s = %#v, want %#v", k, l[k], v)
		}
	}
	if size, _ := l["size"].(float64); size < 100 {
		t.Errorf("access size = %v", l["size"])
	}
	if _, ok := l["duration"].(float64); !ok {
		t.Errorf("access line has no duration: %v", l)
	}
}

func TestClientAddr(t *testing.T) {
	t.Parallel()
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	tests := []struct {
		name, remote, xff, want string
	}{
		{"DirectOK", "192.0.2.9:5000", "", "192.0.2.9"},
		{"UntrustedPeerXFFIgnored", "192.0.2.9:5000", "203.0.113.7", "192.0.2.9"},
		{"TrustedProxyOK", "10.0.0.5:5000", "203.0.113.7", "203.0.113.7"},
		{"SpoofedLeftIgnored", "10.0.0.5:5000", "6.6.6.6, 203.0.113.7, 10.1.2.3", "203.0.113.7"},
		{"AllTrustedLeftMost", "10.0.0.5:5000", "10.9.9.9, 10.1.2.3", "10.9.9.9"},
		{"GarbageStopsWalk", "10.0.0.5:5000", "203.0.113.7, not-an-ip", "10.0.0.5"},
		{"TrustedNoXFF", "10.0.0.5:5000", "", "10.0.0.5"},
		{"IPv6TrustedOK", "[::1]:5000", "2001:db8::7", "2001:db8::7"},
		{"IPv6PeerOK", "[2001:db8::9]:443", "6.6.6.6", "2001:db8::9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := newFake()
			h, logs := newAPI(t, svc, httpapi.Config{TrustedProxies: proxies})
			hdr := map[string]string{}
			if tt.xff != "" {
				hdr["X-Forwarded-For"] = tt.xff
			}
			serve(t, h, request{method: "POST", path: "/v1/tenants/t-001/pause", body: `{"reason": "r"}`, header: hdr, remote: tt.remote})
			if got := svc.Last().Actor.Addr; got != tt.want {
				t.Errorf("actor address = %q, want %q", got, tt.want)
			}
			if l := logs.Lines(t, "request"); len(l) != 1 || l[0]["client_addr"] != tt.want {
				t.Errorf("access log client_addr = %v, want %q", l, tt.want)
			}
		})
	}
}

func TestMetricsAccess(t *testing.T) {
	t.Parallel()
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "deploycoord_up 1")
	})
	tests := []struct {
		name    string
		cfg     httpapi.Config
		remote  string
		header  map[string]string
		status  int
		checked bool // the body is the metrics
	}{
		{"LoopbackOK", httpapi.Config{Tokens: testTokens(), Metrics: metrics}, "127.0.0.1:4000", nil, 200, true},
		{"LoopbackV6OK", httpapi.Config{Tokens: testTokens(), Metrics: metrics}, "[::1]:4000", nil, 200, true},
		{"RemoteNoToken", httpapi.Config{Tokens: testTokens(), Metrics: metrics}, "192.0.2.1:4000", nil, 401, false},
		{"RemoteBadToken", httpapi.Config{Tokens: testTokens(), Metrics: metrics}, "192.0.2.1:4000", bearer(unknownSecret), 401, false},
		{"RemoteViewerOK", httpapi.Config{Tokens: testTokens(), Metrics: metrics}, "192.0.2.1:4000", bearer(viewerSecret), 200, true},
		{"AuthOffRemoteOK", httpapi.Config{Metrics: metrics}, "192.0.2.1:4000", nil, 200, true},
		{"NotServed", httpapi.Config{Tokens: testTokens()}, "127.0.0.1:4000", nil, 404, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, _ := newAPI(t, newFake(), tt.cfg)
			a := serve(t, h, request{method: "GET", path: "/metrics", remote: tt.remote, header: tt.header})
			if a.Status != tt.status {
				t.Fatalf("GET /metrics = %d, want %d: %s", a.Status, tt.status, a.Body)
			}
			if tt.checked != strings.Contains(string(a.Body), "deploycoord_up 1") {
				t.Errorf("body = %q", a.Body)
			}
		})
	}
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	t.Run("PerToken", func(t *testing.T) {
		t.Parallel()
		tokens := append(testTokens(), httpapi.Token{Name: "ops2", Role: httpapi.RoleOperator, Hash: httpapi.HashSecret("ops2-secret-0123456789abcdef")})
		svc := newFake()
		h, logs := newAPI(t, svc, httpapi.Config{Tokens: tokens, RateLimit: 2, RateWindow: time.Minute})
		pause := func(secret string) answer {
			return serve(t, h, request{method: "POST", path: "/v1/tenants/t-001/pause", body: `{"reason": "r"}`, header: bearer(secret)})
		}
		for i := range 2 {
			if a := pause(opsSecret); a.Status != 200 {
				t.Fatalf("change %d = %d", i, a.Status)
			}
		}
		a := pause(opsSecret)
		a.problem(t, 429, httpapi.CodeRateLimited)
		if ra := a.Header.Get("Retry-After"); ra != "60" {
			t.Errorf("Retry-After = %q, want 60", ra)
		}
		if svc.Calls() != 2 {
			t.Errorf("service called %d times, want 2", svc.Calls())
		}
		if a := pause("ops2-secret-0123456789abcdef"); a.Status != 200 {
			t.Errorf("another token's change = %d, want 200", a.Status)
		}
		for range 5 {
			if a := serve(t, h, request{method: "GET", path: "/v1/tenants/t-001/task", header: bearer(opsSecret)}); a.Status != 200 {
				t.Fatalf("read after the limit = %d, want 200", a.Status)
			}
		}
		if a := serve(t, h, request{method: "POST", path: "/v1/tenants:status", body: `{"tenantIds": ["t-001"]}`, header: bearer(opsSecret)}); a.Status != 200 {
			t.Errorf("tenants:status after the limit = %d, want 200", a.Status)
		}
		denied := 0
		for _, l := range logs.Lines(t, "audit") {
			if l["denied"] == "rate limit" && l["status"] == 429.0 && l["actor"] == "ops" {
				denied++
			}
		}
		if denied != 1 {
			t.Errorf("%d audit lines for the refused change, want 1:\n%s", denied, logs)
		}
	})
	t.Run("PerAddressWhenAnonymous", func(t *testing.T) {
		t.Parallel()
		h, _ := newAPI(t, newFake(), httpapi.Config{RateLimit: 1, RateWindow: time.Minute})
		cancel := func(remote string) int {
			return serve(t, h, request{method: "POST", path: "/v1/tenants/t-001/cancel", body: `{"reason": "r"}`, remote: remote}).Status
		}
		if s := cancel("192.0.2.1:1"); s != 200 {
			t.Fatalf("first = %d", s)
		}
		if s := cancel("192.0.2.1:2"); s != 429 {
			t.Errorf("second from the same address = %d, want 429", s)
		}
		if s := cancel("192.0.2.2:1"); s != 200 {
			t.Errorf("first from another address = %d, want 200", s)
		}
	})
	t.Run("OffOK", func(t *testing.T) {
		t.Parallel()
		h, _ := newAPI(t, newFake(), httpapi.Config{RateLimit: -1})
		for range 70 {
			if a := serve(t, h, request{method: "POST", path: "/v1/tenants/t-001/cancel", body: `{"reason": "r"}`}); a.Status != 200 {
				t.Fatalf("change with no limit = %d", a.Status)
			}
		}
	})
}

func TestMaxInFlight(t *testing.T) {
	t.Parallel()
	svc := newFake()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	svc.ByTenant = func(ctx context.Context, id string) (facade.TaskView, error) {
		if id == "t-slow" {
			once.Do(func() { close(entered) })
			<-release
		}
		return sampleTask(), nil
	}
	h, _ := newAPI(t, svc, httpapi.Config{MaxInFlight: 1, Ready: func(context.Context) error { return nil }})
	done := make(chan answer)
	go func() {
		done <- serve(t, h, request{method: "GET", path: "/v1/tenants/t-slow/task"})
	}()
	<-entered
	a := serve(t, h, request{method: "GET", path: "/v1/tenants/t-001/task"})
	a.problem(t, 503, httpapi.CodeUnavailable)
	if a.Header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After = %q", a.Header.Get("Retry-After"))
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if a := serve(t, h, request{method: "GET", path: p}); a.Status != 200 {
			t.Errorf("GET %s while full = %d, want 200", p, a.Status)
		}
	}
	close(release)
	if a := <-done; a.Status != 200 {
		t.Fatalf("the slow request = %d", a.Status)
	}
	if a := serve(t, h, request{method: "GET", path: "/v1/tenants/t-001/task"}); a.Status != 200 {
		t.Errorf("after the slot freed = %d, want 200", a.Status)
	}
}

func TestObserve(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen []string
	)
	h, _ := newAPI(t, newFake(), httpapi.Config{Tokens: testTokens(), Observe: func(route string, code int, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%s %d %t", route, code, d >= 0))
	}})
	serve(t, h, request{method: "GET", path: "/v1/tenants/t-001/task", header: bearer(viewerSecret)})
	serve(t, h, request{method: "GET", path: "/v1/tenants/t-001/task"})
	serve(t, h, request{method: "GET", path: "/v1/nothing", header: bearer(viewerSecret)})
	serve(t, h, request{method: "GET", path: "/healthz"})
	want := []string{"/v1/tenants/{tenantId}/task 200 true", "/v1/tenants/{tenantId}/task 401 true", "unmatched 404 true", "/healthz 200 true"}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("observed %v, want %v", seen, want)
	}
}

// TestRefusalsReachTheFeed: an operator action that was refused or failed
// is recorded for the event feed (operator.refused) with who, what, on
// what, why and how it ended; unauthenticated requests and actions carried
// out are not.
func TestRefusalsReachTheFeed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  request
		err  error
		want *facade.Refusal // nil: no refusal recorded
	}{
		{"ChangeOK", request{method: "POST", path: "/v1/tenants/t-001/pause", body: `{"reason": "hold"}`, header: bearer(opsSecret)}, nil, nil},
		{"Conflict", request{method: "POST", path: "/v1/tenants/t-001/retry", body: `{"reason": "INC-5 again"}`, header: bearer(opsSecret)}, facade.ErrTaskRunning,
			&facade.Refusal{Actor: facade.Actor{Name: "ops", Role: "operator"}, Action: "POST /v1/tenants/{tenantId}/retry", TenantID: "t-001",
				Reason: "INC-5 again", Status: 409, Code: httpapi.CodeTaskRunning}},
		{"BadBody", request{method: "POST", path: "/v1/plans/" + planID + "/cancel", body: `{"reason": "x", "bogus": 1}`, header: bearer(opsSecret)}, nil,
			&facade.Refusal{Actor: facade.Actor{Name: "ops", Role: "operator"}, Action: "POST /v1/plans/{planId}/cancel", PlanID: planID, Status: 400}},
		{"ViewerDenied", request{method: "POST", path: "/v1/tenants/t-001/cancel", body: `{"reason": "r"}`, header: bearer(viewerSecret)}, nil,
			&facade.Refusal{Actor: facade.Actor{Name: "watcher", Role: "viewer"}, Action: "POST /v1/tenants/{tenantId}/cancel", TenantID: "t-001",
				Status: 403, Code: httpapi.CodePermissionDenied}},
		{"UnknownToken", request{method: "POST", path: "/v1/tenants/t-001/cancel", body: `{"reason": "r"}`, header: bearer(unknownSecret)}, nil, nil},
		{"NoToken", request{method: "DELETE", path: "/v1/tenants/t-001/lock", body: `{"reason": "r", "expectedFence": 1}`}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake()
			f.Err = tt.err
			h, _ := newAPI(t, f, httpapi.Config{Tokens: testTokens()})
			rq := tt.req
			rq.header = map[string]string{"X-Request-Id": "req-" + tt.name}
			for k, v := range tt.req.header {
				rq.header[k] = v
			}
			serve(t, h, rq)
			got := f.Refusals()
			if tt.want == nil {
				if len(got) != 0 {
					t.Fatalf("refusals recorded: %+v, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("%d refusals recorded, want 1: %+v", len(got), got)
			}
			r, want := got[0], *tt.want
			if r.Actor.RequestID != "req-"+tt.name || r.Actor.Addr == "" {
				t.Errorf("refusal lacks the request id or client address: %+v", r)
			}
			r.Actor.RequestID, r.Actor.Addr = "", ""
			if want.Code == "" {
				want.Code = r.Code // a decoding error's code is checked elsewhere
				if r.Code == "" {
					t.Errorf("refusal without a problem code: %+v", r)
				}
			}
			if r != want {
				t.Errorf("refusal %+v, want %+v", r, want)
			}
		})
	}
}

// TestRefusalActorFunc: a refusal recorded for the feed names the actor
// Config.ActorFunc makes, the one the service call carried.
func TestRefusalActorFunc(t *testing.T) {
	t.Parallel()
	f := newFake()
	f.Err = facade.ErrTaskRunning
	h, _ := newAPI(t, f, httpapi.Config{Tokens: testTokens(), ActorFunc: func(r *http.Request) facade.Actor {
		return facade.Actor{Name: "alice@sso", Role: "release-manager", Addr: "sso-gateway"}
	}})
	serve(t, h, request{method: "POST", path: "/v1/tenants/t-001/retry", body: `{"reason": "INC-5"}`,
		header: map[string]string{"Authorization": "Bearer " + opsSecret, "X-Request-Id": "req-actor"}})
	got := f.Refusals()
	if len(got) != 1 {
		t.Fatalf("%d refusals recorded, want 1: %+v", len(got), got)
	}
	want := facade.Actor{Name: "alice@sso", Role: "release-manager", RequestID: "req-actor", Addr: "sso-gateway"}
	if got[0].Actor != want {
		t.Errorf("refusal actor = %+v, want %+v", got[0].Actor, want)
	}
	if call := f.Last(); call.Method != "Retry" || call.Actor != want {
		t.Errorf("service call %s with actor %+v, want Retry with %+v", call.Method, call.Actor, want)
	}
}

// TestAuthRefusalDetails: a 401 says what is wrong with the credentials —
// missing, malformed (and how), or not recognised — and a 403 which role
// the route needs and which the token has, so the operator of the client
// can fix it; neither ever echoes the secret sent, in the answer or the
// logs. Codes and WWW-Authenticate stay as documented.
func TestAuthRefusalDetails(t *testing.T) {
	t.Parallel()
	long := "long-" + strings.Repeat("Zq9", 10240/3) // 10 KB
	cases := []struct {
		name      string
		header    []string // Authorization values; nil: none
		method    string
		path      string
		status    int
		challenge string // WWW-Authenticate's error, "" for none
		detail    []string
		secret    string // must not show
	}{
		{"Missing", nil, "GET", "/v1/plans", 401, "", []string{"no bearer token", "no Authorization header"}, ""},
		{"BearerAlone", []string{"Bearer"}, "GET", "/v1/plans", 401, "invalid_request",
			[]string{"malformed Authorization header", "Bearer with no token after it"}, ""},
		{"BearerSpaces", []string{"Bearer   "}, "GET", "/v1/plans", 401, "invalid_request",
			[]string{"Bearer with no token after it"}, ""},
		{"ControlCharacters", []string{"Bearer " + opsSecret + "\x01"}, "GET", "/v1/plans", 401, "invalid_request",
			[]string{"malformed Authorization header", "control characters"}, opsSecret},
		{"LineEnd", []string{"Bearer " + opsSecret + "\r"}, "GET", "/v1/plans", 401, "invalid_request",
			[]string{"control characters"}, opsSecret},
		{"TenKilobytes", []string{"Bearer " + long}, "GET", "/v1/plans", 401, "invalid_request",
			[]string{"malformed Authorization header", fmt.Sprintf("%d bytes", len(long)), "(1024)"}, long[:40]},
		{"Space", []string{"Bearer " + opsSecret + " extra"}, "GET", "/v1/plans", 401, "invalid_request",
			[]string{"contains a space"}, opsSecret},
		{"NotBearer", []string{"Basic " + opsSecret}, "GET", "/v1/plans", 401, "invalid_request",
			[]string{"must be Bearer <token>"}, opsSecret},
		{"SchemeOnlySecret", []string{opsSecret}, "GET", "/v1/plans", 401, "invalid_request",
			[]string{"must be Bearer <token>"}, opsSecret},
		{"TwoHeaders", []string{"Bearer " + opsSecret, "Bearer " + viewerSecret}, "GET", "/v1/plans", 401, "invalid_request",
			[]string{"2 Authorization headers"}, opsSecret},
		{"Unknown", []string{"Bearer " + unknownSecret}, "GET", "/v1/plans", 401, "invalid_token",
			[]string{"unknown token", "not one configured on this server"}, unknownSecret},
		{"ViewerPost", []string{"Bearer " + viewerSecret}, "POST", "/v1/plans/" + planID + "/pause", 403, "",
			[]string{"token watcher has role viewer", "POST /v1/plans/{planId}/pause needs role operator"}, viewerSecret},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			svc := newFake()
			h, logs := newAPI(t, svc, httpapi.Config{Tokens: testTokens()})
			var body io.Reader
			if c.method == "POST" {
				body = strings.NewReader(`{"reason": "INC-1"}`)
			}
			req := httptest.NewRequest(c.method, c.path, body)
			req.RemoteAddr = "192.0.2.1:4000"
			if body != nil {
				req.Header.Set("Content-Type", "application/json")
			}
			if c.header != nil {
				req.Header["Authorization"] = c.header // as sent: no validation on the way
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			a := answer{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
			code := httpapi.CodeUnauthenticated
			if c.status == 403 {
				code = httpapi.CodePermissionDenied
			}
			p := a.problem(t, c.status, code)
			for _, want := range c.detail {
				if !strings.Contains(p.Detail, want) {
					t.Errorf("detail %q lacks %q", p.Detail, want)
				}
			}
			if svc.Calls() != 0 {
				t.Errorf("the service was called %d times", svc.Calls())
			}
			ch := a.Header.Get("WWW-Authenticate")
			switch {
			case c.status == 403 && ch != "":
				t.Errorf("403 with WWW-Authenticate %q", ch)
			case c.status == 401 && c.challenge == "" && ch != `Bearer realm="deploycoord"`:
				t.Errorf("WWW-Authenticate = %q, want the bare challenge", ch)
			case c.status == 401 && c.challenge != "" && ch != `Bearer realm="deploycoord", error="`+c.challenge+`"`:
				t.Errorf("WWW-Authenticate = %q, want error=%q", ch, c.challenge)
			}
			if c.secret != "" {
				for where, s := range map[string]string{"answer": string(a.Body), "logs": logs.String()} {
					if strings.Contains(s, c.secret) {
						t.Errorf("the %s echo the secret sent:\n%s", where, s)
					}
				}
			}
		})
	}
}
