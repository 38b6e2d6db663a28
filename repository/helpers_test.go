package repository

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// The three stores implement the coordinator's port.
var (
	_ facade.Store = (*Redis)(nil)
	_ facade.Store = (*Memory)(nil)
	_ facade.Store = (*Dual)(nil)
)

var t0 = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

// clock is a settable clock shared by a test and its store.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// env is one store under test with the means to play the tenant lock.
type env struct {
	store facade.Store
	clock *clock
	// setLock sets (value != "") or deletes a tenant's lock.
	setLock func(tenantID, value string)
	// lockValue reads a tenant's lock ("" when not held).
	lockValue func(tenantID string) string
	// Redis only.
	redis   *Redis
	client  redis.UniversalClient
	counter *redistest.Counter
	prefix  string
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newRedisEnv(t testing.TB, c redis.UniversalClient, prefix string, cfg Config) *env {
	t.Helper()
	cl := &clock{now: t0}
	cfg.Prefix = prefix
	if cfg.Clock == nil {
		cfg.Clock = cl.Now
	}
	counter := &redistest.Counter{}
	c.AddHook(counter)
	r, err := NewRedis(c, cfg)
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	return &env{
		store: r, clock: cl, redis: r, client: c, counter: counter, prefix: prefix,
		setLock: func(tenantID, value string) {
			k, _ := r.Keys().Lock(tenantID)
			if value == "" {
				c.Del(context.Background(), k)
				return
			}
			c.Set(context.Background(), k, value, time.Minute)
		},
		lockValue: func(tenantID string) string {
			k, _ := r.Keys().Lock(tenantID)
			return c.Get(context.Background(), k).Val()
		},
	}
}

func newMemoryEnv(t *testing.T) *env {
	t.Helper()
	cl := &clock{now: t0}
	var mu sync.Mutex
	locks := map[string]string{}
	m := NewMemory(MemoryConfig{
		Clock: cl.Now,
		LockValue: func(tenantID string) string {
			mu.Lock()
			defer mu.Unlock()
			return locks[tenantID]
		},
		ReleaseLock: func(tenantID, value string) {
			mu.Lock()
			defer mu.Unlock()
			if locks[tenantID] == value {
				delete(locks, tenantID)
			}
		},
	})
	return &env{
		store: m, clock: cl,
		setLock: func(tenantID, value string) {
			mu.Lock()
			defer mu.Unlock()
			if value == "" {
				delete(locks, tenantID)
			} else {
				locks[tenantID] = value
			}
		},
		lockValue: func(tenantID string) string {
			mu.Lock()
			defer mu.Unlock()
			return locks[tenantID]
		},
	}
}

// eachStore runs f on the Redis store over miniredis and over the real Redis,
// and on the memory store.
func eachStore(t *testing.T, f func(t *testing.T, e *env)) {
	t.Helper()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			c, prefix := b.New(t)
			f(t, newRedisEnv(t, c, prefix, Config{}))
		})
	}
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		f(t, newMemoryEnv(t))
	})
}

// eachRedis runs f on the Redis store over miniredis and the real Redis.
func eachRedis(t *testing.T, cfg Config, f func(t *testing.T, e *env)) {
	t.Helper()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			c, prefix := b.New(t)
			f(t, newRedisEnv(t, c, prefix, cfg))
		})
	}
}

var stageNames = []string{"push-config", "migrate", "settle"}

func stages() []task.StageSpec {
	out := make([]task.StageSpec, len(stageNames))
	for i, n := range stageNames {
		out[i] = task.StageSpec{Name: n, Kind: "noop"}
	}
	return out
}

// tenantName returns the i-th tenant id of a test plan.
func tenantName(i int) string { return fmt.Sprintf("t-%05d", i) }

// fixture is a stored plan and its tasks as created.
type fixture struct {
	plan  *plan.Plan
	tasks []*task.Task
}

// createPlan stores a RUNNING plan with n tasks for tenants t-00000.. and
// maxFailed as failure threshold.
func createPlan(t testing.TB, e *env, n, maxFailed int) fixture {
	t.Helper()
	now := e.clock.Now()
	p := &plan.Plan{
		ID: plan.NewID(now), Name: "rollout", Status: plan.StatusCreated, Stages: stages(),
		Params: map[string]any{"version": "1.2.3"}, MaxConcurrency: 5, OnTenantLocked: plan.LockWait,
		LockWait: 5 * time.Minute, MaxFailed: maxFailed, TotalTasks: n, CreatedAt: now, UpdatedAt: now,
	}
	if err := p.Start(now, "coord-a"); err != nil {
		t.Fatal(err)
	}
	tasks := make([]*task.Task, n)
	for i := range tasks {
		tasks[i] = task.New(task.NewID(now), p.ID, tenantName(i), map[string]any{"version": "1.2.3", "n": float64(i)}, stageNames, now)
	}
	if err := e.store.CreatePlan(ctxT(t), p, tasks); err != nil {
		t.Fatalf("CreatePlan: %v", err)
	}
	return fixture{plan: p, tasks: tasks}
}

// runner plays the instance running a task: it holds the tenant lock with
// a fence and writes the task's transitions.
type runner struct {
	t     *testing.T
	e     *env
	tk    *task.Task
	guard task.Guard
}

