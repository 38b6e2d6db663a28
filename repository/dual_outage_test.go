package repository

import (
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// outageClient returns a client of srv that gives up fast when it is down
// or paused.
func outageClient(t *testing.T, srv *redistest.Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialerRetries: 1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 400 * time.Millisecond,
		WriteTimeout: 400 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// replayErrors collects what a single-instance Dual reports.
type replayErrors struct {
	mu   sync.Mutex
	errs []error
}

func (r *replayErrors) add(err error) { r.mu.Lock(); r.errs = append(r.errs, err); r.mu.Unlock() }

func (r *replayErrors) get() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// newSingleDualEnv wraps a Redis env's store in a started single-instance Dual.
func newSingleDualEnv(t *testing.T, e *env) (*env, *Dual, *replayErrors) {
	t.Helper()
	errs := &replayErrors{}
	d := NewDual(NewMemory(MemoryConfig{Clock: e.clock.Now, DropFinished: true}), e.redis, DualConfig{
		SingleInstance: true, ProbeInterval: 50 * time.Millisecond, ReplayTimeout: time.Second, OnReplayError: errs.add,
	})
	d.Start(ctxT(t))
	t.Cleanup(func() { _ = d.Close() })
	de := *e
	de.store = d
	return &de, d, errs
}

// startLocal starts a task as a single-instance runner does: an in-process
// lease, so writes carry no lock value.
func startLocal(t *testing.T, e *env, tk *task.Task, fence int64) *runner {
	t.Helper()
	r := &runner{t: t, e: e, tk: tk.Clone(), guard: task.Guard{Fence: fence}}
	if err := r.tk.Start(e.clock.Now(), "coord-a", fence); err != nil {
		t.Fatal(err)
	}
	r.mustWrite(task.StatusPending, task.Write{Events: []task.Event{{At: e.clock.Now(), Type: task.EventStarted, Fence: fence}}})
	return r
}

// stage moves the runner's task to stage i with a checkpoint of the stages before it.
func (r *runner) stage(i int) task.WriteResult {
	r.t.Helper()
	cp := checkpoint.Empty()
	for j := range i {
		cp, _ = cp.Complete(j, stageNames[j], map[string]any{"stage": float64(j)})
	}
	r.tk.EnterStage(i, stageNames[i], r.e.clock.Now())
	return r.mustWrite(task.StatusRunning, task.Write{Checkpoint: &cp,
		Events: []task.Event{{At: r.e.clock.Now(), Type: task.EventStageSucceeded, Stage: stageNames[i-1]}}})
}

// storedPlan is what a store says about a plan and its tasks.
type storedPlan struct {
	Status plan.Status
	Reason string
	Owner  string
	Counts string
	Tasks  []storedTask
}

type storedTask struct {
	Task       *task.Task
	Checkpoint *checkpoint.Checkpoint
	Timeline   []task.Event
}

func stateOf(t *testing.T, s facade.Store, fx fixture) storedPlan {
	t.Helper()
	ctx := ctxT(t)
	p, counts, err := s.Plan(ctx, fx.plan.ID)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	out := storedPlan{Status: p.Status, Reason: p.Reason, Owner: p.Owner, Counts: countsString(counts)}
	for _, tk := range fx.tasks {
		got, ck, err := s.Task(ctx, tk.ID)
		if err != nil {
			t.Fatalf("Task %s: %v", tk.ID, err)
		}
		tl, err := s.Timeline(ctx, tk.TenantID, tk.ID, 0)
		if err != nil {
			t.Fatalf("Timeline %s: %v", tk.ID, err)
		}
		out.Tasks = append(out.Tasks, storedTask{Task: got, Checkpoint: ck, Timeline: tl})
	}
	return out
}

func diffStates(t *testing.T, what string, got, want storedPlan) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	if got.Status != want.Status || got.Reason != want.Reason || got.Owner != want.Owner || got.Counts != want.Counts {
		t.Errorf("%s: plan %s %q %s [%s], want %s %q %s [%s]", what, got.Status, got.Reason, got.Owner, got.Counts,
			want.Status, want.Reason, want.Owner, want.Counts)
	}
	for i := range min(len(got.Tasks), len(want.Tasks)) {
		g, w := got.Tasks[i], want.Tasks[i]
		if !reflect.DeepEqual(g.Task, w.Task) {
			t.Errorf("%s: task %d\n got %+v\nwant %+v", what, i, g.Task, w.Task)
		}
		if !reflect.DeepEqual(g.Checkpoint, w.Checkpoint) {
			t.Errorf("%s: checkpoint %d\n got %+v\nwant %+v", what, i, g.Checkpoint, w.Checkpoint)
		}
		if !reflect.DeepEqual(g.Timeline, w.Timeline) {
			t.Errorf("%s: timeline %d has %d entries, want %d\n got %+v\nwant %+v", what, i, len(g.Timeline), len(w.Timeline), g.Timeline, w.Timeline)
		}
	}
}

func waitDrained(t *testing.T, d *Dual) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for d.Pending() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d operations still queued", d.Pending())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDualPendingWriteIsReappliedOnce(t *testing.T) {
	t.Parallel()
	// Persistence, so Redis comes back with what it had.
	srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	e, d := newDualEnv(t, newRedisEnv(t, outageClient(t, srv), "x:", Config{}))
	ctx := ctxT(t)
	fx := createPlan(t, e, 2, 0)
	r0 := start(t, e, fx.tasks[0], 1)
	r1 := start(t, e, fx.tasks[1], 1)

	srv.Kill()
	// A stage completes, a task completes and an operator asks for a pause,
	// all while Redis is down: each call fails (the caller keeps it).
	cp, _ := checkpoint.Empty().Complete(0, "push-config", map[string]any{"v": 1.0})
	r0.tk.EnterStage(1, "migrate", e.clock.Now())
	w0 := task.Write{Checkpoint: &cp, Events: []task.Event{{At: e.clock.Now(), Type: task.EventStageSucceeded, Stage: "push-config"}}}
	if _, err := r0.write(task.StatusRunning, w0); !IsUnavailable(err) {
		t.Fatalf("stage write with Redis down: %v, want unavailable", err)
	}
	if err := r1.tk.Complete(e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	w1 := task.Write{ReleaseLock: true, Events: []task.Event{{At: e.clock.Now(), Type: task.EventCompleted}}}
	if _, err := r1.write(task.StatusRunning, w1); !IsUnavailable(err) {
		t.Fatalf("completion with Redis down: %v, want unavailable", err)
	}
	pause := task.Event{At: e.clock.Now(), Type: task.EventPauseRequested, Actor: "sre"}
	if _, err := d.RequestTask(ctx, tenantName(0), r0.tk.ID, task.RequestPause, pause); !IsUnavailable(err) {
		t.Fatalf("pause request with Redis down: %v, want unavailable", err)
	}

	paused := fx.plan.Clone()
	paused.Status, paused.Reason = plan.StatusPaused, "maintenance window"
	if err := d.UpdatePlan(ctx, paused, plan.StatusRunning); !IsUnavailable(err) {
		t.Fatalf("plan update with Redis down: %v, want unavailable", err)
	}

	// Degraded reads show the newest state this instance knows.
	if p, _, err := d.Plan(ctx, fx.plan.ID); err != nil || p.Status != plan.StatusPaused {
		t.Fatalf("degraded plan: %+v, %v; want PAUSED", p, err)
	}
	got, ck, err := d.TaskByTenant(ctx, tenantName(0))
	if err != nil || got.StageIndex != 1 || got.Seq != r0.tk.Seq+1 || !got.PauseRequested || !reflect.DeepEqual(ck, &cp) {
		t.Fatalf("degraded task 0: %+v, %+v, %v; want stage 1, seq %d, pause requested, the new checkpoint", got, ck, err, r0.tk.Seq+1)
	}
	tl, _ := d.Timeline(ctx, tenantName(0), r0.tk.ID, 0)
	if n := len(tl); n < 2 || tl[n-2].Type != task.EventStageSucceeded || tl[n-1].Type != task.EventPauseRequested {
		t.Fatalf("degraded timeline of task 0: %+v", tl)
	}
	if got, _, err := d.Task(ctx, r1.tk.ID); err != nil || got.Status != task.StatusCompleted {
		t.Fatalf("degraded task 1: %+v, %v; want COMPLETED (kept in memory until Redis has it)", got, err)
	}
	if _, counts, err := d.Plan(ctx, fx.plan.ID); err != nil || counts[task.StatusCompleted] != 1 || counts[task.StatusRunning] != 1 {
		t.Fatalf("degraded plan counts %s, %v", countsString(counts), err)
	}
	if !d.Degraded() || d.Pending() != 0 {
		t.Fatalf("Degraded %v, Pending %d; want true, 0 (nothing is queued with several instances)", d.Degraded(), d.Pending())
	}

	// Redis is back with its data; the writers retry through the fenced script.
	srv.Start()
	r0.mustWrite(task.StatusRunning, w0)
	r1.mustWrite(task.StatusRunning, w1)
	if _, err := d.RequestTask(ctx, tenantName(0), r0.tk.ID, task.RequestPause, pause); err != nil {
		t.Fatal(err)
	}
	if err := d.UpdatePlan(ctx, paused, plan.StatusRunning); err != nil {
		t.Fatal(err)
	}
	if d.Degraded() {
		t.Fatal("Degraded after Redis answered")
	}
	// Memory now mirrors Redis: nothing twice, the finished task gone.
	rt, rck, _ := e.redis.Task(ctx, r0.tk.ID)
	mt, mck, err := d.Memory().Task(ctx, r0.tk.ID)
	if err != nil || !reflect.DeepEqual(rt, mt) || !reflect.DeepEqual(rck, mck) {
		t.Fatalf("memory task %+v %+v (%v)\nredis task  %+v %+v", mt, mck, err, rt, rck)
	}
	rtl, _ := e.redis.Timeline(ctx, tenantName(0), r0.tk.ID, 0)
	mtl, _ := d.Memory().Timeline(ctx, tenantName(0), r0.tk.ID, 0)
	if !reflect.DeepEqual(rtl, mtl) || len(rtl) != 3 {
		t.Fatalf("memory timeline %+v\nredis timeline  %+v\nwant started, stage_succeeded, pause_requested once each", mtl, rtl)
	}
	if _, _, err := d.Memory().Task(ctx, r1.tk.ID); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("completed task still in memory once Redis took it: %v", err)
	}
	rp, rc, _ := e.redis.Plan(ctx, fx.plan.ID)
	mp, mc, _ := d.Memory().Plan(ctx, fx.plan.ID)
	if !reflect.DeepEqual(rc, mc) || rp.Status != plan.StatusPaused || !reflect.DeepEqual(rp, mp) {
		t.Fatalf("memory plan %+v [%s]\nredis plan  %+v [%s]", mp, countsString(mc), rp, countsString(rc))
	}
}

