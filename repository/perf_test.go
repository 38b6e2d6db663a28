package repository

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Tests of what makes the store fast: the tenant hints, the group commit of
// task writes, the slim writes (fixed fields, TTL refresh), the compact
// memory half. Each also checks that the answers stay right.

// countRT returns the round trips f makes (failing the test on an error).
func countRT(t *testing.T, e *env, f func() error) int64 {
	t.Helper()
	var err error
	n := e.counter.Count(func() { err = f() })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestTaskByTenantHints(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 3, 0)
		r := start(t, e, fx.tasks[0], 1)
		query := func(want string) func() error {
			return func() error {
				got, _, err := e.store.TaskByTenant(ctx, tenantName(0))
				if err == nil && got.ID != want {
					err = fmt.Errorf("TaskByTenant = task %s, want %s", got.ID, want)
				}
				return err
			}
		}
		if n := countRT(t, e, query(r.tk.ID)); n != 2 {
			t.Errorf("first query: %d round trips, want 2 (no hint yet)", n)
		}
		if n := countRT(t, e, query(r.tk.ID)); n != 1 {
			t.Errorf("second query: %d round trips, want 1 (the hint holds)", n)
		}
		// The record moves on: the hint still names the task, the answer is new.
		cp, _ := checkpoint.Empty().Complete(0, "push-config", nil)
		r.tk.EnterStage(1, "migrate", e.clock.Now())
		r.mustWrite(task.StatusRunning, task.Write{Checkpoint: &cp})
		if got, ck, err := e.store.TaskByTenant(ctx, tenantName(0)); err != nil || got.Seq != r.tk.Seq || got.StageIndex != 1 || ck == nil {
			t.Fatalf("query after a write: %+v, %+v, %v", got, ck, err)
		}

		// A new plan moves the tenant's index: the stale hint must not answer.
		e.clock.Add(time.Second)
		fx2 := createPlan(t, e, 1, 0)
		if n := countRT(t, e, query(fx2.tasks[0].ID)); n != 2 {
			t.Errorf("query after the index moved: %d round trips, want 2 (stale hint)", n)
		}
		if n := countRT(t, e, query(fx2.tasks[0].ID)); n != 1 {
			t.Errorf("query after that: %d round trips, want 1", n)
		}

		// The index (history) is gone: not found, whatever the hint said.
		k, _ := e.redis.keys.History(tenantName(0))
		e.client.Del(ctx, k)
		if _, _, err := e.store.TaskByTenant(ctx, tenantName(0)); !errors.Is(err, task.ErrNotFound) {
			t.Fatalf("query without an index: %v, want not found", err)
		}
		if n := countRT(t, e, func() error {
			_, _, err := e.store.TaskByTenant(ctx, tenantName(0))
			if errors.Is(err, task.ErrNotFound) {
				return nil
			}
			return fmt.Errorf("want not found, got %v", err)
		}); n != 1 {
			t.Errorf("not found: %d round trips, want 1", n)
		}
		// The index points at a task whose record is gone (expired).
		e.client.ZAdd(ctx, k, redis.Z{Score: 1, Member: fx2.tasks[0].ID})
		if _, _, err := e.store.TaskByTenant(ctx, tenantName(0)); err != nil {
			t.Fatal(err)
		}
		tk, _ := e.redis.keys.Task(tenantName(0), fx2.tasks[0].ID)
		e.client.Del(ctx, tk)
		if _, _, err := e.store.TaskByTenant(ctx, tenantName(0)); !errors.Is(err, task.ErrNotFound) {
			t.Fatalf("query of an expired record: %v, want not found", err)
		}
	})
}

func TestTaskByTenantWithoutHints(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{TenantHints: -1}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		for i := range 3 {
			if n := countRT(t, e, func() error { _, _, err := e.store.TaskByTenant(ctx, fx.tasks[0].TenantID); return err }); n != 2 {
				t.Errorf("query %d: %d round trips, want 2", i, n)
			}
		}
	})
}

