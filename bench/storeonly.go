package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// runStoreOnly makes the storage calls of a plan of n tenants × 1 noop
// stage without the coordinator: the Redis store's CreatePlan, then from
// -concurrency goroutines, for each task, what the runner sends — the
// PENDING → RUNNING write that takes the tenant lock (redislock.Locker.Claim,
// task.Write.TakeLock, Locker.Adopt), the final
// write with the checkpoint and the lock release — and checks the plan
// COMPLETED. It is the floor under the coordinator's cost with today's
// scripts and round trips: the coordinator cannot be faster than its
// storage, and what it adds on top is its own overhead.
func (e *env) runStoreOnly(ctx context.Context, n int) (planRun, error) {
	prefix := newPrefix("store")
	defer func() { _ = e.reset(context.Background(), prefix) }()
	store, locks, err := e.storeAndLocks(prefix)
	if err != nil {
		return planRun{}, err
	}
	const instance = "bench-1"
	stop, err := e.meterRedis(ctx)
	if err != nil {
		return planRun{}, err
	}
	start := time.Now()
	p, tasks, err := storePlan(start, n, e.cfg.Concurrency, instance)
	if err != nil {
		return planRun{}, err
	}
	if err := store.CreatePlan(ctx, p, tasks); err != nil {
		return planRun{}, fmt.Errorf("create plan: %w", err)
	}
	created := time.Now()

	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range e.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for failed.Load() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := runStoredTask(ctx, store, locks, tasks[i], instance); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				tasks[i] = nil
			}
		}()
	}
	wg.Wait()
	done := time.Now()
	use, err := stop(ctx)
	if err != nil {
		return planRun{}, err
	}
	if p := failed.Load(); p != nil {
		return planRun{}, *p
	}
	if err := checkStorePlan(ctx, store, p.ID, n); err != nil {
		return planRun{}, err
	}
	return planRun{create: created.Sub(start), run: done.Sub(created), total: done.Sub(start), cpu: use.cpu, cmds: use.cmds, instr: use.instr}, nil
}

// runStoredTask makes the storage calls of one task run as the runner makes
// them for a single noop stage.
func runStoredTask(ctx context.Context, store *repository.Redis, locks *redislock.Locker, t *task.Task, instance string) error {
	h := tenantlock.Holder{PlanID: t.PlanID, TaskID: t.ID, Instance: instance}
	claim, err := locks.Claim(t.TenantID, h, t.Fence)
	if err != nil {
		return fmt.Errorf("claim %s: %w", t.TenantID, err)
	}
	g := task.Guard{LockValue: claim.Value, Fence: claim.Fence}
	now := time.Now()
	if err := t.Start(now, instance, g.Fence); err != nil {
		return err
	}
	res, err := store.WriteTask(ctx, task.Write{
		Task: t, PrevStatus: task.StatusPending, ExpectSeq: t.Seq, Guard: g, TakeLock: claim.Lease,
		Events: []task.Event{{At: now, Type: task.EventStarted, Attempt: 1, Instance: instance, Fence: g.Fence}},
	})
	if err != nil {
		return fmt.Errorf("start %s: %w", t.ID, err)
	}
	lease, err := locks.Adopt(t.TenantID, h, claim)
	if err != nil {
		return fmt.Errorf("adopt %s: %w", t.TenantID, err)
	}
	t.Seq = res.Seq
	t.EnterStage(0, "s00", now)
	ck, err := checkpoint.Empty().Complete(0, "s00", nil)
	if err != nil {
		return err
	}
	now = time.Now()
	ck = ck.Stamp(now, t.Attempt, g.Fence)
	if err := t.Complete(now); err != nil {
		return err
	}
	_, err = store.WriteTask(ctx, task.Write{
		Task: t, PrevStatus: task.StatusRunning, ExpectSeq: t.Seq, Guard: g, Checkpoint: &ck, ReleaseLock: true,
		Events: []task.Event{
			task.Event{At: now, Type: task.EventStageStarted, Attempt: 1}.AtStage(0, "s00"),
			task.Event{At: now, Type: task.EventStageSucceeded, Attempt: 1}.AtStage(0, "s00"),
			{At: now, Type: task.EventCompleted, Attempt: 1, Instance: instance},
		},
	})
	if err != nil {
		return fmt.Errorf("finish %s: %w", t.ID, err)
	}
	lease.Forget()
	return nil
}

// storeAndLocks returns the Redis store and the tenant locker of the
// storage-only runs under prefix, with the locker's keys built by the
// store's key builders (the layout the coordinator uses).
func (e *env) storeAndLocks(prefix string) (*repository.Redis, *redislock.Locker, error) {
	store, err := repository.NewRedis(e.client, repository.Config{Prefix: prefix})
	if err != nil {
		return nil, nil, err
	}
	keys := store.Keys()
	locks, err := redislock.New(e.client, redislock.Config{
		LockKey:  func(t string) string { k, _ := keys.Lock(t); return k },
		FenceKey: func(t string) string { k, _ := keys.Fence(t); return k },
	})
	if err != nil {
		return nil, nil, err
	}
	return store, locks, nil
}
