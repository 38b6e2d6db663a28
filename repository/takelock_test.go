package repository

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// claimedStart builds a start of tk (as created) that takes the tenant lock
// itself: value, fence, a lease of a minute.
func claimedStart(t *testing.T, e *env, tk *task.Task, value string, fence int64) task.Write {
	t.Helper()
	started := tk.Clone()
	if err := started.Start(e.clock.Now(), "coord-a", fence); err != nil {
		t.Fatal(err)
	}
	return task.Write{Task: started, PrevStatus: task.StatusPending, ExpectSeq: tk.Seq,
		Guard: task.Guard{LockValue: value, Fence: fence}, TakeLock: time.Minute, ID: task.NewWriteID(),
		Events: []task.Event{{At: e.clock.Now(), Type: task.EventStarted, Instance: "coord-a", Fence: fence}}}
}

func (e *env) fenceKey(tenantID string) string {
	k, _ := e.redis.Keys().Fence(tenantID)
	return k
}

func (e *env) lockKey(tenantID string) string {
	k, _ := e.redis.Keys().Lock(tenantID)
	return k
}

func TestStartTakesLock(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 2, 0)
		tk := fx.tasks[0]
		w := claimedStart(t, e, tk, "value-a", 1700000000000)
		rt0 := e.counter.RoundTrips()
		res, err := e.store.WriteTask(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		if rt := e.counter.RoundTrips() - rt0; rt != 1 {
			t.Errorf("a start that takes the lock took %d round trips, want 1", rt)
		}
		if res.Seq != 1 || res.PlanStatus == "" {
			t.Fatalf("result %+v, want seq 1 and the plan's status", res)
		}
		if v := e.lockValue(tk.TenantID); v != "value-a" {
			t.Fatalf("lock holds %q, want value-a", v)
		}
		ttl := e.client.PTTL(ctx, e.lockKey(tk.TenantID)).Val()
		if ttl <= 50*time.Second || ttl > time.Minute {
			t.Errorf("lock TTL %s, want the lease (1m)", ttl)
		}
		if f := e.client.Get(ctx, e.fenceKey(tk.TenantID)).Val(); f != "1700000000000" {
			t.Errorf("fence counter %q, want the start's fence", f)
		}
		got, _, err := e.store.Task(ctx, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != task.StatusRunning || got.Fence != 1700000000000 || got.Seq != 1 || got.Owner != "coord-a" {
			t.Fatalf("stored %+v", got)
		}
		tl, err := e.store.Timeline(ctx, tk.TenantID, tk.ID, 0)
		if err != nil || len(tl) != 1 || tl[0].Type != task.EventStarted || tl[0].Fence != 1700000000000 {
			t.Fatalf("timeline %+v, %v", tl, err)
		}
		if c := checkCounts(t, e, fx.plan.ID); c[task.StatusRunning] != 1 || c[task.StatusPending] != 1 {
			t.Fatalf("counts %s", countsString(c))
		}

		// The same write again (an attempt whose answer was lost): answered
		// as written, nothing applied twice.
		again, err := e.store.WriteTask(ctx, w)
		if err != nil || again.Seq != 1 {
			t.Fatalf("the same start again: %+v, %v", again, err)
		}
		if c := checkCounts(t, e, fx.plan.ID); c[task.StatusRunning] != 1 || c[task.StatusPending] != 1 {
			t.Fatalf("counts after the replay %s", countsString(c))
		}
		if v := e.lockValue(tk.TenantID); v != "value-a" {
			t.Fatalf("lock after the replay %q", v)
		}

		// The next writes of the run go under the lock it took.
		r := &runner{t: t, e: e, tk: w.Task, guard: w.Guard}
		r.tk.Seq = 1
		r.complete()
		if v := e.lockValue(tk.TenantID); v != "" {
			t.Fatalf("lock %q after the final write, want released", v)
		}
	})
}