func TestTasksByTenantHints(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 20, 0)
		tenants := make([]string, 0, 21)
		for i := range 20 {
			tenants = append(tenants, tenantName(i))
		}
		tenants = append(tenants, "no-such-tenant")
		check := func(want map[string]string) int64 {
			t.Helper()
			var got map[string]*task.Task
			n := countRT(t, e, func() error {
				var err error
				got, _, err = e.store.TasksByTenant(ctx, tenants)
				return err
			})
			ids := map[string]string{}
			for tenant, tk := range got {
				ids[tenant] = tk.ID
			}
			if !reflect.DeepEqual(ids, want) {
				t.Fatalf("TasksByTenant = %v, want %v", ids, want)
			}
			return n
		}
		want := map[string]string{}
		for _, tk := range fx.tasks {
			want[tk.TenantID] = tk.ID
		}
		if n := check(want); n != 2 {
			t.Errorf("first read: %d round trips, want 2", n)
		}
		if n := check(want); n != 1 {
			t.Errorf("second read: %d round trips, want 1 (every hint holds)", n)
		}
		// Half the tenants get a new task: the stale hints are read again.
		e.clock.Add(time.Second)
		fx2 := createPlan(t, e, 10, 0)
		for _, tk := range fx2.tasks {
			want[tk.TenantID] = tk.ID
		}
		if n := check(want); n != 2 {
			t.Errorf("read after the index moved: %d round trips, want 2", n)
		}
		if n := check(want); n != 1 {
			t.Errorf("read after that: %d round trips, want 1", n)
		}
	})
}

func TestTenantHintsStayBounded(t *testing.T) {
	t.Parallel()
	h := newTenantHints(64)
	for i := range 1000 {
		h.put(tenantName(i), fmt.Sprintf("task-%d", i))
	}
	n := 0
	for i := range h.shards {
		n += len(h.shards[i].m)
	}
	if n > 64 || n < hintShards {
		t.Fatalf("%d hints kept, want at most 64", n)
	}
	if got := h.get(tenantName(999)); got != "task-999" {
		t.Fatalf("newest hint %q, want task-999", got)
	}
	h.forget(tenantName(999))
	if got := h.get(tenantName(999)); got != "" {
		t.Fatalf("forgotten hint %q", got)
	}
}

// heldWriters makes one stage write on each of writers new tasks: the first
// write's pipeline is held in flight until the others have queued behind
// it. It returns the round trips the writes took.
func heldWriters(t *testing.T, e *env, writers int) int64 {
	t.Helper()
	fx := createPlan(t, e, writers, 0)
	runners := make([]*runner, writers)
	for i, tk := range fx.tasks {
		runners[i] = start(t, e, tk, 1)
	}
	return heldBatch(t, e, e.redis.batcher, "evalsha", writers, func(i int) error {
		r := runners[i]
		r.tk.EnterStage(1, stageNames[1], e.clock.Now())
		_, err := r.write(task.StatusRunning, task.Write{})
		return err
	})
}

// stageWriters runs writers goroutines, each writing rounds stage writes to
// a task of its own, and returns the round trips they made.
func stageWriters(t *testing.T, e *env, writers, rounds int) int64 {
	t.Helper()
	fx := createPlan(t, e, writers, 0)
	runners := make([]*runner, writers)
	for i, tk := range fx.tasks {
		runners[i] = start(t, e, tk, 1)
	}
	before := e.counter.RoundTrips()
	concurrently(t, writers, func(g int) error {
		r := runners[g]
		for i := range rounds {
			r.tk.EnterStage(i%3, stageNames[i%3], e.clock.Now())
			if _, err := r.write(task.StatusRunning, task.Write{Events: []task.Event{{Type: task.EventStageStarted}}}); err != nil {
				return err
			}
		}
		return nil
	})
	n := e.counter.RoundTrips() - before
	for i, r := range runners {
		got, _, err := e.store.Task(ctxT(t), r.tk.ID)
		if err != nil || got.Seq != int64(1+rounds) || got.Seq != r.tk.Seq {
			t.Fatalf("task %d: %+v, %v; want seq %d", i, got, err, 1+rounds)
		}
		tl, _ := e.store.Timeline(ctxT(t), r.tk.TenantID, r.tk.ID, 0)
		if len(tl) != 1+rounds {
			t.Fatalf("task %d: %d timeline entries, want %d", i, len(tl), 1+rounds)
		}
	}
	return n
}

