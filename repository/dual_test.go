package repository

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// newDualEnv wraps a Redis env's store in a Dual with a bounded memory.
func newDualEnv(t *testing.T, e *env) (*env, *Dual) {
	t.Helper()
	d := NewDual(NewMemory(MemoryConfig{Clock: e.clock.Now, DropFinished: true}), e.redis)
	de := *e
	de.store = d
	return &de, d
}

// newSharedDualEnv is newDualEnv with shared work (DualConfig.SharedWork)
// and cfg's other settings, on e's clock.
func newSharedDualEnv(t *testing.T, e *env, cfg DualConfig) (*env, *Dual) {
	t.Helper()
	cfg.SharedWork, cfg.Clock = true, e.clock.Now
	d := NewDual(NewMemory(MemoryConfig{Clock: e.clock.Now, DropFinished: true}), e.redis, cfg)
	de := *e
	de.store = d
	return &de, d
}

func TestDualFallsBackToMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialerRetries: 1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	e, d := newDualEnv(t, newRedisEnv(t, c, "x:", Config{}))
	ctx := ctxT(t)

	fx := createPlan(t, e, 3, 0)
	r := start(t, e, fx.tasks[0], 1)
	cp, _ := checkpoint.Empty().Complete(0, "push-config", map[string]any{"ok": true})
	r.mustWrite(task.StatusRunning, task.Write{Checkpoint: &cp})
	start(t, e, fx.tasks[1], 1).complete()
	if d.Degraded() {
		t.Fatal("degraded with Redis up")
	}

	srv.Kill()
	got, ck, err := d.TaskByTenant(ctx, tenantName(0))
	if err != nil || got.ID != r.tk.ID || got.Status != task.StatusRunning || got.Seq != r.tk.Seq || ck == nil || ck.ContextData["push-config"] == nil {
		t.Fatalf("TaskByTenant with Redis down: %+v, %+v, %v; want the running task from memory", got, ck, err)
	}
	if !d.Degraded() {
		t.Fatal("Degraded() = false with Redis down")
	}
	p, counts, err := d.Plan(ctx, fx.plan.ID)
	if err != nil || p.Status != plan.StatusRunning || counts[task.StatusRunning] != 1 || counts[task.StatusCompleted] != 1 || counts[task.StatusPending] != 1 {
		t.Fatalf("Plan from memory: %+v %s %v", p, countsString(counts), err)
	}
	if ts, _, err := d.PlanTasks(ctx, fx.plan.ID, plan.TaskFilter{}); err != nil || len(ts) != 2 {
		t.Fatalf("PlanTasks from memory: %d tasks, %v; want the 2 unfinished", len(ts), err)
	}
	// The completed task left memory: its answer is not there.
	if _, _, err := d.Task(ctx, fx.tasks[1].ID); !IsUnavailable(err) {
		t.Fatalf("finished task with Redis down: %v, want unavailable", err)
	}
	// A write Redis cannot take fails (the caller retries it), but memory
	// shows it as pending.
	r.tk.EnterStage(2, "settle", e.clock.Now())
	if _, err := r.write(task.StatusRunning, task.Write{}); !IsUnavailable(err) {
		t.Fatalf("write with Redis down: %v, want unavailable", err)
	}
	if got, _, _ := d.TaskByTenant(ctx, tenantName(0)); got.StageIndex != 2 || got.Seq != r.tk.Seq+1 {
		t.Fatalf("degraded read after a failed write: %+v, want the pending state (stage 2, seq %d)", got, r.tk.Seq+1)
	}
	if err := d.Beat(ctx, tenantName(0), r.tk.ID, r.guard, e.clock.Now()); !IsUnavailable(err) {
		t.Fatalf("beat with Redis down: %v", err)
	}

	// Redis is back (empty: nothing persisted). A Redis answer clears the flag.
	srv.Start()
	if _, _, err := d.TaskByTenant(ctx, tenantName(0)); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("after recovery: %v, want Redis' answer (not found: the server came back empty)", err)
	}
	if d.Degraded() {
		t.Fatal("Degraded() = true after a Redis call succeeded")
	}
}