// TestStartNotTakingLockWritesNothing: a start whose lock is held, or whose
// fence the counter is not below (or is not a counter), leaves the record,
// timeline, counts, lock and counter as they were.
func TestStartNotTakingLockWritesNothing(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		tk := fx.tasks[0]
		const fence = 1700000000000
		cases := []struct {
			name, reason string
			prepare      func()
		}{
			{"held by another value", "locked", func() { e.setLock(tk.TenantID, "someone-else") }},
			{"counter at the fence", "fence", func() { e.client.Set(ctx, e.fenceKey(tk.TenantID), fence, 0) }},
			{"counter above the fence", "fence", func() { e.client.Set(ctx, e.fenceKey(tk.TenantID), fence+5, 0) }},
			{"counter not a number", "fence", func() { e.client.Set(ctx, e.fenceKey(tk.TenantID), "12{x}*", 0) }},
			{"counter of another type", "fence", func() { e.client.RPush(ctx, e.fenceKey(tk.TenantID), "1") }},
		}
		for _, c := range cases {
			e.setLock(tk.TenantID, "")
			e.client.Del(ctx, e.fenceKey(tk.TenantID))
			c.prepare()
			before := snap(t, e, tk)
			counter := e.client.Dump(ctx, e.fenceKey(tk.TenantID)).Val()
			_, err := e.store.WriteTask(ctx, claimedStart(t, e, tk, "value-a", fence))
			var nt *task.LockNotTakenError
			if !errors.As(err, &nt) || !errors.Is(err, task.ErrLockNotTaken) || nt.Reason != c.reason || nt.TenantID != tk.TenantID {
				t.Fatalf("%s: err = %v, want a *task.LockNotTakenError (%s)", c.name, err, c.reason)
			}
			if after := snap(t, e, tk); !reflect.DeepEqual(before, after) {
				t.Errorf("%s: changed by a refused start:\nbefore %+v\nafter  %+v", c.name, before, after)
			}
			if got := e.client.Dump(ctx, e.fenceKey(tk.TenantID)).Val(); got != counter {
				t.Errorf("%s: fence counter changed", c.name)
			}
		}

		// Free again, the same start takes the lock.
		e.setLock(tk.TenantID, "")
		e.client.Set(ctx, e.fenceKey(tk.TenantID), fence-1, 0)
		if _, err := e.store.WriteTask(ctx, claimedStart(t, e, tk, "value-a", fence)); err != nil {
			t.Fatal(err)
		}
		if c := checkCounts(t, e, fx.plan.ID); c[task.StatusRunning] != 1 || c[task.StatusPending] != 0 {
			t.Fatalf("counts %s", countsString(c))
		}
	})
}

// TestStartTakingLockRefusedLeavesLock: a start refused by the record's
// checks (another writer moved it) does not take the lock.
func TestStartTakingLockRefusedLeavesLock(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		tk := fx.tasks[0]
		stale := claimedStart(t, e, tk, "value-b", 1700000000005)
		start(t, e, tk, 1700000000001).complete()
		_, err := e.store.WriteTask(ctx, stale)
		re := refusedAs(t, err, task.RefusedSeq)
		if re.Status != task.StatusCompleted {
			t.Fatalf("refusal %+v", re)
		}
		if v := e.lockValue(tk.TenantID); v != "" {
			t.Fatalf("lock %q, want none", v)
		}
		if f := e.client.Get(ctx, e.fenceKey(tk.TenantID)).Val(); f != "" {
			t.Fatalf("fence counter %q, want untouched (none)", f)
		}
		if c := checkCounts(t, e, fx.plan.ID); c[task.StatusCompleted] != 1 || c[task.StatusRunning] != 0 {
			t.Fatalf("counts %s", countsString(c))
		}
	})
}

func TestStartTakingLockBadInput(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		tk := fx.tasks[0]
		before := snap(t, e, tk)
		good := func() task.Write { return claimedStart(t, e, tk, "value-a", 1700000000000) }
		bad := map[string]func() task.Write{
			"lease under 1ms": func() task.Write { w := good(); w.TakeLock = time.Microsecond; return w },
			"negative lease":  func() task.Write { w := good(); w.TakeLock = -time.Second; return w },
			"no lock value":   func() task.Write { w := good(); w.Guard.LockValue = ""; return w },
			"no fence":        func() task.Write { w := good(); w.Guard.Fence = 0; return w },
			"releases it too": func() task.Write { w := good(); w.ReleaseLock = true; return w },
			"not a start": func() task.Write {
				w := good()
				w.PrevStatus = task.StatusRunning
				return w
			},
		}
		if e.redis == nil {
			bad["the memory store"] = good
		} else {
			// A Dual in single-instance mode (in-process locks) refuses the
			// write itself.
			single := NewDual(NewMemory(MemoryConfig{Clock: e.clock.Now, DropFinished: true}), e.redis, DualConfig{SingleInstance: true})
			if _, err := single.WriteTask(ctx, good()); !errors.Is(err, task.ErrInvalid) {
				t.Errorf("single-instance Dual: err = %v, want task.ErrInvalid", err)
			}
		}
		for name, mk := range bad {
			_, err := e.store.WriteTask(ctx, mk())
			if !errors.Is(err, task.ErrInvalid) {
				t.Errorf("%s: err = %v, want task.ErrInvalid", name, err)
			}
		}
		if after := snap(t, e, tk); !reflect.DeepEqual(before, after) {
			t.Errorf("changed by refused input:\nbefore %+v\nafter  %+v", before, after)
		}
	})
}

// TestLockKeys: the keys a start takes are Keys.Lock and
// Keys.Fence, and a hostile tenant id is refused before any key is built.
func TestLockKeys(t *testing.T) {
	t.Parallel()
	_, c := redistest.Mini(t)
	r, err := NewRedis(c, Config{Prefix: "p:"})
	if err != nil {
		t.Fatal(err)
	}
	lk, fk, err := r.LockKeys("acme")
	if err != nil || lk != "p:lock:tenant:{acme}" || fk != "p:fence:tenant:{acme}" {
		t.Fatalf("LockKeys = %q, %q, %v", lk, fk, err)
	}
	for _, bad := range []string{"", "a{b}", "a:b", "a*", "a\nb", string(make([]byte, 300))} {
		if _, _, err := r.LockKeys(bad); err == nil {
			t.Errorf("LockKeys(%q) accepted", bad)
		}
	}
}