func TestDualPendingWriteThatLanded(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	e, d := newDualEnv(t, newRedisEnv(t, outageClient(t, srv), "x:", Config{}))
	ctx := ctxT(t)
	fx := createPlan(t, e, 1, 0)
	r := start(t, e, fx.tasks[0], 1)

	// Paused, Redis reads the write only when it continues: the writer sees
	// a timeout, memory a pending write.
	srv.Stop()
	cp, _ := checkpoint.Empty().Complete(0, "push-config", nil)
	r.tk.EnterStage(1, "migrate", e.clock.Now())
	w := task.Write{Checkpoint: &cp, Events: []task.Event{{At: e.clock.Now(), Type: task.EventStageSucceeded}}}
	if _, err := r.write(task.StatusRunning, w); !IsUnavailable(err) {
		srv.Cont()
		t.Fatalf("write to a paused Redis: %v, want unavailable", err)
	}
	srv.Cont()
	// The retry either lands or finds that the first attempt did.
	_, err := r.write(task.StatusRunning, w)
	var re *task.RefusedError
	switch {
	case err == nil:
		t.Log("the first attempt had not reached Redis; the retry wrote it")
	case errors.As(err, &re) && re.Reason == task.RefusedSeq && re.Seq == r.tk.Seq+1:
		t.Log("the first attempt landed when Redis continued; the retry was refused")
	default:
		t.Fatalf("retry: %v", err)
	}
	rt, rck, _ := e.redis.Task(ctx, r.tk.ID)
	mt, mck, _ := d.Memory().Task(ctx, r.tk.ID)
	rtl, _ := e.redis.Timeline(ctx, tenantName(0), r.tk.ID, 0)
	mtl, _ := d.Memory().Timeline(ctx, tenantName(0), r.tk.ID, 0)
	if !reflect.DeepEqual(rt, mt) || !reflect.DeepEqual(rck, mck) || !reflect.DeepEqual(rtl, mtl) || len(rtl) != 2 {
		t.Fatalf("memory %+v %+v %+v\nredis  %+v %+v %+v", mt, mck, mtl, rt, rck, rtl)
	}
}