func TestDualMirrorsUnfinishedAggregates(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, re *env) {
		e, d := newDualEnv(t, re)
		ctx := ctxT(t)
		mem := d.Memory()
		fx := createPlan(t, e, 3, 1)
		r0 := start(t, e, fx.tasks[0], 1)
		cp, _ := checkpoint.Empty().Complete(0, "push-config", map[string]any{"v": "x"})
		r0.tk.EnterStage(1, "migrate", e.clock.Now())
		r0.mustWrite(task.StatusRunning, task.Write{Checkpoint: &cp, Events: []task.Event{{Type: task.EventStageSucceeded}}})
		if _, err := d.RequestTask(ctx, tenantName(0), r0.tk.ID, task.RequestPause, task.Event{Type: task.EventPauseRequested}); err != nil {
			t.Fatal(err)
		}
		e.clock.Add(time.Second)
		if err := d.Beat(ctx, tenantName(0), r0.tk.ID, r0.guard, e.clock.Now()); err != nil {
			t.Fatal(err)
		}

		// Memory answers like Redis for what it holds.
		rt, rck, _ := e.redis.Task(ctx, r0.tk.ID)
		mt, mck, err := mem.Task(ctx, r0.tk.ID)
		if err != nil || !reflect.DeepEqual(rt, mt) || !reflect.DeepEqual(rck, mck) {
			t.Fatalf("memory task %+v %+v (%v)\nredis task  %+v %+v", mt, mck, err, rt, rck)
		}
		rtl, _ := e.redis.Timeline(ctx, tenantName(0), r0.tk.ID, 0)
		mtl, _ := mem.Timeline(ctx, tenantName(0), r0.tk.ID, 0)
		if !reflect.DeepEqual(rtl, mtl) {
			t.Fatalf("memory timeline %+v\nredis timeline  %+v", mtl, rtl)
		}
		rp, rc, _ := e.redis.Plan(ctx, fx.plan.ID)
		mp, mc, _ := mem.Plan(ctx, fx.plan.ID)
		if !reflect.DeepEqual(rp, mp) || !reflect.DeepEqual(rc, mc) {
			t.Fatalf("memory plan %+v %v\nredis plan  %+v %v", mp, mc, rp, rc)
		}

		// Finished tasks leave memory; the plan leaves once finished.
		r0.complete()
		if _, _, err := mem.Task(ctx, r0.tk.ID); !errors.Is(err, task.ErrNotFound) {
			t.Fatalf("completed task still in memory: %v", err)
		}
		start(t, e, fx.tasks[1], 1).fail("boom")
		res := start(t, e, fx.tasks[2], 1).fail("boom")
		if res.PlanStatus != string(plan.StatusFailed) {
			t.Fatalf("plan status %q", res.PlanStatus)
		}
		if _, _, err := mem.Plan(ctx, fx.plan.ID); !errors.Is(err, plan.ErrNotFound) {
			t.Fatalf("finished plan still in memory: %v", err)
		}
		mem.mu.Lock()
		sizes := []int{len(mem.plans), len(mem.tasks), len(mem.index), len(mem.history)}
		mem.mu.Unlock()
		if !reflect.DeepEqual(sizes, []int{0, 0, 0, 0}) {
			t.Fatalf("memory holds plans/tasks/index/history %v after everything finished", sizes)
		}
		// Redis keeps everything.
		if _, counts, err := d.Plan(ctx, fx.plan.ID); err != nil || counts[task.StatusFailed] != 2 {
			t.Fatalf("Plan from Redis: %v %v", counts, err)
		}

		// A retry of a finished task comes back into memory with its counts.
		e.clock.Add(time.Minute)
		stored, _, _ := d.Task(ctx, fx.tasks[1].ID)
		retry := &runner{t: t, e: e, tk: stored, guard: task.Guard{LockValue: "retry", Fence: 2}}
		e.setLock(tenantName(1), "retry")
		if err := retry.tk.Rerun(e.clock.Now(), "coord-b", 2, 0, "push-config", task.RetryNew, false); err != nil {
			t.Fatal(err)
		}
		if res := retry.mustWrite(task.StatusFailed, task.Write{DeleteCheckpoint: true}); res.PlanStatus != string(plan.StatusRunning) {
			t.Fatalf("retry: plan status %q", res.PlanStatus)
		}
		if mt, _, err := mem.TaskByTenant(ctx, tenantName(1)); err != nil || mt.Status != task.StatusRunning || mt.Seq != retry.tk.Seq {
			t.Fatalf("retried task in memory: %+v, %v", mt, err)
		}
	})
}

