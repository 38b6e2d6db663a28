package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
)

// runStoreShared is runStoreOnly on the path of shared plan work, the one
// the coordinator takes (facade.Config.SharedPlans): the plan's tasks are
// pushed on its queue after CreatePlan, and each of -concurrency goroutines
// claims an entry and a permit (giving back the permit of its previous
// task in the same call), reads the claimed task, then makes the task's
// start (taking the lock) and final writes as runStoredTask does.
func (e *env) runStoreShared(ctx context.Context, n int) (planRun, error) {
	prefix := newPrefix("store")
	defer func() { _ = e.reset(context.Background(), prefix) }()
	store, locks, err := e.storeAndLocks(prefix)
	if err != nil {
		return planRun{}, err
	}
	const instance = "bench-1"
	const lease = 30 * time.Second
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
	entries := make([]plan.QueueEntry, n)
	for i, t := range tasks {
		entries[i] = plan.QueueEntry{Kind: plan.QueueStart, TenantID: t.TenantID, TaskID: t.ID}
	}
	if err := store.PushQueue(ctx, p.ID, entries, false); err != nil {
		return planRun{}, fmt.Errorf("queue the plan's tasks: %w", err)
	}
	created := time.Now()

	var failed atomic.Pointer[error]
	var ran atomic.Int64
	var wg sync.WaitGroup
	for range e.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var release []plan.QueueEntry
			for failed.Load() == nil {
				claim, err := store.ClaimTasks(ctx, p.ID, release, lease, 1)
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				release = nil
				switch claim.Outcome {
				case plan.ClaimGranted:
				case plan.ClaimFull:
					continue // another goroutine's permit frees with its next claim
				case plan.ClaimEmpty:
					return
				case plan.ClaimNotRunning:
					if claim.Status.Finished() {
						return // the last task's final write finished the plan
					}
					err := fmt.Errorf("claim on plan %s: the plan is %s", p.ID, claim.Status)
					failed.CompareAndSwap(nil, &err)
					return
				default:
					err := fmt.Errorf("claim on plan %s: outcome %d (status %s)", p.ID, claim.Outcome, claim.Status)
					failed.CompareAndSwap(nil, &err)
					return
				}
				t, err := store.QueuedTask(ctx, claim.Entries[0])
				if err == nil {
					err = runStoredTask(ctx, store, locks, t, instance)
				}
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				ran.Add(1)
				release = claim.Entries
			}
			if len(release) > 0 {
				if err := store.ReleasePermits(ctx, p.ID, release); err != nil {
					failed.CompareAndSwap(nil, &err)
				}
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
	if ran.Load() != int64(n) {
		return planRun{}, fmt.Errorf("store-only shared plan %s: %d tasks claimed and run, want %d", p.ID, ran.Load(), n)
	}
	if err := checkStorePlan(ctx, store, p.ID, n); err != nil {
		return planRun{}, err
	}
	return planRun{create: created.Sub(start), run: done.Sub(created), total: done.Sub(start), cpu: use.cpu, cmds: use.cmds, instr: use.instr}, nil
}

// storePlan is a started plan of n tenants × 1 noop stage and its tasks,
// as the store gets them from the coordinator.
func storePlan(now time.Time, n, concurrency int, instance string) (*plan.Plan, []*task.Task, error) {
	p := &plan.Plan{
		ID: plan.NewID(now), Name: "bench", Status: plan.StatusCreated, MaxConcurrency: concurrency,
		Stages: []task.StageSpec{{Name: "s00", Kind: "noop"}}, OnTenantLocked: plan.LockFail,
		TotalTasks: n, CreatedAt: now, UpdatedAt: now,
	}
	if err := p.Start(now, instance); err != nil {
		return nil, nil, err
	}
	tasks := make([]*task.Task, n)
	for i := range tasks {
		tasks[i] = task.New(task.NewID(now), p.ID, tenantID(i), nil, []string{"s00"}, now)
	}
	return p, tasks, nil
}

// checkStorePlan checks the plan COMPLETED with its n tasks counted.
func checkStorePlan(ctx context.Context, store *repository.Redis, planID string, n int) error {
	got, counts, err := store.Plan(ctx, planID)
	if err != nil {
		return err
	}
	if got.Status != plan.StatusCompleted || counts[task.StatusCompleted] != n {
		return fmt.Errorf("store-only plan %s: %s with counts %v, want COMPLETED ×%d", planID, got.Status, counts, n)
	}
	return nil
}