func TestDualSingleInstanceRedisRestartedEmpty(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	e, d, errs := newSingleDualEnv(t, newRedisEnv(t, outageClient(t, srv), "x:", Config{}))
	ctx := ctxT(t)
	// Before the outage: plan A and its running task.
	fxA := createPlan(t, e, 1, 0)
	rA := startLocal(t, e, fxA.tasks[0], 1)

	srv.Kill()
	// Everything succeeds while Redis is down.
	fxB := createPlan(t, e, 3, 0)
	if d.Pending() != 1 || !d.Degraded() {
		t.Fatalf("after a plan created with Redis down: Pending %d, Degraded %v; want 1, true", d.Pending(), d.Degraded())
	}
	b0 := startLocal(t, e, fxB.tasks[0], 1)
	b0.stage(1)
	b0.stage(2)
	b0.complete()
	startLocal(t, e, fxB.tasks[1], 1).fail("boom")
	b2 := startLocal(t, e, fxB.tasks[2], 1)
	b2.stage(1)
	if tk, err := d.RequestTask(ctx, tenantName(2), b2.tk.ID, task.RequestPause, task.Event{At: e.clock.Now(), Type: task.EventPauseRequested}); err != nil || !tk.PauseRequested {
		t.Fatalf("pause request with Redis down: %+v, %v", tk, err)
	}
	if err := d.Beat(ctx, tenantName(2), b2.tk.ID, b2.guard, e.clock.Now().Add(time.Second)); err != nil {
		t.Fatalf("Beat with Redis down: %v", err)
	}
	if res := b2.complete(); res.PlanStatus != string(plan.StatusFailed) {
		t.Fatalf("plan status after the last task: %q, want FAILED", res.PlanStatus)
	}
	rA.stage(1) // Redis will not know plan A any more.
	// Memory checks the writes it takes: a stale write is refused, not queued.
	pending := d.Pending()
	stale := *b2
	stale.tk = b2.tk.Clone()
	stale.tk.Seq--
	if _, err := stale.write(task.StatusCompleted, task.Write{}); !errors.Is(err, task.ErrWriteRefused) || d.Pending() != pending {
		t.Fatalf("stale write with Redis down: %v (Pending %d → %d), want refused and nothing queued", err, pending, d.Pending())
	}
	if pending != 13 {
		t.Errorf("Pending = %d, want 13 queued operations", pending)
	}

	// Reads come from memory, which keeps the finished plan and tasks until
	// they are written back.
	want := stateOf(t, d, fxB)
	if want.Status != plan.StatusFailed || want.Tasks[0].Task.Status != task.StatusCompleted || want.Tasks[0].Checkpoint == nil ||
		len(want.Tasks[0].Timeline) != 3 || !want.Tasks[2].Task.PauseRequested {
		t.Fatalf("state read during the outage: %+v", want)
	}

	srv.Start() // empty
	waitDrained(t, d)
	if d.Degraded() {
		t.Fatal("Degraded after the queue drained")
	}
	// Redis holds exactly the final state of plan B.
	re := *e
	re.store = e.redis
	diffStates(t, "redis after write-back", stateOf(t, e.redis, fxB), want)
	checkCounts(t, &re, fxB.plan.ID)
	// Plan A's write could not be written back: reported, dropped.
	var refused *task.RefusedError
	if got := errs.get(); len(got) != 1 || !errors.As(got[0], &refused) || refused.Reason != task.RefusedMissing {
		t.Fatalf("replay errors %v, want one refusal of plan A's write (missing)", got)
	}
	// Finished aggregates left memory once written back.
	if _, _, err := d.Memory().Plan(ctx, fxB.plan.ID); !errors.Is(err, plan.ErrNotFound) {
		t.Fatalf("finished plan still in memory: %v", err)
	}
	if _, _, err := d.Memory().Task(ctx, b0.tk.ID); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("finished task still in memory: %v", err)
	}
}