func TestGroupCommitSharesPipelines(t *testing.T) {
	t.Parallel()
	const writers, rounds = 16, 30
	t.Run("batching", func(t *testing.T) {
		t.Parallel()
		eachRedis(t, Config{}, func(t *testing.T, e *env) {
			n := stageWriters(t, e, writers, rounds)
			t.Logf("%d writes under random concurrent load in %d round trips", writers*rounds, n)
			// Deterministically: with the first write's pipeline held until
			// the others have queued, 16 writes take two round trips.
			if n := heldWriters(t, e, writers); n != 2 {
				t.Errorf("%d writes, %d of them queued behind the first, took %d round trips, want 2 (the first's and one shared)", writers, writers-1, n)
			}
		})
	})
	t.Run("NoWriteBatching", func(t *testing.T) {
		t.Parallel()
		eachRedis(t, Config{NoWriteBatching: true}, func(t *testing.T, e *env) {
			if n := stageWriters(t, e, writers, rounds); n != writers*rounds {
				t.Errorf("%d writes without batching took %d round trips, want one each", writers*rounds, n)
			}
		})
	})
}

// TestGroupCommitCounts: concurrent status changes in shared pipelines
// move the plan's counts exactly once each.
func TestGroupCommitCounts(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{WriteBatchMax: 4}, func(t *testing.T, e *env) {
		fx := createPlan(t, e, 40, 0)
		var wg sync.WaitGroup
		for i, tk := range fx.tasks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := start(t, e, tk, 1)
				if i%4 == 0 {
					r.fail("boom")
				} else {
					r.complete()
				}
			}()
		}
		wg.Wait()
		counts := checkCounts(t, e, fx.plan.ID)
		p, _, _ := e.store.Plan(ctxT(t), fx.plan.ID)
		if counts[task.StatusCompleted] != 30 || counts[task.StatusFailed] != 10 || p.Status != plan.StatusFailed {
			t.Fatalf("plan %s, counts %s", p.Status, countsString(counts))
		}
	})
}

// TestGroupCommitNoScript: writes in a shared pipeline whose scripts Redis
// forgot are sent again with EVAL, and each lands once.
func TestGroupCommitNoScript(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	e := newRedisEnv(t, srv.Client(), "x:", Config{})
	ctx := ctxT(t)
	fx := createPlan(t, e, 16, 0)
	runners := make([]*runner, len(fx.tasks))
	for i, tk := range fx.tasks {
		runners[i] = start(t, e, tk, 1)
	}
	if err := e.client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.complete()
		}()
	}
	wg.Wait()
	counts := checkCounts(t, e, fx.plan.ID)
	if counts[task.StatusCompleted] != len(fx.tasks) {
		t.Fatalf("counts %s", countsString(counts))
	}
	for _, r := range runners {
		if tl, _ := e.store.Timeline(ctx, r.tk.TenantID, r.tk.ID, 0); len(tl) != 1 {
			t.Fatalf("timeline %+v, want the start entry once", tl)
		}
	}
}

