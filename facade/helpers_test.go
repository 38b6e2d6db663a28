package facade_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// Compile-time check: the repository stores implement facade.Store, the
// tenant locks facade.Locker, and their leases facade.Lease.
var (
	_ facade.Store                    = (*repository.Redis)(nil)
	_ facade.Store                    = (*repository.Memory)(nil)
	_ facade.Store                    = (*repository.Dual)(nil)
	_ facade.Locker[*redislock.Lease] = (*redislock.Locker)(nil)
	_ facade.Lease                    = (*redislock.Lease)(nil)
)

// bundle is one coordinator over a Redis backend, with a deployment target.
type bundle struct {
	t       *testing.T
	backend redistest.Backend
	client  redis.UniversalClient
	prefix  string
	store   *repository.Redis
	locks   *redislock.Locker
	coord   *facade.Coordinator
	target  *target
	gates   *gates
	cfg     facade.Config
	counter *redistest.Counter
}

type option func(*bundle)

func withConfig(f func(*facade.Config)) option { return func(b *bundle) { f(&b.cfg) } }

var anyone = facade.Actor{Name: "sre-test", Role: "operator", RequestID: "req-1"}

// setup builds a coordinator on backend b with a deployment target and the
// test stage kinds gate and skipper registered.
func setup(t *testing.T, be redistest.Backend, opts ...option) *bundle {
	t.Helper()
	client, prefix := be.New(t)
	b := &bundle{t: t, backend: be, client: client, prefix: prefix, target: newTarget(t), gates: newGates(), counter: &redistest.Counter{}}
	client.AddHook(b.counter)
	var err error
	b.store, err = repository.NewRedis(client, repository.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	reg := stage.NewRegistry(stage.Options{
		InlineKinds:     []string{"noop", "sleep", "http", "gate", "skipper"},
		InlineHTTPHosts: []string{"127.0.0.1"},
	})
	if err := reg.Register("gate", b.gates); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("skipper", stage.KindFunc(func(task.StageSpec, stage.Env) (stage.Runnable, error) {
		return stage.RunFunc(func(context.Context, stage.Input) task.Result { return task.Skip("nothing to do") }), nil
	})); err != nil {
		t.Fatal(err)
	}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	b.cfg = facade.Config{Instance: "coord-a", Lease: 5 * time.Second, Stages: reg, Logger: &log, PlanPoll: 50 * time.Millisecond, LockWaitPoll: 20 * time.Millisecond}
	for _, o := range opts {
		o(b)
	}
	keys := b.store.Keys()
	b.locks, err = redislock.New(client, redislock.Config{
		Lease:    b.cfg.Lease,
		LockKey:  func(tn string) string { k, _ := keys.Lock(tn); return k },
		FenceKey: func(tn string) string { k, _ := keys.Fence(tn); return k },
	})
	if err != nil {
		t.Fatal(err)
	}
	b.coord, err = facade.New(b.store, b.locks, b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.gates.openAll()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.coord.Shutdown(ctx)
	})
	return b
}

// second returns another coordinator instance on the same Redis and prefix.
func (b *bundle) second(instance string) *facade.Coordinator {
	b.t.Helper()
	return newCoordinator(b.t, b, b.store, b.locks, instance, nil)
}

// newCoordinator returns a coordinator instance on store and locks with
// b's configuration (instance as its id, then mod applied), shut down at
// the test's end.
func newCoordinator[L facade.Lease](t testing.TB, b *bundle, store facade.Store, locks facade.Locker[L], instance string, mod func(*facade.Config)) *facade.Coordinator {
	t.Helper()
	cfg := b.cfg
	cfg.Instance = instance
	if mod != nil {
		mod(&cfg)
	}
	c, err := facade.New(store, locks, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Shutdown(ctx)
	})
	return c
}

// stopDefault shuts b's own coordinator down, for a test that runs its
// own instances on b's store.
func (b *bundle) stopDefault() {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.coord.Shutdown(ctx); err != nil {
		b.t.Fatal(err)
	}
}

