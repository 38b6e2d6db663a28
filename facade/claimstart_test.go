package facade_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// TestClaimedStartAnswerLost: the start that takes the lock lands but its
// answer is lost; sent again with the same write id and lock value it is
// answered as written. The task runs once, its timeline has one start, the
// plan's counts are exact and the lock is released at the end.
func TestClaimedStartAnswerLost(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		// The first start that takes the lock lands, its answer is lost.
		hook := &loseAnswer{match: func(c redis.Cmder) bool { return taskWrite(c, true) }}
		hooked := withHook(be, hook)
		b := setup(t, hooked)
		v := b.create(spec([]task.StageSpec{b.httpStage("one", task.RetryPolicy{})}, "t-lost"))
		pv := b.waitPlan(b.coord, v.ID, plan.StatusCompleted, plan.StatusFailed, plan.StatusPaused)
		b.idle(b.coord)
		if n := hook.hits.Load(); n < 1 {
			t.Fatal("no start answer was dropped (hook not hit)")
		}
		tv := b.waitTask(b.coord, "t-lost", task.StatusCompleted)
		if pv.Status != plan.StatusCompleted || pv.Counts[task.StatusCompleted] != 1 || pv.Counts.Total() != 1 {
			t.Fatalf("plan %s %v, want COMPLETED with one completed task", pv.Status, pv.Counts)
		}
		if tv.Attempt != 1 || b.target.count("t-lost", "one") != 1 {
			t.Errorf("attempt %d, stage called %d times; want 1, 1", tv.Attempt, b.target.count("t-lost", "one"))
		}
		tl, err := b.coord.Timeline(context.Background(), "t-lost", 0)
		if err != nil {
			t.Fatal(err)
		}
		started := 0
		for _, ev := range tl.Events {
			if ev.Type == task.EventStarted {
				started++
				if ev.Fence != tv.Fence {
					t.Errorf("start event fence %d, task fence %d", ev.Fence, tv.Fence)
				}
			}
		}
		if started != 1 {
			t.Errorf("%d start events, want 1: %+v", started, tl.Events)
		}
		info, err := b.locks.View(context.Background(), "t-lost")
		if err != nil || info.Held {
			t.Errorf("lock after the run: %+v, %v; want released", info, err)
		}
	})
}

// TestClaimedStartFenceAhead: a tenant whose fencing counter is ahead of
// this instance's clock (another instance's clock ahead, or a step back of
// ours) cannot take the fence its start proposes: the start writes nothing
// and takes the lock the usual way, with the counter's next token.
func TestClaimedStartFenceAhead(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		fenceKey, err := b.store.Keys().Fence("t-ahead")
		if err != nil {
			t.Fatal(err)
		}
		ahead := time.Now().Add(time.Hour).UnixMilli()
		if err := b.client.Set(context.Background(), fenceKey, ahead, 0).Err(); err != nil {
			t.Fatal(err)
		}
		v := b.create(spec([]task.StageSpec{noopStage("one")}, "t-ahead", "t-usual"))
		pv := b.waitPlan(b.coord, v.ID, plan.StatusCompleted, plan.StatusFailed, plan.StatusPaused)
		if pv.Status != plan.StatusCompleted || pv.Counts[task.StatusCompleted] != 2 {
			t.Fatalf("plan %s %v", pv.Status, pv.Counts)
		}
		if tv := b.waitTask(b.coord, "t-ahead", task.StatusCompleted); tv.Fence != ahead+1 {
			t.Errorf("fence %d, want the counter's next token %d", tv.Fence, ahead+1)
		}
		if tv := b.waitTask(b.coord, "t-usual", task.StatusCompleted); tv.Fence <= 0 || tv.Fence > time.Now().UnixMilli() {
			t.Errorf("fence %d of a claimed start, want this instance's clock in ms", tv.Fence)
		}
	})
}

// holdWrite is a store whose first write that match accepts lands and
// then waits for open before answering.
type holdWrite struct {
	*repository.Redis
	match         func(task.Write) bool
	once          sync.Once
	entered, open chan struct{}
}