func TestDualSingleInstanceRedisPausedAndContinued(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	e, d, errs := newSingleDualEnv(t, newRedisEnv(t, outageClient(t, srv), "x:", Config{}))
	ctx := ctxT(t)
	fx := createPlan(t, e, 3, 0)
	r0 := start(t, e, fx.tasks[0], 1)
	r1 := start(t, e, fx.tasks[1], 1)
	r2 := start(t, e, fx.tasks[2], 1)

	srv.Stop()
	// The first write times out (it may still land when Redis continues);
	// it and everything after it are queued.
	r0.stage(1)
	if d.Pending() != 1 {
		t.Fatalf("Pending = %d after a write to a paused Redis, want 1", d.Pending())
	}
	r0.stage(2)
	r0.complete()
	r1.fail("boom")
	if err := d.Beat(ctx, tenantName(2), r2.tk.ID, r2.guard, e.clock.Now().Add(5*time.Second)); err != nil {
		t.Fatalf("Beat: %v", err)
	}
	if _, err := d.RequestTask(ctx, tenantName(2), r2.tk.ID, task.RequestPause, task.Event{At: e.clock.Now(), Type: task.EventPauseRequested}); err != nil {
		t.Fatal(err)
	}
	if res := r2.stage(1); !res.PauseRequested {
		t.Fatalf("stage write result %+v, want the pause request", res)
	}
	p := fx.plan.Clone()
	p.Owner = "coord-b"
	if err := d.UpdatePlan(ctx, p, plan.StatusRunning); err != nil {
		t.Fatalf("UpdatePlan: %v", err)
	}
	if err := d.UpdatePlan(ctx, p, plan.StatusPaused); !isTransition(err) {
		t.Fatalf("UpdatePlan from PAUSED: %v, want a transition error from memory", err)
	}
	if got, _, err := d.Task(ctx, r0.tk.ID); err != nil || got.Status != task.StatusCompleted {
		t.Fatalf("read while queued: %+v, %v; want COMPLETED from memory", got, err)
	}
	want := stateOf(t, d, fx)
	if n := d.Pending(); n != 8 {
		t.Errorf("Pending = %d, want 8", n)
	}

	srv.Cont()
	waitDrained(t, d)
	if d.Degraded() {
		t.Fatal("Degraded after the queue drained")
	}
	diffStates(t, "redis after write-back", stateOf(t, e.redis, fx), want)
	re := *e
	re.store = e.redis
	checkCounts(t, &re, fx.plan.ID)
	if got := errs.get(); len(got) != 0 {
		t.Fatalf("replay errors %v, want none", got)
	}
	// Back to normal: a write goes to Redis at once.
	r2.stage(2)
	if got, _, _ := e.redis.Task(ctx, r2.tk.ID); got.StageIndex != 2 || d.Pending() != 0 {
		t.Fatalf("write after recovery: Redis has %+v, Pending %d", got, d.Pending())
	}
}