func TestMemoryKeepsFinishedWithoutDropFinished(t *testing.T) {
	t.Parallel()
	e := newMemoryEnv(t)
	fx := createPlan(t, e, 1, 0)
	start(t, e, fx.tasks[0], 1).complete()
	if got, _, err := e.store.Task(ctxT(t), fx.tasks[0].ID); err != nil || got.Status != task.StatusCompleted {
		t.Fatalf("completed task: %+v, %v", got, err)
	}
	if p, _, err := e.store.Plan(ctxT(t), fx.plan.ID); err != nil || p.Status != plan.StatusCompleted {
		t.Fatalf("completed plan: %+v, %v", p, err)
	}
}

// TestDualSharedWorkAnswersOnlyItsOwnWrites: the instance that created a
// shared plan holds its tasks as created; another instance (here the Redis
// store itself) runs one of them to COMPLETED and leaves another PENDING.
// With Redis down, the creator's memory must not answer the one it never
// wrote as PENDING, nor the plan's progress from the moves it saw: those
// reads fail as unavailable, as on an instance that never held them. The
// task it runs itself is still answered from memory, and lists of tasks
// hold it alone. (Found by running the
// runbook: the creator answered a COMPLETED task as PENDING, attempt 0, and
// a finished plan as RUNNING, marked degraded.)
func TestDualSharedWorkAnswersOnlyItsOwnWrites(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := outageClient(t, srv)
	re := newRedisEnv(t, c, "x:", Config{})
	e, d := newSharedDualEnv(t, re, DualConfig{})
	ctx := ctxT(t)

	fx := createPlan(t, e, 4, 0)
	mine := start(t, e, fx.tasks[0], 1)                              // run here, through the Dual
	start(t, re, fx.tasks[1], 1).complete()                          // run by another instance
	if _, _, err := d.TaskByTenant(ctx, tenantName(2)); err != nil { // PENDING, read while Redis is up
		t.Fatal(err)
	}
	// Started and paused here: any instance may resume it next.
	paused := start(t, e, fx.tasks[3], 1)
	if err := paused.tk.Pause(re.clock.Now(), "hold"); err != nil {
		t.Fatal(err)
	}
	paused.mustWrite(task.StatusRunning, task.Write{ReleaseLock: true})

	srv.Kill()
	if got, _, err := d.TaskByTenant(ctx, tenantName(0)); err != nil || got.ID != mine.tk.ID || got.Status != task.StatusRunning {
		t.Fatalf("its own running task with Redis down: %+v, %v; want it from memory", got, err)
	}
	for _, i := range []int{1, 2, 3} {
		if got, _, err := d.TaskByTenant(ctx, tenantName(i)); !IsUnavailable(err) {
			t.Errorf("task %d, not run here, with Redis down: %+v, %v; want unavailable", i, got, err)
		}
		if got, _, err := d.Task(ctx, fx.tasks[i].ID); !IsUnavailable(err) {
			t.Errorf("task %d by id: %+v, %v; want unavailable", i, got, err)
		}
		if evs, err := d.Timeline(ctx, tenantName(i), fx.tasks[i].ID, 0); !IsUnavailable(err) {
			t.Errorf("timeline of task %d: %v, %v; want unavailable", i, evs, err)
		}
	}
	if _, _, err := d.TasksByTenant(ctx, []string{tenantName(0), tenantName(2)}); !IsUnavailable(err) {
		t.Errorf("tasks by tenant with one never written here: %v; want unavailable", err)
	}
	if ts, _, err := d.TasksByTenant(ctx, []string{tenantName(0)}); err != nil || ts[tenantName(0)] == nil {
		t.Errorf("tasks by tenant, its own only: %v, %v", ts, err)
	}
	if p, counts, err := d.Plan(ctx, fx.plan.ID); !IsUnavailable(err) {
		t.Errorf("plan with Redis down: %+v %v, %v; want unavailable (its counts moved elsewhere too)", p, counts, err)
	}
	// Lists of tasks keep the ones written here (partial, as degraded
	// lists are), and fail when none is left — also without the plan in
	// memory (the creator does not mirror a shared plan).
	only := func(what string, ts []*task.Task, err error) {
		t.Helper()
		if err != nil || len(ts) != 1 || ts[0].ID != mine.tk.ID {
			t.Errorf("%s with Redis down: %d tasks, %v; want only its own task", what, len(ts), err)
		}
	}
	ts, _, err := d.PlanTasks(ctx, fx.plan.ID, plan.TaskFilter{})
	only("plan tasks", ts, err)
	if ts, _, err := d.PlanTasks(ctx, fx.plan.ID, plan.TaskFilter{Cursor: "2"}); !IsUnavailable(err) {
		t.Errorf("a later page of the plan's tasks with Redis down: %d tasks, %v; want unavailable (memory's one page is not it)", len(ts), err)
	}
	ts, _, err = d.SearchTasks(ctx, plan.TaskSearch{})
	only("search", ts, err)
	ts, err = d.TenantHistory(ctx, tenantName(0), 10)
	only("its tenant's history", ts, err)
	if ts, _, err := d.SearchTasks(ctx, plan.TaskSearch{Statuses: []task.Status{task.StatusFailed}}); !IsUnavailable(err) {
		t.Errorf("search of FAILED tasks (none written here) with Redis down: %d tasks, %v; want unavailable, not an empty list", len(ts), err)
	}
	if _, err := d.TenantHistory(ctx, tenantName(2), 10); !IsUnavailable(err) {
		t.Errorf("history of a tenant it never wrote a task of: %v; want unavailable", err)
	}
	if _, _, err := d.PlanTasks(ctx, fx.plan.ID, plan.TaskFilter{Status: task.StatusPending}); !IsUnavailable(err) {
		t.Errorf("plan tasks PENDING (none written here) with Redis down: %v; want unavailable", err)
	}
	if _, _, err := d.Plans(ctx, plan.ListFilter{}); !IsUnavailable(err) {
		t.Errorf("plans with Redis down: %v; want unavailable", err)
	}
	if _, err := d.PlanCounts(ctx, []string{fx.plan.ID}); !IsUnavailable(err) {
		t.Errorf("plan counts with Redis down: %v; want unavailable", err)
	}
}