// withHook is be with hook added to every client it makes, before the
// client is used (AddHook is not safe with commands in flight).
func withHook(be redistest.Backend, hook redis.Hook) redistest.Backend {
	return redistest.Backend{Name: be.Name, Mini: be.Mini, New: func(t testing.TB) (redis.UniversalClient, string) {
		c, prefix := be.New(t)
		c.AddHook(hook)
		return c, prefix
	}}
}

// forBackends runs f as a parallel subtest on miniredis and on real Redis.
func forBackends(t *testing.T, f func(t *testing.T, be redistest.Backend)) {
	t.Helper()
	for _, be := range redistest.Backends() {
		t.Run(be.Name, func(t *testing.T) {
			t.Parallel()
			f(t, be)
		})
	}
}

// httpStage is an inline http stage calling the target for stage name.
func (b *bundle) httpStage(name string, retry task.RetryPolicy) task.StageSpec {
	cfg, _ := json.Marshal(map[string]any{
		"method": "POST",
		"url":    b.target.URL + "/t/{{.TenantID}}/" + name,
		"body":   `{"version": "{{.Params.version}}", "attempt": {{.Attempt}}}`,
	})
	return task.StageSpec{Name: name, Kind: "http", Timeout: task.Duration(5 * time.Second), Retry: retry, Config: cfg}
}

func noopStage(name string) task.StageSpec { return task.StageSpec{Name: name, Kind: "noop"} }

func gateStage(name string) task.StageSpec { return task.StageSpec{Name: name, Kind: "gate"} }

func spec(stages []task.StageSpec, tenants ...string) plan.Spec {
	s := plan.Spec{Name: "test-plan", Stages: stages, Params: map[string]any{"version": "1.2.3"}, MaxConcurrency: 4}
	for _, tn := range tenants {
		s.Tenants = append(s.Tenants, plan.TenantSpec{TenantID: tn})
	}
	return s
}

func (b *bundle) create(s plan.Spec) facade.PlanView {
	b.t.Helper()
	v, err := b.coord.CreatePlan(context.Background(), s, anyone)
	if err != nil {
		b.t.Fatalf("create plan: %v", err)
	}
	return v
}

// waitPlan waits until the plan's status is one of want.
func (b *bundle) waitPlan(c *facade.Coordinator, planID string, want ...plan.Status) facade.PlanView {
	b.t.Helper()
	var v facade.PlanView
	eventually(b.t, 15*time.Second, func() error {
		var err error
		v, err = c.Plan(context.Background(), planID)
		if err != nil {
			return err
		}
		for _, s := range want {
			if v.Status == s {
				return nil
			}
		}
		return fmt.Errorf("plan %s is %s (%v), want %v", planID, v.Status, v.Counts, want)
	})
	return v
}

// waitCounts waits (up to within) until the plan's counts, as c reads
// them, hold want for every status it names.
func (b *bundle) waitCounts(c *facade.Coordinator, planID string, within time.Duration, want map[task.Status]int) {
	b.t.Helper()
	eventually(b.t, within, func() error {
		pv, err := c.Plan(context.Background(), planID)
		if err != nil {
			return err
		}
		for s, n := range want {
			if pv.Counts[s] != n {
				return fmt.Errorf("counts %v, want %v", pv.Counts, want)
			}
		}
		return nil
	})
}

// waitTask waits until the tenant's task has status want (and, if the
// status is final or paused, no run of it is left on any coordinator).
func (b *bundle) waitTask(c *facade.Coordinator, tenant string, want task.Status) facade.TaskView {
	b.t.Helper()
	var v facade.TaskView
	eventually(b.t, 15*time.Second, func() error {
		var err error
		v, err = c.TaskByTenant(context.Background(), tenant)
		if err != nil {
			return err
		}
		if v.Status != want {
			return fmt.Errorf("task of %s is %s (%s), want %s", tenant, v.Status, v.LastError, want)
		}
		return nil
	})
	return v
}

func (b *bundle) idle(c *facade.Coordinator) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := c.Idle(ctx); err != nil {
		b.t.Fatalf("coordinator not idle: %v", err)
	}
}