func newHoldWrite(r *repository.Redis, match func(task.Write) bool) *holdWrite {
	return &holdWrite{Redis: r, match: match, entered: make(chan struct{}), open: make(chan struct{})}
}

// claimedStart matches a start that takes the lock in its write.
func claimedStart(w task.Write) bool { return w.TakeLock > 0 }

func (h *holdWrite) WriteTask(ctx context.Context, w task.Write) (task.WriteResult, error) {
	res, err := h.Redis.WriteTask(ctx, w)
	if h.match(w) {
		h.once.Do(func() {
			close(h.entered)
			<-h.open
		})
	}
	return res, err
}

// TestClaimedStartDuringShutdown: a start that lands while the instance
// begins its shutdown is a run like the others: it is paused at its first
// boundary ("instance shutdown"), its lock released, and the shutdown
// waits for it.
func TestClaimedStartDuringShutdown(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		b.stopDefault()
		ctx := context.Background()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		store := newHoldWrite(b.store, claimedStart)
		x := newCoordinator(t, b, store, b.locks, "coord-x", nil)
		v, err := x.CreatePlan(ctx, spec([]task.StageSpec{b.httpStage("one", task.RetryPolicy{})}, "t-shut"), anyone)
		if err != nil {
			t.Fatal(err)
		}
		<-store.entered // the start is RUNNING in Redis, its answer held
		done := make(chan error, 1)
		go func() { done <- x.Shutdown(sctx) }()
		missing := plan.NewID(time.Now())
		eventually(t, 5*time.Second, func() error {
			if _, err := x.ResumePlan(ctx, missing, facade.ResumeOptions{Reason: "probe"}, anyone); errors.Is(err, facade.ErrShuttingDown) {
				return nil
			}
			return errors.New("x not closing yet")
		})
		close(store.open)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		y := b.second("coord-y")
		tv := b.waitTask(y, "t-shut", task.StatusPaused)
		if tv.Reason != facade.ReasonShutdown || b.target.count("t-shut", "one") != 0 {
			t.Errorf("task paused for %q with the stage called %d times; want %q and none", tv.Reason, b.target.count("t-shut", "one"), facade.ReasonShutdown)
		}
		if info, err := b.locks.View(ctx, "t-shut"); err != nil || info.Held {
			t.Errorf("lock after the shutdown: %+v, %v; want released", info, err)
		}
		if pv, err := y.Plan(ctx, v.ID); err != nil || pv.Counts[task.StatusPaused] != 1 || pv.Counts[task.StatusRunning] != 0 {
			t.Errorf("plan counts %v, %v", pv.Counts, err)
		}
	})
}

// TestClaimedStartNotOrphaned: between a claimed start landing (the task
// RUNNING in Redis, owned by this instance) and its run being registered,
// the instance answers the task as running here, not orphaned — for the
// task and in the plan's orphaned count — and a pause request is taken
// (the run pauses at a later boundary).
// (Seen in deployctl's TestTaskActions as an INVALID_STATE "orphaned" for
// a pause sent right after the start.)
func TestClaimedStartNotOrphaned(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		b.stopDefault()
		ctx := context.Background()
		store := newHoldWrite(b.store, claimedStart)
		x := newCoordinator(t, b, store, b.locks, "coord-x", nil)
		v, err := x.CreatePlan(ctx, spec([]task.StageSpec{b.httpStage("one", task.RetryPolicy{}), b.httpStage("two", task.RetryPolicy{})}, "t-window"), anyone)
		if err != nil {
			t.Fatal(err)
		}
		<-store.entered // the start is RUNNING in Redis, its answer held
		tv, err := x.TaskByTenant(ctx, "t-window")
		if err != nil || tv.Status != task.StatusRunning || tv.Owner != "coord-x" || tv.Orphaned {
			t.Errorf("task while its start is answered: %s owned by %s, orphaned %v, %v; want RUNNING on coord-x, not orphaned",
				tv.Status, tv.Owner, tv.Orphaned, err)
		}
		// The plan's count needs the instance's view of the registry (-1
		// until its first read of it): the start is held meanwhile.
		var pv facade.PlanView
		eventually(t, 10*time.Second, func() error {
			if pv, err = x.Plan(ctx, v.ID); err == nil && pv.Orphaned < 0 {
				return errors.New("no view of the registry yet")
			}
			return nil
		})
		if err != nil || pv.Orphaned != 0 {
			t.Errorf("plan while its task's start is answered: %d orphaned, %v; want 0", pv.Orphaned, err)
		}
		if _, err := x.PauseTask(ctx, "t-window", "hold", anyone); err != nil {
			t.Errorf("pause while the start is answered: %v, want taken", err)
		}
		close(store.open)
		// The request is stored; the run, registered after it, sees it in
		// the answer of its next write and pauses at the boundary after.
		if tv := b.waitTask(x, "t-window", task.StatusPaused); tv.Reason != "hold" {
			t.Errorf("paused for %q, want hold", tv.Reason)
		}
	})
}

