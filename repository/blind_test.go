package repository

import (
	"errors"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// blindStart is claimedStart of the task as its queue entry knows it: id,
// tenant and plan, PENDING at seq 0 at the plan's first stage, nothing else
// (task.Write.Blind).
func blindStart(t *testing.T, e *env, id, tenantID, planID string, fence int64) task.Write {
	t.Helper()
	blank := task.New(id, planID, tenantID, nil, stageNames, time.Time{})
	w := claimedStart(t, e, blank, "blind-"+tenantID, fence)
	w.Blind = true
	return w
}

// TestBlindStart: a start from the queue entry alone is written as a start
// of the task as read, in one round trip, and fills in the fields only the
// record has; a replay is answered the same; counts move exactly.
func TestBlindStart(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 2, 0)
		tk := fx.tasks[1]
		h := &writeArgs{}
		e.client.AddHook(redistest.Each(h.note))
		w := blindStart(t, e, tk.ID, tk.TenantID, fx.plan.ID, 1700000000000)
		rt0 := e.counter.RoundTrips()
		res, err := e.store.WriteTask(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		if f := h.last(); len(f) == 0 || f[len(f)-1] != checkBlind || slices.Contains(f, checkFixedSum) {
			t.Errorf("the blind start sent the fields %v, want ?blind last and no digest", f)
		}
		if rt := e.counter.RoundTrips() - rt0; rt != 1 {
			t.Errorf("a blind start took %d round trips, want 1", rt)
		}
		if res.Seq != 1 {
			t.Fatalf("result %+v, want seq 1", res)
		}
		if !reflect.DeepEqual(w.Task.Params, tk.Params) || w.Task.TotalStages != tk.TotalStages || !w.Task.CreatedAt.Equal(tk.CreatedAt) {
			t.Fatalf("blind start filled params %v, total stages %d, created %s; want %v, %d, %s",
				w.Task.Params, w.Task.TotalStages, w.Task.CreatedAt, tk.Params, tk.TotalStages, tk.CreatedAt)
		}
		got, _, err := e.store.Task(ctx, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != task.StatusRunning || got.Seq != 1 || got.Owner != "coord-a" || got.StageName != tk.StageName ||
			!reflect.DeepEqual(got.Params, tk.Params) || got.TotalStages != tk.TotalStages || !got.CreatedAt.Equal(tk.CreatedAt) {
			t.Fatalf("stored %+v, want the created task RUNNING", got)
		}
		if v := e.lockValue(tk.TenantID); v != "blind-"+tk.TenantID {
			t.Fatalf("lock holds %q", v)
		}
		if c := checkCounts(t, e, fx.plan.ID); c[task.StatusRunning] != 1 || c[task.StatusPending] != 1 {
			t.Fatalf("counts %s", countsString(c))
		}

		// The same write again (its answer lost): answered as written, with
		// the fixed fields again.
		again := w
		again.Task = task.New(tk.ID, fx.plan.ID, tk.TenantID, nil, stageNames, time.Time{})
		_ = again.Task.Start(e.clock.Now(), "coord-a", w.Guard.Fence)
		res2, err := e.store.WriteTask(ctx, again)
		if err != nil || res2.Seq != 1 {
			t.Fatalf("replay: %+v, %v", res2, err)
		}
		if !reflect.DeepEqual(again.Task.Params, tk.Params) || !again.Task.CreatedAt.Equal(tk.CreatedAt) {
			t.Fatalf("replay filled params %v, created %s", again.Task.Params, again.Task.CreatedAt)
		}
		if c := checkCounts(t, e, fx.plan.ID); c[task.StatusRunning] != 1 || c[task.StatusPending] != 1 {
			t.Fatalf("counts after the replay %s", countsString(c))
		}

		// Its later writes are delta writes like any other's (the store
		// remembered the write with the fixed fields as stored).
		r := &runner{t: t, e: e, tk: w.Task.Clone(), guard: w.Guard}
		r.tk.Seq = 1
		rt0 = e.counter.RoundTrips()
		r.complete()
		if rt := e.counter.RoundTrips() - rt0; rt != 1 {
			t.Errorf("the final write after a blind start took %d round trips, want 1 (the fixed fields' digest matched)", rt)
		}
		if f := h.last(); !slices.Contains(f, checkPrevWrite) {
			t.Errorf("the final write after a blind start sent %v, want a delta write (?prevWrite)", f)
		}
		got, _, err = e.store.Task(ctx, tk.ID)
		if err != nil || got.Status != task.StatusCompleted || !reflect.DeepEqual(got.Params, tk.Params) {
			t.Fatalf("after the final write: %+v, %v", got, err)
		}
	})
}