// TestGroupCommitCallerGivesUp: a write queued behind a pipeline in flight
// whose caller gives up (its deadline passes, or it cancels) is dropped:
// the caller gets the context's error at once, the write never reaches
// Redis, the others go on. A cancelled caller sets no deadline on the
// batch, so only the drop keeps its write out.
func TestGroupCommitCallerGivesUp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		giveUp func(ctx context.Context) (context.Context, context.CancelFunc)
		want   error
	}{
		{"Deadline", func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 200*time.Millisecond)
		}, context.DeadlineExceeded},
		{"Cancel", func(ctx context.Context) (context.Context, context.CancelFunc) {
			c, cancel := context.WithCancel(ctx)
			time.AfterFunc(200*time.Millisecond, cancel)
			return c, cancel
		}, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
			t.Cleanup(func() { _ = c.Close() })
			e := newRedisEnv(t, c, "x:", Config{})
			ctx := ctxT(t)
			fx := createPlan(t, e, 2, 0)
			leader, queued := start(t, e, fx.tasks[0], 1), start(t, e, fx.tasks[1], 1)

			srv.Stop()
			leaderDone := make(chan error, 1)
			go func() {
				leader.tk.EnterStage(1, "migrate", e.clock.Now())
				_, err := leader.write(task.StatusRunning, task.Write{})
				leaderDone <- err
			}()
			// Wait until the leader's pipeline is in flight.
			deadline := time.Now().Add(5 * time.Second)
			for !e.redis.batcher.busy() {
				if time.Now().After(deadline) {
					srv.Cont()
					t.Fatal("the leader's write never went in flight")
				}
				time.Sleep(time.Millisecond)
			}
			qctx, cancel := tt.giveUp(ctx)
			defer cancel()
			queued.tk.EnterStage(1, "migrate", e.clock.Now())
			began := time.Now()
			_, err := e.store.WriteTask(qctx, task.Write{Task: queued.tk, PrevStatus: task.StatusRunning, ExpectSeq: queued.tk.Seq, Guard: queued.guard})
			if !errors.Is(err, tt.want) || (tt.want == context.DeadlineExceeded && !IsUnavailable(err)) || time.Since(began) > 3*time.Second {
				srv.Cont()
				t.Fatalf("queued write whose caller gave up: %v after %s, want %v at once", err, time.Since(began), tt.want)
			}
			srv.Cont()
			if err := <-leaderDone; err != nil {
				t.Fatalf("leader write: %v", err)
			}
			if got, _, _ := e.store.Task(ctx, queued.tk.ID); got.Seq != queued.tk.Seq || got.StageIndex != 0 {
				t.Fatalf("dropped write landed: %+v", got)
			}
			// Writes go on.
			if _, err := queued.write(task.StatusRunning, task.Write{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWriteChangedFixedFields: a write that changes a field written at
// creation (params here) takes one more round trip and stores it; a record
// without the digest (written by an older version) gets it.
func TestWriteChangedFixedFields(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		r := start(t, e, fx.tasks[0], 1)
		if n := countRT(t, e, func() error { _, err := r.write(task.StatusRunning, task.Write{}); return err }); n != 1 {
			t.Errorf("unchanged fixed fields: %d round trips, want 1", n)
		}
		r.tk.Params = map[string]any{"version": "2.0.0"}
		r.tk.TotalStages = 5
		if n := countRT(t, e, func() error { _, err := r.write(task.StatusRunning, task.Write{}); return err }); n != 2 {
			t.Errorf("changed params: %d round trips, want 2", n)
		}
		got, _, err := e.store.Task(ctx, r.tk.ID)
		if err != nil || got.Params["version"] != "2.0.0" || got.TotalStages != 5 || got.Seq != r.tk.Seq {
			t.Fatalf("after the change: %+v, %v", got, err)
		}
		if n := countRT(t, e, func() error { _, err := r.write(task.StatusRunning, task.Write{}); return err }); n != 1 {
			t.Errorf("after the change: %d round trips, want 1", n)
		}
		// A refused write with changed fields is still refused (nothing written).
		stale := *r
		stale.tk = r.tk.Clone()
		stale.tk.Seq--
		stale.tk.Params = map[string]any{"version": "3"}
		if _, err := stale.write(task.StatusRunning, task.Write{}); !errors.Is(err, task.ErrWriteRefused) {
			t.Fatalf("stale write: %v", err)
		}
		// A record without the digest.
		tk, _ := e.redis.keys.Task(r.tk.TenantID, r.tk.ID)
		e.client.HDel(ctx, tk, fFixedSum)
		_ = r.tk.Complete(e.clock.Now())
		if n := countRT(t, e, func() error { _, err := r.write(task.StatusRunning, task.Write{ReleaseLock: true}); return err }); n != 2 {
			t.Errorf("record without a digest: %d round trips, want 2", n)
		}
		if got, _, _ := e.store.Task(ctx, r.tk.ID); got.Status != task.StatusCompleted || got.Params["version"] != "2.0.0" {
			t.Fatalf("after the write: %+v", got)
		}
		if e.client.HGet(ctx, tk, fFixedSum).Val() == "" {
			t.Fatal("the digest was not stored")
		}
		checkCounts(t, e, fx.plan.ID)
	})
}

// setTTLs gives keys the TTL d.
func setTTLs(ctx context.Context, e *env, d time.Duration, keys ...string) {
	for _, k := range keys {
		e.client.PExpire(ctx, k, d)
	}
}

// ttlsOf returns the TTLs keys have left.
func ttlsOf(ctx context.Context, e *env, keys ...string) []time.Duration {
	out := make([]time.Duration, len(keys))
	for i, k := range keys {
		out[i] = e.client.PTTL(ctx, k).Val()
	}
	return out
}

// TestWriteRefreshesTTLsWhenLow: writes give a task's keys the TTL again
// only when they got it more than min(TTL/100, 30 s) ago (the record's
// ttlAt, by the writer's clock).
func TestWriteRefreshesTTLsWhenLow(t *testing.T) {
	t.Parallel()
	const ttl = 48 * time.Hour
	eachRedis(t, Config{TTL: ttl}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		r := start(t, e, fx.tasks[0], 1)
		tk, _ := e.redis.keys.taskKeys(r.tk.TenantID, r.tk.ID)
		pk, _ := e.redis.keys.planKeys(fx.plan.ID)
		keys := []string{tk.task, tk.timeline, tk.history}
		setTTL := func(d time.Duration, keys ...string) { setTTLs(ctx, e, d, keys...) }
		ttls := func(keys ...string) []time.Duration { return ttlsOf(ctx, e, keys...) }
		// Given 10 s ago: a write leaves the TTLs alone.
		setTTL(ttl-10*time.Second, keys...)
		e.clock.Add(10 * time.Second)
		r.tk.EnterStage(1, "migrate", e.clock.Now())
		r.mustWrite(task.StatusRunning, task.Write{})
		for i, d := range ttls(keys...) {
			if d > ttl-10*time.Second {
				t.Errorf("%s: TTL %s, refreshed although %s were left", keys[i], d, ttl-10*time.Second)
			}
		}
		// Given TTL - 1 h ago, an hour left: the next write refreshes them all.
		setTTL(time.Hour, keys...)
		e.clock.Add(ttl - time.Hour - 10*time.Second)
		r.mustWrite(task.StatusRunning, task.Write{})
		for i, d := range ttls(keys...) {
			if d < ttl-time.Minute {
				t.Errorf("%s: TTL %s after a write with an hour left, want about %s", keys[i], d, ttl)
			}
		}
		// The same for the plan's keys on a counts move.
		setTTL(time.Hour, pk.plan, pk.tasks, pk.counts)
		r.complete()
		for i, d := range ttls(pk.plan, pk.tasks, pk.counts) {
			if d < ttl-time.Minute {
				t.Errorf("plan key %d: TTL %s after a counts move, want about %s", i, d, ttl)
			}
		}
	})
}