func isTransition(err error) bool {
	var te *plan.TransitionError
	return errors.As(err, &te)
}

func TestDualSingleInstanceCloseReportsLostWrites(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	base := newRedisEnv(t, outageClient(t, srv), "x:", Config{})
	d := NewDual(NewMemory(MemoryConfig{Clock: base.clock.Now, DropFinished: true}), base.redis,
		DualConfig{SingleInstance: true, ReplayTimeout: 300 * time.Millisecond})
	d.Start(ctxT(t))
	e := *base
	e.store = d
	fx := createPlan(t, &e, 1, 0)
	srv.Kill()
	startLocal(t, &e, fx.tasks[0], 1)
	if err := d.Close(); !errors.Is(err, ErrUnavailable) || d.Pending() != 1 {
		t.Fatalf("Close with Redis down: %v, Pending %d; want ErrUnavailable, 1", err, d.Pending())
	}
	if err := d.Close(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("second Close: %v", err)
	}
	// A multi-instance Dual has nothing to flush.
	if err := NewDual(NewMemory(MemoryConfig{}), base.redis).Close(); err != nil {
		t.Fatalf("Close of a multi-instance Dual: %v", err)
	}
}

// TestDualTasksByTenantQueued: a single-instance Dual with writes queued
// answers tenant queries from Redis merged with memory while Redis answers
// (a tenant in neither has no task: absent, no error), and from memory
// alone while it does not — unavailable then if memory lacks a tenant.
func TestDualTasksByTenantQueued(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	e := newRedisEnv(t, outageClient(t, srv), "x:", Config{})
	// No probe during the test: the queue stays until it ends.
	d := NewDual(NewMemory(MemoryConfig{Clock: e.clock.Now, DropFinished: true}), e.redis, DualConfig{
		SingleInstance: true, ProbeInterval: time.Hour, ReplayTimeout: time.Second,
	})
	d.Start(ctxT(t))
	t.Cleanup(func() { _ = d.Close() })
	de := *e
	de.store = d
	ctx := ctxT(t)
	fx := createPlan(t, &de, 2, 0)
	r0 := start(t, &de, fx.tasks[0], 1)

	srv.Stop()
	r0.stage(1)
	if d.Pending() == 0 {
		t.Fatal("the write to a paused Redis was not queued")
	}
	if _, _, err := d.TasksByTenant(ctx, []string{tenantName(0), "nobody"}); !IsUnavailable(err) {
		t.Errorf("Redis down, a tenant memory lacks: %v, want unavailable", err)
	}
	if ts, _, err := d.TasksByTenant(ctx, []string{tenantName(0), tenantName(0)}); err != nil || ts[tenantName(0)].StageIndex != 1 {
		t.Errorf("Redis down, a tenant memory holds (twice): %v, %v; want it at stage 1", ts, err)
	}

	srv.Cont()
	ts, _, err := d.TasksByTenant(ctx, []string{tenantName(0), tenantName(1), "nobody"})
	if err != nil {
		t.Fatalf("Redis back, writes still queued: %v, want an answer", err)
	}
	if d.Pending() == 0 {
		t.Fatal("the queue drained during the test: it no longer checks the queued case")
	}
	if got := ts[tenantName(0)]; got == nil || got.StageIndex != 1 {
		t.Errorf("tenant 0 = %+v, want memory's newest state (stage 1)", got)
	}
	if got := ts[tenantName(1)]; got == nil || got.Status != task.StatusPending {
		t.Errorf("tenant 1 = %+v, want its PENDING task", got)
	}
	if got, ok := ts["nobody"]; ok {
		t.Errorf("a tenant without a task answered %+v, want absent", got)
	}
}