// TestStartsTakeLock: starts take the lock in their write only when the
// store and the locker name the same lock keys; an in-process locker, or a
// locker on other keys, keeps the lock first.
func TestStartsTakeLock(t *testing.T) {
	t.Parallel()
	be := redistest.Backends()[0]
	b := setup(t, be)
	if !b.coord.StartsTakeLock() {
		t.Fatal("Redis store and Redis locker on the same keys: starts do not take the lock")
	}
	other, err := redislock.New(b.client, redislock.Config{
		LockKey:  func(tn string) string { return b.prefix + "otherlock:{" + tn + "}" },
		FenceKey: func(tn string) string { k, _ := b.store.Keys().Fence(tn); return k },
	})
	if err != nil {
		t.Fatal(err)
	}
	local, err := redislock.NewLocal(redislock.LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*facade.Coordinator{
		"locker on other keys": newCoordinator(t, b, b.store, other, "coord-keys", nil),
		"in-process locker":    newCoordinator(t, b, b.store, local, "coord-keys", nil),
	} {
		if c.StartsTakeLock() {
			t.Errorf("%s: starts take the lock", name)
		}
	}
	// The gated locker of the shutdown test hides its claims.
	g := &gatedLocks{Locker: b.locks}
	if newCoordinator(t, b, b.store, g, "coord-keys", nil).StartsTakeLock() {
		t.Error("a locker without claims: starts take the lock")
	}
}

// gatedClaims is a Dual store whose claims answer "full" while closed: its
// instance runs no task of a shared plan until the test opens it.
type gatedClaims struct {
	*repository.Dual
	open atomic.Bool
}

func (g *gatedClaims) ClaimTasks(ctx context.Context, planID string, release []plan.QueueEntry, lease time.Duration, want int) (plan.Claim, error) {
	if !g.open.Load() {
		return plan.Claim{Outcome: plan.ClaimFull}, nil
	}
	return g.Dual.ClaimTasks(ctx, planID, release, lease, want)
}

// dualCoord is a coordinator on a Dual store (memory + b's Redis, as the
// server wires it, claims gated) and b's locker, with shared plans.
func dualCoord(t *testing.T, b *bundle, instance string) (*facade.Coordinator, *gatedClaims) {
	t.Helper()
	store := &gatedClaims{Dual: repository.NewDual(repository.NewMemory(repository.MemoryConfig{DropFinished: true}), b.store,
		repository.DualConfig{SharedWork: true})}
	return newCoordinator(t, b, store, b.locks, instance, func(c *facade.Config) { c.SharedPlans = true }), store
}

// TestRetriedStartEntryStartsFromRedis: a claimed start entry is started
// blind, as the task was created (PENDING at seq 0). Here another instance
// ran the task, it failed and was retried (PENDING again, attempt 2, a new
// start entry); the creator claims that entry, its blind start is refused
// (seq), and the entry starts attempt 2 from Redis' record — not refused
// for ever.
func TestRetriedStartEntryStartsFromRedis(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		b.stopDefault()
		ctx := context.Background()
		creator, creatorGate := dualCoord(t, b, "coord-creator")
		other, otherGate := dualCoord(t, b, "coord-other")
		b.target.script("t-stale", "one", 500, 200)
		v, err := creator.CreatePlan(ctx, spec([]task.StageSpec{b.httpStage("one", task.RetryPolicy{})}, "t-stale"), anyone)
		if err != nil {
			t.Fatal(err)
		}
		otherGate.open.Store(true) // the other instance runs attempt 1
		b.waitTask(other, "t-stale", task.StatusFailed)
		otherGate.open.Store(false)
		if _, err := other.Retry(ctx, "t-stale", facade.RetryRequest{ExpectedAttempt: 1, Reason: "target fixed"}, anyone); err != nil {
			t.Fatal(err)
		}
		creatorGate.open.Store(true) // the creator claims the retry's start entry
		pv := b.waitPlan(creator, v.ID, plan.StatusCompleted)
		tv := b.waitTask(creator, "t-stale", task.StatusCompleted)
		if tv.Attempt != 2 || tv.Owner != "coord-creator" || b.target.count("t-stale", "one") != 2 || pv.Counts[task.StatusCompleted] != 1 {
			t.Errorf("task attempt %d owner %s, stage called %d times, counts %v; want attempt 2 by the creator, 2 calls, 1 completed",
				tv.Attempt, tv.Owner, b.target.count("t-stale", "one"), pv.Counts)
		}
	})
}