// TestCountsMoveTTLAt: the plan record holds ttlAt (set at creation); a
// counts move gives the plan's keys the TTL again only when it is older than
// the margin (or missing, a plan stored before it existed), and sets it to
// the writer's now — no PTTL of its own.
func TestCountsMoveTTLAt(t *testing.T) {
	t.Parallel()
	const ttl = 48 * time.Hour
	eachRedis(t, Config{TTL: ttl}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 4, 0)
		pk, _ := e.redis.keys.planKeys(fx.plan.ID)
		keys := []string{pk.plan, pk.tasks, pk.counts}
		ttlAt := func() string { return e.client.HGet(ctx, pk.plan, fTTLAt).Val() }
		if got, want := ttlAt(), fmt.Sprint(e.clock.Now().UnixMilli()); got != want {
			t.Fatalf("ttlAt %q after creation, want %s", got, want)
		}
		shortTTL := func() { setTTLs(ctx, e, time.Hour, keys...) }
		refreshed := func() bool {
			t.Helper()
			n := 0
			for _, d := range ttlsOf(ctx, e, keys...) {
				if d > ttl-time.Minute {
					n++
				}
			}
			if n != 0 && n != len(keys) {
				t.Fatalf("%d of the plan's %d keys refreshed", n, len(keys))
			}
			return n == len(keys)
		}
		// ttlAt 10 s old: a start (plan stays RUNNING) leaves the TTLs.
		shortTTL()
		e.clock.Add(10 * time.Second)
		start(t, e, fx.tasks[0], 1)
		if refreshed() {
			t.Fatal("plan keys refreshed although ttlAt is 10 s old")
		}
		// An hour older than the margin: the next move refreshes them.
		e.clock.Add(time.Hour)
		start(t, e, fx.tasks[1], 1)
		if !refreshed() {
			t.Fatal("plan keys not refreshed by a move with ttlAt an hour old")
		}
		if got, want := ttlAt(), fmt.Sprint(e.clock.Now().UnixMilli()); got != want {
			t.Fatalf("ttlAt %q after the refresh, want the writer's now %s", got, want)
		}
		// A plan stored before ttlAt: refreshed at its next move.
		e.client.HDel(ctx, pk.plan, fTTLAt)
		shortTTL()
		start(t, e, fx.tasks[2], 1)
		if !refreshed() || ttlAt() == "" {
			t.Fatalf("a plan without ttlAt: refreshed %v, ttlAt %q", refreshed(), ttlAt())
		}
		// ttlAt does not reach the plan as read.
		if got, _, err := e.store.Plan(ctx, fx.plan.ID); err != nil || got.ID != fx.plan.ID {
			t.Fatalf("plan read with ttlAt: %v, %v", got, err)
		}
	})
}