// TestDualSharedCreatorLetsPlanGo: with SharedWork, other instances run and
// finish the tasks of a plan this one created; nothing tells its memory.
// Memory must not hold the plan and its tasks as created for good (it did:
// the creator mirrored the plan, whose tasks stayed PENDING there and the
// plan RUNNING — every shared plan created on an instance stayed in its
// memory).
func TestDualSharedCreatorLetsPlanGo(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	re := newRedisEnv(t, outageClient(t, srv), "x:", Config{})
	e, d := newSharedDualEnv(t, re, DualConfig{})
	ctx := ctxT(t)

	fx := createPlan(t, e, 3, 0)  // created here
	for _, tk := range fx.tasks { // run to the end by another instance
		start(t, re, tk, 1).complete()
	}
	if p, _, err := re.redis.Plan(ctx, fx.plan.ID); err != nil || p.Status != plan.StatusCompleted {
		t.Fatalf("plan in redis: %+v, %v; want COMPLETED", p, err)
	}
	if p, _, err := d.Memory().Plan(ctx, fx.plan.ID); !errors.Is(err, plan.ErrNotFound) {
		t.Errorf("finished plan still in the creator's memory: %s (err %v)", p.Status, err)
	}
	for i := range fx.tasks {
		if tk, _, err := d.Memory().TaskByTenant(ctx, tenantName(i)); !errors.Is(err, task.ErrNotFound) {
			t.Errorf("task of %s (COMPLETED in redis) still in memory as %s (err %v)", tenantName(i), tk.Status, err)
		}
	}
	if sizes := memSizes(d.Memory()); !slices.Equal(sizes, []int{0, 0, 0, 0, 0}) {
		t.Errorf("memory holds plans/tasks/fresh sets/index/history %v after the plan finished elsewhere, want nothing", sizes)
	}
}

// TestDualRefusedWriteLetsTaskGo: shared work. A write of this instance
// refused by Redis (another instance took the task over) leaves memory with
// a copy that is not the stored state, RUNNING under this instance: memory
// lets the task go (it held it for good, and answered it so during
// outages).
func TestDualRefusedWriteLetsTaskGo(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		de, d := newSharedDualEnv(t, e, DualConfig{})
		fx := createPlan(t, de, 1, 0)
		mine := start(t, de, fx.tasks[0], 1)
		stored, _, err := e.redis.Task(ctx, fx.tasks[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		rerun(t, e, stored, 2, "coord-b") // taken over elsewhere
		_, err = mine.write(task.StatusRunning, task.Write{})
		refusedAs(t, err, task.RefusedLock)
		if got, _, err := d.Memory().Task(ctx, fx.tasks[0].ID); !errors.Is(err, task.ErrNotFound) {
			t.Errorf("memory still holds the task after its write was refused: %s owner %s (err %v)", got.Status, got.Owner, err)
		}
	})
}

