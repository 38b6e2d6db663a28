package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/httpapi/console"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// Token secrets of the bundle's server.
const (
	viewerSecret   = "viewer-secret-0123456789"
	operatorSecret = "operator-secret-0123456789"
)

// hostile is put into every value a person can choose or a target can
// answer: plan names, params, reasons, stage errors, stage outputs.
const hostile = `<script>alert("x")</script>`

// bundle is the console and the API as cmd/deploycoord wires them, over a
// real coordinator on miniredis, with http stages calling a real target.
type bundle struct {
	t      testing.TB
	coord  *facade.Coordinator
	shared bool
	srv    *httptest.Server
	target *target
	client redis.UniversalClient
	prefix string
	base   string
}

// target is a deployment target: 200 with JSON outputs (holding hostile
// text), 500 with a hostile body to the "verify" stage of failing tenants,
// and, for held tenants, an answer only once released.
type target struct {
	srv  *httptest.Server
	mu   sync.Mutex
	fail map[string]bool
	hold map[string]chan struct{}
}

func newTarget(t testing.TB) *target {
	tg := &target{fail: map[string]bool{}, hold: map[string]chan struct{}{}}
	tg.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/") // tenants/<id>/<stage>
		tenant := ""
		if len(parts) >= 2 {
			tenant = parts[1]
		}
		tg.mu.Lock()
		fail, gate := tg.fail[tenant], tg.hold[tenant]
		tg.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		if fail && len(parts) == 3 && parts[2] == "verify" {
			http.Error(w, "config server down "+hostile, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"note": %q}`, hostile)
	}))
	t.Cleanup(func() {
		tg.mu.Lock()
		for k, ch := range tg.hold {
			close(ch)
			delete(tg.hold, k)
		}
		tg.mu.Unlock()
		tg.srv.Close()
	})
	return tg
}

func (tg *target) setFail(tenant string, fail bool) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.fail[tenant] = fail
}

// holdTenant makes the tenant's calls wait until release is called.
func (tg *target) holdTenant(tenant string) (release func()) {
	ch := make(chan struct{})
	tg.mu.Lock()
	tg.hold[tenant] = ch
	tg.mu.Unlock()
	return sync.OnceFunc(func() {
		tg.mu.Lock()
		if tg.hold[tenant] == ch {
			delete(tg.hold, tenant)
			close(ch)
		}
		tg.mu.Unlock()
	})
}

type bundleOpts struct {
	noTokens bool
	basePath string
	// realRedis runs on the shared real Redis (skipping without one)
	// instead of miniredis.
	realRedis bool
	// shared: the coordinator shares plans' work (retries are queued), as
	// cmd/deploycoord's default.
	shared bool
	// wrap, when set, returns the service the console talks to, around
	// the bundle's coordinator (to stand in for states too large to make).
	wrap func(*facade.Coordinator) console.Service
}

func setup(t testing.TB, o bundleOpts) *bundle {
	t.Helper()
	var (
		client redis.UniversalClient
		prefix = redistest.Prefix(t)
	)
	if o.realRedis {
		client, prefix = redistest.Real(t)
	} else {
		_, client = redistest.Mini(t)
	}
	b := &bundle{t: t, client: client, prefix: prefix, target: newTarget(t), base: o.basePath}
	b.shared = o.shared
	b.coord = b.newCoordinator("coord-a")
	var tokens []httpapi.Token
	if !o.noTokens {
		tokens = []httpapi.Token{
			{Name: "vera", Role: httpapi.RoleViewer, Hash: httpapi.HashSecret(viewerSecret)},
			{Name: "otto", Role: httpapi.RoleOperator, Hash: httpapi.HashSecret(operatorSecret)},
		}
	}
	var svc console.Service = b.coord
	if o.wrap != nil {
		svc = o.wrap(b.coord)
	}
	con, err := console.New(svc, console.Config{BasePath: o.basePath, Tokens: tokens, Version: "test",
		PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mounts []httpapi.Mount
	for _, p := range con.Paths() {
		mounts = append(mounts, httpapi.Mount{Path: p, Handler: con})
	}
	h := httpapi.New(b.coord, httpapi.Config{Tokens: tokens, Mounts: mounts, Home: con.Home(), RateLimit: -1})
	b.srv = httptest.NewServer(h)
	b.srv.Config.RegisterOnShutdown(con.Close)
	t.Cleanup(func() { con.Close(); b.srv.Close() })
	return b
}

// newCoordinator returns a coordinator on the bundle's Redis and prefix,
// named instance, shut down when the test ends.
func (b *bundle) newCoordinator(instance string) *facade.Coordinator {
	t := b.t
	rs, err := repository.NewRedis(b.client, repository.Config{Prefix: b.prefix})
	if err != nil {
		t.Fatal(err)
	}
	keys := rs.Keys()
	locks, err := redislock.New(b.client, redislock.Config{Lease: 5 * time.Second,
		LockKey:  func(id string) string { k, _ := keys.Lock(id); return k },
		FenceKey: func(id string) string { k, _ := keys.Fence(id); return k },
	})
	if err != nil {
		t.Fatal(err)
	}
	store := repository.NewDual(repository.NewMemory(repository.MemoryConfig{DropFinished: true}), rs)
	c, err := facade.New(store, locks, facade.Config{Instance: instance, Lease: 5 * time.Second, SharedPlans: b.shared,
		Stages: stage.NewRegistry(stage.Options{InlineHTTPHosts: []string{"127.0.0.1"}})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = c.Shutdown(ctx)
	})
	return c
}

// createPlan creates and starts a plan of the tenants on coord: two http
// stages ("push", "verify") calling the target.
func (b *bundle) createPlan(coord *facade.Coordinator, name string, tenants ...string) facade.PlanView {
	b.t.Helper()
	stages := []task.StageSpec{httpStage(b.target, "push"), httpStage(b.target, "verify")}
	spec := plan.Spec{Name: name, Stages: stages, Params: map[string]any{"version": hostile}}
	for _, id := range tenants {
		spec.Tenants = append(spec.Tenants, plan.TenantSpec{TenantID: id})
	}
	v, err := coord.CreatePlan(context.Background(), spec, facade.Actor{Name: "test"})
	if err != nil {
		b.t.Fatalf("create plan: %v", err)
	}
	return v
}

func httpStage(tg *target, name string) task.StageSpec {
	cfg, _ := json.Marshal(map[string]any{"method": "POST", "url": tg.srv.URL + "/tenants/{{.TenantID}}/" + name})
	return task.StageSpec{Name: name, Kind: "http", Timeout: task.Duration(30 * time.Second), Config: cfg}
}

// waitTask waits until the tenant's task is in status want.
func (b *bundle) waitTask(tenant string, want task.Status) facade.TaskView {
	b.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tv, err := b.coord.TaskByTenant(context.Background(), tenant)
		if err == nil && tv.Status == want {
			return tv
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("tenant %s: %v (%v), want %s", tenant, tv.Status, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitPlan waits until the plan is in status want.
func (b *bundle) waitPlan(planID string, want plan.Status) {
	b.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pv, err := b.coord.Plan(context.Background(), planID)
		if err == nil && pv.Status == want {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("plan %s: %v (%v), want %s", planID, pv.Status, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// browser is a client with its own cookies that does not follow redirects.
type browser struct {
	b  *bundle
	hc *http.Client
}

func (b *bundle) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{b: b, hc: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// signedIn returns a browser signed in with secret.
func (b *bundle) signedIn(secret string) *browser {
	b.t.Helper()
	br := b.browser()
	res := br.post(b.ui("sign-in"), url.Values{"token": {secret}, "next": {b.ui("")}}, nil)
	if res.status != http.StatusSeeOther {
		b.t.Fatalf("sign-in: %d %s", res.status, res.body)
	}
	return br
}

// ui is a console path as the browser sees it.
func (b *bundle) ui(p string) string { return b.base + "/ui/" + p }

type page struct {
	status int
	header http.Header
	body   string
}

func (br *browser) do(req *http.Request) page {
	br.b.t.Helper()
	res, err := br.hc.Do(req)
	if err != nil {
		br.b.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return page{status: res.StatusCode, header: res.Header, body: string(body)}
}

func (br *browser) get(path string) page {
	br.b.t.Helper()
	req, _ := http.NewRequest("GET", br.b.srv.URL+path, nil)
	return br.do(req)
}

// post sends a form, with header.
func (br *browser) post(path string, form url.Values, header map[string]string) page {
	br.b.t.Helper()
	req, _ := http.NewRequest("POST", br.b.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return br.do(req)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of the page at path.
func (br *browser) csrf(path string) string {
	br.b.t.Helper()
	p := br.get(path)
	m := csrfRe.FindStringSubmatch(p.body)
	if m == nil {
		br.b.t.Fatalf("no CSRF token on %s (%d)", path, p.status)
	}
	return m[1]
}

// mustStatus fails unless the page answered want.
func (p page) mustStatus(t *testing.T, want int, what string) page {
	t.Helper()
	if p.status != want {
		t.Fatalf("%s: status %d, want %d\n%.3000s", what, p.status, want, p.body)
	}
	return p
}

// mustContain fails unless the body holds every string.
func (p page) mustContain(t *testing.T, what string, subs ...string) page {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(p.body, s) {
			t.Errorf("%s: no %q in the page\n%.4000s", what, s, p.body)
		}
	}
	return p
}

func (p page) mustNotContain(t *testing.T, what string, subs ...string) page {
	t.Helper()
	for _, s := range subs {
		if strings.Contains(p.body, s) {
			t.Errorf("%s: %q is in the page", what, s)
		}
	}
	return p
}

var (
	inlineScriptRe = regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]`)
	scriptTagRe    = regexp.MustCompile(`<script[^>]*>`)
	styleAttrRe    = regexp.MustCompile(`\sstyle=`)
	handlerAttrRe  = regexp.MustCompile(`\son[a-z]+=`)
)

// mustBeSafe checks what the Content-Security-Policy relies on: the policy
// is sent, the only script is the console's own file, nothing inline, and
// no hostile value reached the page unescaped.
func (p page) mustBeSafe(t *testing.T, what string) {
	t.Helper()
	csp := p.header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("%s: Content-Security-Policy %q", what, csp)
	}
	for _, tag := range scriptTagRe.FindAllString(p.body, -1) {
		if !strings.Contains(tag, `src="`) || !strings.Contains(tag, "/static/console.js") {
			t.Errorf("%s: script tag %s is not the console's script", what, tag)
		}
	}
	if m := inlineScriptRe.FindString(p.body); m != "" {
		t.Errorf("%s: inline script %q", what, m)
	}
	if styleAttrRe.MatchString(p.body) || handlerAttrRe.MatchString(p.body) || strings.Contains(p.body, "<style") {
		t.Errorf("%s: inline style or event handler in the page", what)
	}
	if strings.Contains(p.body, hostile) || strings.Contains(p.body, `alert("x")`) {
		t.Errorf("%s: a hostile value is not escaped", what)
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
