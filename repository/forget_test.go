package repository

import (
	"errors"
	"testing"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestDualForgetKeepsPlanCounts: plans owned (their counts in memory). A
// start write Redis could not take is mirrored as pending (PENDING →
// RUNNING in memory's counts); the facade then forgets the task (startTask:
// "could not mark task RUNNING") and starts it again later. Memory's plan
// counts must still add up to the plan's tasks (forgotten, the restart
// moved them PENDING → RUNNING a second time: a review).
func TestDualForgetKeepsPlanCounts(t *testing.T) {
	srv := redistest.StartServer(t)
	c := outageClient(t, srv)
	re := newRedisEnv(t, c, "x:", Config{})
	e, d := newDualEnv(t, re) // several instances, plans not shared
	ctx := ctxT(t)
	f := newFailing(func(string) bool { return true })
	f.On.Store(false)
	c.AddHook(f)

	fx := createPlan(t, e, 2, 0)
	other := start(t, e, fx.tasks[1], 1)

	f.On.Store(true)
	r := &runner{t: t, e: e, tk: fx.tasks[0].Clone(), guard: task.Guard{LockValue: "lock-a", Fence: 1}}
	e.setLock(fx.tasks[0].TenantID, "lock-a")
	if err := r.tk.Start(e.clock.Now(), "coord-a", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := r.write(task.StatusPending, task.Write{}); !IsUnavailable(err) {
		t.Fatalf("start with redis down: %v", err)
	}
	d.Forget(fx.tasks[0].ID, 1) // facade.startTask: the start did not land
	f.On.Store(false)

	r2 := start(t, e, fx.tasks[0], 2) // started again once Redis is back
	_, counts, err := d.Memory().Plan(ctx, fx.plan.ID)
	if err != nil {
		t.Fatal(err)
	}
	if counts[task.StatusRunning] != 2 || counts[task.StatusPending] != 0 {
		t.Errorf("memory counts after forget + restart: %s; want RUNNING=2 PENDING=0 (redis: %s)", countsString(counts), countsString(checkCounts(t, re, fx.plan.ID)))
	}
	r2.complete()
	other.complete()
	if p, counts, err := d.Memory().Plan(ctx, fx.plan.ID); !errors.Is(err, plan.ErrNotFound) {
		t.Errorf("plan COMPLETED in redis still in memory as %s %s (err %v)", p.Status, countsString(counts), err)
	}
}

// TestDualSharedPausedTaskLetGo: with SharedWork, a task this instance
// paused (a plan pause), which another instance resumed and completed, must
// not stay in memory for good (it did: a review).
func TestDualSharedPausedTaskLetGo(t *testing.T) {
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		de, d := newSharedDualEnv(t, e, DualConfig{})
		fx := createPlan(t, de, 1, 0)
		mine := start(t, de, fx.tasks[0], 1)
		if err := mine.tk.Pause(e.clock.Now(), "plan paused"); err != nil {
			t.Fatal(err)
		}
		mine.mustWrite(task.StatusRunning, task.Write{ReleaseLock: true})
		stored, _, err := e.redis.Task(ctxT(t), fx.tasks[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := rerun(t, e, stored, 2, "coord-b") // resumed elsewhere
		r.complete()
		if sizes := memSizes(d.Memory()); sizes[1] != 0 {
			t.Errorf("memory holds plans/tasks/fresh/index/history %v after the task completed elsewhere", sizes)
		}
	})
}