// TestDualAbandonedPlanUpdateLetGo: an UpdatePlan Redis could not be asked
// (an operator's pause answered 503, not sent again) is kept in memory as
// pending. A later write's answer carries Redis' status of the plan, which
// supersedes it: once the plan finished in Redis memory lets it go (it held
// it for good).
func TestDualAbandonedPlanUpdateLetGo(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := outageClient(t, srv)
	re := newRedisEnv(t, c, "x:", Config{})
	e, d := newDualEnv(t, re)
	ctx := ctxT(t)
	f := newFailing(func(string) bool { return true })
	f.On.Store(false)
	c.AddHook(f)

	fx := createPlan(t, e, 2, 0)
	r0 := start(t, e, fx.tasks[0], 1)
	r1 := start(t, e, fx.tasks[1], 1)
	f.On.Store(true) // Redis unreachable
	paused := fx.plan.Clone()
	paused.Status, paused.Reason = plan.StatusPaused, "INC-1"
	if err := d.UpdatePlan(ctx, paused, plan.StatusRunning); !IsUnavailable(err) {
		t.Fatalf("pause with Redis unreachable: %v, want unavailable", err)
	}
	f.On.Store(false) // Redis back; nobody sends the pause again
	r0.complete()
	r1.complete()
	if p, _, err := re.redis.Plan(ctx, fx.plan.ID); err != nil || p.Status != plan.StatusCompleted {
		t.Fatalf("plan in redis: %+v, %v; want COMPLETED", p, err)
	}
	if p, _, err := d.Memory().Plan(ctx, fx.plan.ID); !errors.Is(err, plan.ErrNotFound) {
		t.Errorf("plan COMPLETED in redis still held in memory: %s (err %v)", p.Status, err)
	}
	if sizes := memSizes(d.Memory()); !slices.Equal(sizes, []int{0, 0, 0, 0, 0}) {
		t.Errorf("memory holds plans/tasks/fresh sets/index/history %v, want nothing", sizes)
	}
}

// TestDualSharedWorkLapsedLeaseNotAnswered: a task this instance runs whose
// heartbeat in memory is older than a lease (the process was frozen past
// its lease; another instance may have taken the task over and completed
// it) is not answered from memory while Redis is unreachable: a chaos run
// saw RUNNING, owner this instance, attempt 1 for a task COMPLETED at
// attempt 2 elsewhere, for 12 s.
func TestDualSharedWorkLapsedLeaseNotAnswered(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	re := newRedisEnv(t, outageClient(t, srv), "x:", Config{})
	e, d := newSharedDualEnv(t, re, DualConfig{Lease: 10 * time.Second})
	ctx := ctxT(t)
	fx := createPlan(t, e, 2, 0)
	start(t, e, fx.tasks[0], 1)
	start(t, e, fx.tasks[1], 1)
	re.clock.Add(11 * time.Second)
	if err := d.Beat(ctx, tenantName(1), fx.tasks[1].ID, task.Guard{LockValue: "lock-t-00001-1", Fence: 1}, re.clock.Now()); err != nil {
		t.Fatal(err) // tenant 1 heartbeats; tenant 0's heartbeat is a lease old
	}
	srv.Kill()
	if got, _, err := d.TaskByTenant(ctx, tenantName(0)); !IsUnavailable(err) {
		t.Errorf("a task whose lease lapsed, Redis down: %s owner %s, %v; want unavailable", got.Status, got.Owner, err)
	}
	if got, _, err := d.TaskByTenant(ctx, tenantName(1)); err != nil || got.Status != task.StatusRunning {
		t.Errorf("a task heartbeating here, Redis down: %+v, %v; want it from memory", got, err)
	}
	// A long outage does not age it out: nobody else could move it (the
	// instance fails a call every second meanwhile: its run-id check).
	for range 60 {
		re.clock.Add(time.Second)
		_, _ = d.ServerRunID(ctx)
	}
	if got, _, err := d.TaskByTenant(ctx, tenantName(1)); err != nil || got.Status != task.StatusRunning {
		t.Errorf("the same a minute into the outage: %+v, %v; want it from memory", got, err)
	}
}