// start takes the tenant's lock with fence and moves the task PENDING → RUNNING.
func start(t *testing.T, e *env, tk *task.Task, fence int64) *runner {
	t.Helper()
	r := &runner{t: t, e: e, tk: tk.Clone(), guard: task.Guard{LockValue: fmt.Sprintf("lock-%s-%d", tk.TenantID, fence), Fence: fence}}
	e.setLock(tk.TenantID, r.guard.LockValue)
	prev := r.tk.Status
	if err := r.tk.Start(e.clock.Now(), "coord-a", fence); err != nil {
		t.Fatal(err)
	}
	r.mustWrite(prev, task.Write{Events: []task.Event{{At: e.clock.Now(), Type: task.EventStarted, Fence: fence}}})
	return r
}

// rerun takes over tk as stored (FAILED, PAUSED, CANCELLED or an orphaned
// RUNNING task) as the coordinator re-runs a task: a new lock and fence,
// owner, and one write with ClearRequests.
func rerun(t *testing.T, e *env, tk *task.Task, fence int64, owner string) (*runner, task.WriteResult) {
	t.Helper()
	r := &runner{t: t, e: e, tk: tk.Clone(), guard: task.Guard{LockValue: fmt.Sprintf("lock-%s-%d", tk.TenantID, fence), Fence: fence}}
	e.setLock(tk.TenantID, r.guard.LockValue)
	prev := r.tk.Status
	if err := r.tk.Rerun(e.clock.Now(), owner, fence, 0, stageNames[0], task.RetryNew, prev == task.StatusRunning); err != nil {
		t.Fatal(err)
	}
	res := r.mustWrite(prev, task.Write{DeleteCheckpoint: true, ClearRequests: true,
		Events: []task.Event{{At: e.clock.Now(), Type: task.EventStarted, Fence: fence}}})
	return r, res
}

// write sends the runner's task with w's other fields; it fills Task,
// PrevStatus, ExpectSeq and Guard.
func (r *runner) write(prev task.Status, w task.Write) (task.WriteResult, error) {
	w.Task, w.PrevStatus, w.ExpectSeq, w.Guard = r.tk, prev, r.tk.Seq, r.guard
	res, err := r.e.store.WriteTask(ctxT(r.t), w)
	if err == nil {
		r.tk.Seq = res.Seq
	}
	return res, err
}

func (r *runner) mustWrite(prev task.Status, w task.Write) task.WriteResult {
	r.t.Helper()
	res, err := r.write(prev, w)
	if err != nil {
		r.t.Fatalf("write %s → %s: %v", prev, r.tk.Status, err)
	}
	return res
}

func (r *runner) complete() task.WriteResult {
	r.t.Helper()
	if err := r.tk.Complete(r.e.clock.Now()); err != nil {
		r.t.Fatal(err)
	}
	return r.mustWrite(task.StatusRunning, task.Write{ReleaseLock: true})
}

func (r *runner) fail(reason string) task.WriteResult {
	r.t.Helper()
	if err := r.tk.Fail(r.e.clock.Now(), reason); err != nil {
		r.t.Fatal(err)
	}
	return r.mustWrite(task.StatusRunning, task.Write{ReleaseLock: true})
}

// refusedAs asserts err is a *task.RefusedError with reason.
func refusedAs(t *testing.T, err error, reason task.RefuseReason) *task.RefusedError {
	t.Helper()
	var re *task.RefusedError
	if !errors.As(err, &re) || !errors.Is(err, task.ErrWriteRefused) {
		t.Fatalf("err = %v, want a *task.RefusedError (%s)", err, reason)
	}
	if re.Reason != reason {
		t.Fatalf("refused for %s, want %s (%v)", re.Reason, reason, err)
	}
	return re
}

// allTasks lists every task of a plan through PlanTasks.
func allTasks(t *testing.T, e *env, planID string, f plan.TaskFilter) []*task.Task {
	t.Helper()
	var out []*task.Task
	for {
		page, next, err := e.store.PlanTasks(ctxT(t), planID, f)
		if err != nil {
			t.Fatalf("PlanTasks: %v", err)
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		if next == f.Cursor {
			t.Fatalf("PlanTasks cursor %q does not advance", next)
		}
		f.Cursor = next
	}
}

// checkCounts asserts the plan's counts equal a recount of its task records.
func checkCounts(t *testing.T, e *env, planID string) plan.Counts {
	t.Helper()
	_, counts, err := e.store.Plan(ctxT(t), planID)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	want := newCounts()
	for _, tk := range allTasks(t, e, planID, plan.TaskFilter{Limit: plan.LimitMax}) {
		want[tk.Status]++
	}
	for _, s := range task.Statuses {
		if counts[s] != want[s] {
			t.Fatalf("counts %v, recount of the task records %v", counts, want)
		}
	}
	return counts
}

// keysUnder lists the keys under the env's prefix (Redis only).
func keysUnder(t *testing.T, e *env) []string {
	t.Helper()
	// Every master of a cluster: SCAN on a cluster client sees one node.
	out, err := redistest.KeysUnder(context.Background(), e.client, e.prefix)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func hasKey(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

func countsString(c plan.Counts) string {
	var b strings.Builder
	for _, s := range task.Statuses {
		fmt.Fprintf(&b, "%s=%d ", s, c[s])
	}
	return b.String()
}

// memSizes returns how many plans, task records, fresh sets, tenant index
// entries and tenant histories m holds.
func memSizes(m *Memory) []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return []int{len(m.plans), len(m.tasks), len(m.fresh), len(m.index), len(m.history)}
}
