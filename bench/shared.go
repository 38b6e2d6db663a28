package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task/stage"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// sharedResult is the "shared" section: one plan's work shared by several
// instances of one process (each with its own store and locks on the same
// Redis; on this 2-core machine the point is no loss and work spread, not a
// speed-up).
type sharedResult struct {
	// runs are the N × 1 plans, by instance count (1 owner-mode, 1 and 2
	// shared), each with the tasks each instance ran.
	runs []sharedRun
	// big is the -big plan started with three instances.
	big *sharedRun
}

type sharedRun struct {
	label     string
	instances int
	n         int
	total     time.Duration
	perInst   []int
}

// newSharedInstance is a coordinator named id on prefix, sharing plans
// when shared is set (a fast registry heartbeat: the shares follow the
// instances at once).
func (e *env) newSharedInstance(prefix, id string, shared bool) (*instance, error) {
	redisStore, err := repository.NewRedis(e.client, repository.Config{Prefix: prefix})
	if err != nil {
		return nil, err
	}
	keys := redisStore.Keys()
	store := repository.NewDual(repository.NewMemory(repository.MemoryConfig{DropFinished: true}), redisStore)
	locks, err := redislock.New(e.client, redislock.Config{
		Lease:    facade.LeaseDefault,
		LockKey:  func(t string) string { k, _ := keys.Lock(t); return k },
		FenceKey: func(t string) string { k, _ := keys.Fence(t); return k },
	})
	if err != nil {
		return nil, err
	}
	log := e.log
	coord, err := facade.New(store, locks, facade.Config{
		Instance: id, Lease: facade.LeaseDefault, Stages: stage.NewRegistry(stage.Options{}),
		MaxTenants: plan.MaxTenantsDefault, Logger: &log, SharedPlans: shared,
		Heartbeat: 200 * time.Millisecond, PlanPoll: 200 * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	return &instance{coord: coord, dual: store, redis: redisStore, prefix: prefix}, nil
}

// runShared runs a plan of n tenants × 1 noop stage on k instances (the
// first creates it) and waits for it to be COMPLETED.
func (e *env) runShared(ctx context.Context, label string, n, k int, shared bool) (sharedRun, error) {
	prefix := newPrefix("shared")
	defer func() { _ = e.reset(context.Background(), prefix) }()
	var ins []*instance
	defer func() {
		var wg sync.WaitGroup
		for _, in := range ins {
			wg.Add(1)
			go func() { defer wg.Done(); in.shutdown() }()
		}
		wg.Wait()
	}()
	for i := range k {
		in, err := e.newSharedInstance(prefix, fmt.Sprintf("bench-%d", i+1), shared)
		if err != nil {
			return sharedRun{}, err
		}
		ins = append(ins, in)
	}
	// Let every instance see the others in the registry first.
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	pv, err := ins[0].coord.CreatePlan(ctx, planSpec(0, n, 1, e.cfg.Concurrency, true), facade.Actor{Name: "bench"})
	if err != nil {
		return sharedRun{}, fmt.Errorf("create plan: %w", err)
	}
	for {
		v, err := ins[0].coord.Plan(ctx, pv.ID)
		if err != nil {
			return sharedRun{}, err
		}
		if v.Status == plan.StatusCompleted {
			break
		}
		if v.Status.Finished() {
			return sharedRun{}, fmt.Errorf("plan %s ended %s: %v", pv.ID, v.Status, v.Counts)
		}
		select {
		case <-ctx.Done():
			return sharedRun{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	total := time.Since(start)
	if err := verifyCompleted(ctx, ins[0], pv.ID, 0, n, 1); err != nil {
		return sharedRun{}, err
	}
	run := sharedRun{label: label, instances: k, n: n, total: total, perInst: make([]int, k)}
	f := plan.TaskFilter{Limit: plan.LimitMax}
	for {
		ts, next, err := ins[0].coord.PlanTasks(ctx, pv.ID, f)
		if err != nil {
			return sharedRun{}, err
		}
		for _, t := range ts {
			var i int
			if _, err := fmt.Sscanf(t.Owner, "bench-%d", &i); err == nil && i >= 1 && i <= k {
				run.perInst[i-1]++
			}
		}
		if next == "" {
			break
		}
		f.Cursor = next
	}
	return run, nil
}

func (e *env) measureShared(ctx context.Context, progress func(string, ...any)) (*sharedResult, error) {
	res := &sharedResult{}
	for _, c := range []struct {
		label  string
		k      int
		shared bool
	}{
		{"1 instance, plan owned (DEPLOYCOORD_SHARED_PLANS=false)", 1, false},
		{"1 instance, shared plan", 1, true},
		{"2 instances, shared plan", 2, true},
	} {
		r, err := e.runShared(ctx, c.label, e.cfg.N, c.k, c.shared)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.label, err)
		}
		progress("  %s: %d × 1 noop in %s, tasks per instance %v", c.label, r.n, r.total.Round(time.Millisecond), r.perInst)
		res.runs = append(res.runs, r)
	}
	r, err := e.runShared(ctx, "3 instances, shared plan", e.cfg.Big, 3, true)
	if err != nil {
		return nil, fmt.Errorf("big plan on 3 instances: %w", err)
	}
	progress("  3 instances, shared plan: %d × 1 noop in %s, tasks per instance %v", r.n, r.total.Round(time.Millisecond), r.perInst)
	res.big = &r
	return res, nil
}

func (s *sharedResult) table(concurrency int) table {
	t := table{title: fmt.Sprintf("Shared plan work (maxConcurrency %d; instances in one process, one Redis; on few cores: no loss and work spread, not a speed-up)", concurrency)}
	runs := s.runs
	if s.big != nil {
		runs = append(runs, *s.big)
	}
	for _, r := range runs {
		t.rows = append(t.rows, row{
			fmt.Sprintf("%s: %d × 1 noop, create + run", r.label, r.n),
			fmt.Sprintf("%.0f tasks/s (%s); per instance %v", float64(r.n)/r.total.Seconds(), ms(r.total), r.perInst), "", ""})
	}
	return t
}