// TestWriteTTLAt: a record without ttlAt (stored before it existed) gets
// its keys' TTL and ttlAt at its next write; a ttlAt ahead of the writer's
// clock (another instance's clock ahead of this one's) refreshes nothing
// until the writer's clock passes it by the margin, and is not an error.
func TestWriteTTLAt(t *testing.T) {
	t.Parallel()
	const ttl = 48 * time.Hour
	eachRedis(t, Config{TTL: ttl}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		r := start(t, e, fx.tasks[0], 1)
		tk, _ := e.redis.keys.taskKeys(r.tk.TenantID, r.tk.ID)
		ttlAt := func() int64 {
			t.Helper()
			v, err := e.client.HGet(ctx, tk.task, fTTLAt).Int64()
			if err != nil {
				t.Fatalf("ttlAt: %v", err)
			}
			return v
		}
		if got, want := ttlAt(), e.clock.Now().UnixMilli(); got > want || got < want-int64(time.Minute/time.Millisecond) {
			t.Fatalf("ttlAt %d after creation and start, want about %d", got, want)
		}
		// An older record: no ttlAt, an hour left.
		e.client.HDel(ctx, tk.task, fTTLAt)
		e.client.PExpire(ctx, tk.task, time.Hour)
		r.mustWrite(task.StatusRunning, task.Write{})
		if d := e.client.PTTL(ctx, tk.task).Val(); d < ttl-time.Minute {
			t.Errorf("TTL %s after a write to a record without ttlAt, want about %s", d, ttl)
		}
		if got := ttlAt(); got != e.clock.Now().UnixMilli() {
			t.Errorf("ttlAt %d after the write, want the writer's now %d", got, e.clock.Now().UnixMilli())
		}
		// ttlAt an hour ahead of this writer's clock: no refresh, no error.
		ahead := e.clock.Now().Add(time.Hour).UnixMilli()
		e.client.HSet(ctx, tk.task, fTTLAt, ahead)
		e.client.PExpire(ctx, tk.task, time.Hour)
		r.mustWrite(task.StatusRunning, task.Write{})
		if d := e.client.PTTL(ctx, tk.task).Val(); d > time.Hour {
			t.Errorf("TTL %s: refreshed although ttlAt is ahead of the writer's clock", d)
		}
		if got := ttlAt(); got != ahead {
			t.Errorf("ttlAt %d, want %d kept", got, ahead)
		}
		// A garbled ttlAt counts as missing.
		e.client.HSet(ctx, tk.task, fTTLAt, "soon")
		r.mustWrite(task.StatusRunning, task.Write{})
		if got := ttlAt(); got != e.clock.Now().UnixMilli() {
			t.Errorf("ttlAt %d after a write over a garbled one, want %d", got, e.clock.Now().UnixMilli())
		}
	})
}

// TestStartLeavesPlanStatus: a task start moves the counts without deriving
// the plan's status, which it cannot change (plan.Derive), whatever that
// status is.
func TestStartLeavesPlanStatus(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		for _, status := range []plan.Status{plan.StatusRunning, plan.StatusPaused, plan.StatusCancelled, plan.StatusCreated} {
			fx := createPlan(t, e, 2, 0)
			p := fx.plan.Clone()
			p.Status = status
			if err := e.store.UpdatePlan(ctx, p); err != nil {
				t.Fatal(err)
			}
			r := start(t, e, fx.tasks[0], 1)
			res, err := r.write(task.StatusRunning, task.Write{}) // a stage write: no counts
			if err != nil || res.PlanStatus != "" {
				t.Fatalf("stage write: %+v, %v", res, err)
			}
			got, counts, _ := e.store.Plan(ctx, fx.plan.ID)
			if got.Status != status || counts[task.StatusRunning] != 1 || counts[task.StatusPending] != 1 {
				t.Fatalf("plan %s after a start: %s %s", status, got.Status, countsString(counts))
			}
			second := start(t, e, fx.tasks[1], 1)
			_ = second
			if got, _, _ := e.store.Plan(ctx, fx.plan.ID); got.Status != status {
				t.Fatalf("plan %s after a second start: %s", status, got.Status)
			}
		}
	})
}