// TestQuickResumeStaysRegistered: a task resumed while its paused run has
// not finished yet (the PAUSED write landed, its answer not back) runs on
// a new run; the old run's end must not unregister the new one, or the
// instance would call its own running task orphaned and refuse requests
// for it until it ends (seen in deployctl's TestTaskActions under load).
func TestQuickResumeStaysRegistered(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		b.stopDefault()
		ctx := context.Background()
		store := newHoldWrite(b.store, func(w task.Write) bool { return w.Task.Status == task.StatusPaused })
		x := newCoordinator(t, b, store, b.locks, "coord-x", nil)
		t.Cleanup(b.gates.openAll) // before x's shutdown (cleanups run last first)
		if _, err := x.CreatePlan(ctx, spec([]task.StageSpec{gateStage("g1"), gateStage("g2"), gateStage("g3")}, "t-quick"), anyone); err != nil {
			t.Fatal(err)
		}
		b.gates.wait(t, "t-quick", "g1")
		if _, err := x.PauseTask(ctx, "t-quick", "hold", anyone); err != nil {
			t.Fatal(err)
		}
		b.gates.release("t-quick", "g1")
		<-store.entered // PAUSED in Redis, the lock released; the old run waits for the answer
		if _, err := x.ResumeTask(ctx, "t-quick", "go on", anyone); err != nil {
			t.Fatal(err)
		}
		b.gates.wait(t, "t-quick", "g2") // the new run is in its stage
		close(store.open)                // the old run ends now
		eventually(t, 5*time.Second, func() error {
			if x.Running() != 0 {
				return nil
			}
			return errors.New("no run registered")
		})
		time.Sleep(100 * time.Millisecond) // the old run's end, if it were to unregister the new run
		if n := x.Running(); n != 1 {
			t.Errorf("%d runs registered while the resumed task runs, want 1", n)
		}
		if tv, err := x.TaskByTenant(ctx, "t-quick"); err != nil || tv.Status != task.StatusRunning || tv.Orphaned {
			t.Errorf("resumed task: %s, orphaned %v, %v; want RUNNING, not orphaned", tv.Status, tv.Orphaned, err)
		}
		if _, err := x.CancelTask(ctx, "t-quick", "done with it", anyone); err != nil {
			t.Errorf("cancel of the resumed task: %v, want taken", err)
		}
		b.gates.release("t-quick", "g2") // cancelled at the boundary before g3
		b.waitTask(x, "t-quick", task.StatusCancelled)
	})
}