// TestBlindStartRefused: a blind start of a task written since its
// creation, of a task of another plan, or of a missing record writes
// nothing and says why; the counts stay exact.
func TestBlindStartRefused(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 3, 0)
		other := createPlan(t, e, 1, 0)

		// Written since: cancelled while PENDING.
		c := fx.tasks[0].Clone()
		_ = c.Cancel(e.clock.Now(), "not needed")
		if _, err := e.store.WriteTask(ctx, task.Write{Task: c, PrevStatus: task.StatusPending}); err != nil {
			t.Fatal(err)
		}
		_, err := e.store.WriteTask(ctx, blindStart(t, e, c.ID, c.TenantID, fx.plan.ID, 1700000000000))
		if re := refusedAs(t, err, task.RefusedSeq); re.Status != task.StatusCancelled || re.Seq != 1 {
			t.Fatalf("refusal %+v", re)
		}

		// Of another plan (the entry names this plan, the record another).
		tk := fx.tasks[1]
		w := blindStart(t, e, tk.ID, tk.TenantID, other.plan.ID, 1700000000001)
		_, err = e.store.WriteTask(ctx, w)
		if re := refusedAs(t, err, task.RefusedPlan); re.Status != task.StatusPending || re.Seq != 0 {
			t.Fatalf("refusal %+v", re)
		}
		if w.Task.Params != nil || !w.Task.CreatedAt.IsZero() {
			t.Fatalf("a refused blind start filled in %+v", w.Task)
		}

		// A record that is not there.
		_, err = e.store.WriteTask(ctx, blindStart(t, e, task.NewID(e.clock.Now()), "t-nobody", fx.plan.ID, 1700000000002))
		refusedAs(t, err, task.RefusedMissing)

		for _, id := range []string{fx.tasks[1].ID, fx.tasks[2].ID} {
			got, _, err := e.store.Task(ctx, id)
			if err != nil || got.Status != task.StatusPending || got.Seq != 0 {
				t.Fatalf("task %s after refusals: %+v, %v", id, got, err)
			}
		}
		if v := e.lockValue(tk.TenantID); v != "" {
			t.Fatalf("a refused blind start left the lock %q", v)
		}
		if c := checkCounts(t, e, fx.plan.ID); c[task.StatusPending] != 2 || c[task.StatusCancelled] != 1 || c[task.StatusRunning] != 0 {
			t.Fatalf("counts %s", countsString(c))
		}
		if c := checkCounts(t, e, other.plan.ID); c[task.StatusPending] != 1 || c[task.StatusRunning] != 0 {
			t.Fatalf("other plan's counts %s", countsString(c))
		}
	})
}

// TestBlindStartInvalid: a blind write that is not a start taking the lock
// at seq 0 is refused as invalid before anything is sent, and so is any
// blind write to a store that cannot take it.
func TestBlindStartInvalid(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		tk := fx.tasks[0]
		noLock := blindStart(t, e, tk.ID, tk.TenantID, fx.plan.ID, 1700000000000)
		noLock.TakeLock = 0
		later := blindStart(t, e, tk.ID, tk.TenantID, fx.plan.ID, 1700000000000)
		later.ExpectSeq = 1
		hostile := blindStart(t, e, tk.ID, tk.TenantID, fx.plan.ID, 1700000000000)
		hostile.Task.PlanID = "p-{x}:*\n"
		rt0 := e.counter.RoundTrips()
		for name, w := range map[string]task.Write{"without TakeLock": noLock, "at seq 1": later, "hostile plan id": hostile} {
			if _, err := e.store.WriteTask(ctx, w); !errors.Is(err, task.ErrInvalid) && !errors.Is(err, plan.ErrInvalid) {
				t.Errorf("%s: err = %v, want an invalid input error", name, err)
			}
		}
		if rt := e.counter.RoundTrips() - rt0; rt != 0 {
			t.Errorf("invalid blind writes sent %d round trips", rt)
		}
		single := NewDual(NewMemory(MemoryConfig{Clock: e.clock.Now}), e.redis, DualConfig{SingleInstance: true})
		if single.BlindStarts() {
			t.Error("single-instance Dual takes blind starts")
		}
		mem := NewMemory(MemoryConfig{Clock: e.clock.Now})
		if _, err := mem.WriteTask(ctx, blindStart(t, e, tk.ID, tk.TenantID, fx.plan.ID, 1700000000000)); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("memory store: err = %v, want task.ErrInvalid", err)
		}
		if got, _, err := e.store.Task(ctx, tk.ID); err != nil || got.Seq != 0 {
			t.Fatalf("task after invalid writes: %+v, %v", got, err)
		}
	})
}

// TestDualBlindStart: the Dual store mirrors a blind start with the task as
// stored, and a store that did not create the task reads nothing to start
// it.
func TestDualBlindStart(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		tk := fx.tasks[0]
		de, d := newDualEnv(t, e) // another instance: its memory never saw the task
		if !d.BlindStarts() {
			t.Fatal("Dual with shared Redis does not take blind starts")
		}
		var hgetalls atomic.Int64
		e.client.AddHook(redistest.Each(func(c redis.Cmder) {
			if c.Name() == "hgetall" {
				hgetalls.Add(1)
			}
		}))
		w := blindStart(t, de, tk.ID, tk.TenantID, fx.plan.ID, 1700000000000)
		if _, err := d.WriteTask(ctx, w); err != nil {
			t.Fatal(err)
		}
		got, _, err := d.mem.Task(ctx, tk.ID)
		if err != nil {
			t.Fatalf("the start is not mirrored: %v", err)
		}
		if got.Status != task.StatusRunning || got.Seq != 1 || !reflect.DeepEqual(got.Params, tk.Params) ||
			got.TotalStages != tk.TotalStages || !got.CreatedAt.Equal(tk.CreatedAt) {
			t.Fatalf("mirrored %+v, want the created task RUNNING", got)
		}
		// The task's next write goes from the mirror in one round trip: the
		// fixed fields set from the answer match the record's digest (a
		// wrong one would have the script ask for them: a second trip).
		r := &runner{t: t, e: de, tk: w.Task.Clone(), guard: w.Guard}
		r.tk.Seq = 1
		rt0 := e.counter.RoundTrips()
		r.complete()
		if rt := e.counter.RoundTrips() - rt0; rt != 1 {
			t.Errorf("the final write after a blind start took %d round trips, want 1", rt)
		}
		if n := hgetalls.Load(); n != 0 {
			t.Errorf("%d HGETALLs for a blind start and the final write, want 0", n)
		}
	})
}