// TestQueuedRequestThatLandedIsNotAppliedTwice: single-instance mode. A
// pause request sent while Redis is paused (SIGSTOP) times out and is
// queued (the call succeeds); Redis then runs the request it had received,
// and the flusher replays the queued copy. The timeline must hold the
// request's entry once (task writes carry a write id; requests carry their
// entry, which the script finds among the newest ones). Found by a review.
func TestQueuedRequestThatLandedIsNotAppliedTwice(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	e, d, _ := newSingleDualEnv(t, newRedisEnv(t, outageClient(t, srv), "x:", Config{}))
	ctx := ctxT(t)
	fx := createPlan(t, e, 1, 0)
	r := startLocal(t, e, fx.tasks[0], 1)

	srv.Stop() // paused: it reads the request only when it continues
	pause := task.Event{At: e.clock.Now(), Type: task.EventPauseRequested, Actor: "sre", Reason: "hold"}
	if _, err := d.RequestTask(ctx, tenantName(0), r.tk.ID, task.RequestPause, pause); err != nil {
		srv.Cont()
		t.Fatalf("pause request with Redis paused: %v (single instance: queued, no error)", err)
	}
	if d.Pending() != 1 {
		srv.Cont()
		t.Fatalf("Pending %d, want 1 (the request queued)", d.Pending())
	}
	srv.Cont()
	waitDrained(t, d)
	tl, err := e.redis.Timeline(ctx, tenantName(0), r.tk.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range tl {
		if ev.Type == task.EventPauseRequested {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the timeline holds %d %s entries for one request, want 1", n, task.EventPauseRequested)
	}
}