// TestDualKeepsNewTasksCompact: the memory half does not copy a new plan's
// tasks; it answers for them all the same, takes them in when they are
// written, and gives its memory back once they are gone.
func TestDualKeepsNewTasksCompact(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, re *env) {
		e, d := newDualEnv(t, re)
		ctx := ctxT(t)
		mem := d.Memory()
		const n = 600
		fx := createPlan(t, e, n, 0)
		mem.mu.Lock()
		records, fresh := len(mem.tasks), len(mem.fresh)
		mem.mu.Unlock()
		if records != 0 || fresh != 1 {
			t.Fatalf("after CreatePlan: %d task records, %d fresh sets in memory; want 0 and 1", records, fresh)
		}
		// Memory answers for a never-written task like Redis.
		tk := fx.tasks[n/2]
		rt, _, _ := e.redis.Task(ctx, tk.ID)
		for name, get := range map[string]func() (*task.Task, error){
			"Task":         func() (*task.Task, error) { t, _, err := mem.Task(ctx, tk.ID); return t, err },
			"TaskByTenant": func() (*task.Task, error) { t, _, err := mem.TaskByTenant(ctx, tk.TenantID); return t, err },
			"TenantHistory": func() (*task.Task, error) {
				ts, err := mem.TenantHistory(ctx, tk.TenantID, 10)
				if len(ts) != 1 {
					return nil, fmt.Errorf("%d tasks", len(ts))
				}
				return ts[0], err
			},
			"PlanTasks": func() (*task.Task, error) {
				ts, _, err := mem.PlanTasks(ctx, fx.plan.ID, plan.TaskFilter{Cursor: fmt.Sprint(n / 2), Limit: 1})
				if len(ts) != 1 {
					return nil, fmt.Errorf("%d tasks", len(ts))
				}
				return ts[0], err
			},
		} {
			mt, err := get()
			if err != nil || !reflect.DeepEqual(mt, rt) {
				t.Errorf("memory %s: %+v, %v\nredis: %+v", name, mt, err, rt)
			}
		}
		if got := len(allTasks(t, &env{store: mem}, fx.plan.ID, plan.TaskFilter{Limit: plan.LimitMax})); got != n {
			t.Fatalf("memory lists %d tasks, want %d", got, n)
		}
		// Run every task: each enters memory when written and leaves when done.
		for i, tk := range fx.tasks {
			r := start(t, e, tk, 1)
			if i == 0 {
				mem.mu.Lock()
				records = len(mem.tasks)
				mem.mu.Unlock()
				if records != 1 {
					t.Fatalf("after the first start: %d records in memory, want 1", records)
				}
			}
			r.complete()
		}
		mem.mu.Lock()
		defer mem.mu.Unlock()
		sizes := []int{len(mem.plans), len(mem.tasks), len(mem.fresh), len(mem.index), len(mem.history)}
		peaks := []int{mem.peakPlans, mem.peakTasks, mem.peakIndex, mem.peakHistory}
		if !reflect.DeepEqual(sizes, []int{0, 0, 0, 0, 0}) {
			t.Fatalf("memory holds plans/tasks/fresh/index/history %v after the plan finished", sizes)
		}
		for _, p := range peaks {
			if p >= shrinkMin {
				t.Fatalf("map peaks %v: the maps were not reallocated once empty", peaks)
			}
		}
	})
}

// TestMovePlanCountsSeveral: several tasks' moves in one call of
// move_plan_counts.lua (writes sharing a pipeline) answer and count exactly
// as the same moves in calls of their own.
func TestMovePlanCountsSeveral(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		type mv struct {
			task       int
			status     task.Status
			seq, fence int64
			owner, wid string
		}
		moves := []mv{
			{0, task.StatusRunning, 1, 1, "coord-a", "w1"},
			{1, task.StatusRunning, 1, 1, "coord-a", "w2"},
			{0, task.StatusCompleted, 2, 1, "coord-a", "w3"},
			{1, task.StatusFailed, 1, 1, "coord-a", "w4"}, // stale: seq 1 again, same fence
			{2, task.StatusFailed, 1, 0, "", "w5"},        // PENDING → FAILED: the threshold (1) is not passed
			{1, task.StatusFailed, 2, 1, "coord-a", "w6"}, // the second failure pauses the plan
			{3, task.StatusRunning, 1, 2, "coord-b", "w7"},
		}
		run := func(fx fixture, ms []mv) []any {
			pk, _ := e.redis.keys.planKeys(fx.plan.ID)
			var args []any
			for i, m := range ms {
				tk := fx.tasks[m.task]
				args = append(args, tk.ID, string(m.status), m.seq, m.fence, m.wid, m.owner, tk.TenantID)
				if i == 0 {
					args = append(args, formatTime(t0), 60000, plan.ReasonFailureThreshold, micros(t0))
				}
			}
			v, err := e.redis.run(ctx, movePlanCountsScript, []string{pk.counts, pk.plan, pk.tasks}, args...)
			if err != nil {
				t.Fatal(err)
			}
			return v.([]any)
		}
		state := func(fx fixture) string {
			pk, _ := e.redis.keys.planKeys(fx.plan.ID)
			h := e.client.HGetAll(ctx, pk.counts).Val()
			p := e.client.HMGet(ctx, pk.plan, "status", "reason").Val()
			out := fmt.Sprint(p...)
			for _, k := range []string{"PENDING", "RUNNING", "PAUSED", "COMPLETED", "FAILED", "CANCELLED", "RUNNING@coord-a", "RUNNING@coord-b"} {
				out += " " + k + "=" + h[k]
			}
			for i, tk := range fx.tasks {
				out += fmt.Sprintf(" t%d=%s", i, strings.SplitN(h["t:"+tk.ID], "|", 4)[:3])
			}
			return out
		}
		one := createPlan(t, e, 4, 1)
		each := createPlan(t, e, 4, 1)
		got := run(one, moves)
		var want []any
		for _, m := range moves {
			want = append(want, run(each, []mv{m})...)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("one call answered %v, calls of their own %v", got, want)
		}
		if a, b := state(one), state(each); a != b {
			t.Fatalf("one call left\n%s\ncalls of their own\n%s", a, b)
		}
		if got[len(got)-4] != string(plan.StatusPaused) {
			t.Fatalf("answers %v: the second failure should pause the plan", got)
		}
	})
}