func eventually(t *testing.T, within time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", within, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustCode(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want %v", err, want)
	}
}

// target is a deployment target: an httptest server recording every call
// to /t/{tenant}/{stage} and answering with scripted statuses.
type target struct {
	*httptest.Server
	mu      sync.Mutex
	calls   map[string]int
	keys    map[string][]string
	bodies  map[string][]string
	scripts map[string][]int
}

func newTarget(t *testing.T) *target {
	tg := &target{calls: map[string]int{}, keys: map[string][]string{}, bodies: map[string][]string{}, scripts: map[string][]int{}}
	tg.Server = httptest.NewServer(http.HandlerFunc(tg.serve))
	t.Cleanup(tg.Close)
	return tg
}

func (tg *target) serve(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/t/"), "/")
	if len(parts) != 2 {
		http.NotFound(w, r)
		return
	}
	key := parts[0] + "/" + parts[1]
	var body strings.Builder
	_, _ = fmt.Fprint(&body, readAll(r))
	tg.mu.Lock()
	tg.calls[key]++
	n := tg.calls[key]
	tg.keys[key] = append(tg.keys[key], r.Header.Get("Idempotency-Key"))
	tg.bodies[key] = append(tg.bodies[key], body.String())
	status := http.StatusOK
	if s := tg.scripts[key]; len(s) > 0 {
		status = s[min(n, len(s))-1]
	}
	tg.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"tenant": parts[0], "stage": parts[1], "call": n, "status": status})
}

func readAll(r *http.Request) string {
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			return sb.String()
		}
	}
}

// script makes calls for tenant/stage answer with statuses in order (the
// last one repeats).
func (tg *target) script(tenant, stageName string, statuses ...int) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.scripts[tenant+"/"+stageName] = statuses
}

func (tg *target) count(tenant, stageName string) int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.calls[tenant+"/"+stageName]
}

func (tg *target) idempotencyKeys(tenant, stageName string) []string {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]string(nil), tg.keys[tenant+"/"+stageName]...)
}

func (tg *target) host() string {
	u, _ := url.Parse(tg.URL)
	return u.Host
}

// gates is the test stage kind "gate": a run blocks until the test opens
// the gate of its tenant and stage (or its context ends), then succeeds.
type gates struct {
	mu      sync.Mutex
	open    map[string]chan struct{}
	entered map[string]chan struct{}
	all     chan struct{}
	once    sync.Once
}

func newGates() *gates {
	return &gates{open: map[string]chan struct{}{}, entered: map[string]chan struct{}{}, all: make(chan struct{})}
}

func (g *gates) chans(key string) (open, entered chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open[key] == nil {
		g.open[key] = make(chan struct{})
		g.entered[key] = make(chan struct{}, 100)
	}
	return g.open[key], g.entered[key]
}

// Compile implements stage.Kind.
func (g *gates) Compile(spec task.StageSpec, _ stage.Env) (stage.Runnable, error) {
	return stage.RunFunc(func(ctx context.Context, in stage.Input) task.Result {
		open, entered := g.chans(in.TenantID + "/" + in.Stage)
		entered <- struct{}{}
		select {
		case <-open:
			return task.Success(map[string]any{"gate": in.Stage})
		case <-g.all:
			return task.Success(map[string]any{"gate": in.Stage})
		case <-ctx.Done():
			return task.Failure("gate: "+ctx.Err().Error(), true)
		}
	}), nil
}

// wait blocks until a run entered the gate of tenant/stage.
func (g *gates) wait(t *testing.T, tenant, stageName string) {
	t.Helper()
	_, entered := g.chans(tenant + "/" + stageName)
	select {
	case <-entered:
	case <-time.After(15 * time.Second):
		t.Fatalf("nobody entered gate %s/%s", tenant, stageName)
	}
}

func (g *gates) release(tenant, stageName string) {
	open, _ := g.chans(tenant + "/" + stageName)
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-open:
	default:
		close(open)
	}
}

func (g *gates) openAll() { g.once.Do(func() { close(g.all) }) }