// TestNewRecordsLeaveOutZeroValuesOnly: a new record leaves out the fields
// whose value reads back the same when missing, and nothing else ("0" is a
// valid stage name, owner or reason).
func TestNewRecordsLeaveOutZeroValuesOnly(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		now := e.clock.Now()
		p := &plan.Plan{ID: plan.NewID(now), Status: plan.StatusCreated, TotalTasks: 2, CreatedAt: now}
		zero := task.New(task.NewID(now), p.ID, "t-zero", nil, nil, time.Time{})
		odd := task.New(task.NewID(now), p.ID, "t-odd", map[string]any{}, []string{"0"}, now)
		odd.Owner, odd.Reason, odd.LastError, odd.Attempt, odd.Fence = "0", "0", "0", 3, 7
		if err := e.store.CreatePlan(ctx, p, []*task.Task{zero, odd}); err != nil {
			t.Fatal(err)
		}
		for _, want := range []*task.Task{zero, odd} {
			got, _, err := e.store.Task(ctx, want.ID)
			if err != nil {
				t.Fatal(err)
			}
			w := copyTaskOut(want)
			w.Params, _ = normalize(want.Params)
			if w.Params == nil && want.Params != nil {
				w.Params = map[string]any{}
			}
			if !reflect.DeepEqual(got, w) {
				t.Fatalf("stored\n%+v\nwant\n%+v", got, w)
			}
		}
	})
}

// TestDeriveCannotMoveOnActiveMoves checks the claim move_plan_counts.lua
// relies on to skip the derivation: a task's move to an active status whose
// counter is then at least 1 leaves the plan's status as plan.Derive sees
// it — unless it re-runs a task of a finished plan — whatever the counts,
// the plan's status, size and threshold.
func TestDeriveCannotMoveOnActiveMoves(t *testing.T) {
	t.Parallel()
	active := []task.Status{task.StatusPending, task.StatusRunning, task.StatusPaused}
	from := append([]task.Status{""}, task.Statuses...)
	n := 0
	for _, cur := range plan.Statuses {
		for _, to := range active {
			for _, f := range from {
				if f == to {
					continue
				}
				reopen := cur.Finished() && (to == task.StatusRunning || to == task.StatusPending) && f != task.StatusPending && f != ""
				for mask := range 1 << 12 {
					// Two bits per status: 0..3 tasks each.
					c := plan.Counts{}
					total := 0
					for i, s := range task.Statuses {
						c[s] = mask >> (2 * i) & 3
						total += c[s]
					}
					if c[to] < 1 {
						continue
					}
					for _, maxFailed := range []int{0, 1, 2} {
						for _, tot := range []int{total, total + 1} {
							got, _ := plan.Derive(cur, c, tot, maxFailed, f, to)
							if !reopen && got != cur {
								t.Fatalf("Derive(%s, %v, %d, %d, %s → %s) = %s: the move changes the plan", cur, c, tot, maxFailed, f, to, got)
							}
							n++
						}
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no case checked")
	}
}
