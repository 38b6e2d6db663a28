package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// taskCounter is a facade.Observer that counts the task runs an instance
// started and the ones it finished COMPLETED: the share of a plan's work
// the instance did.
type taskCounter struct {
	started, completed atomic.Int64
}

func (c *taskCounter) TaskStarted() { c.started.Add(1) }
func (c *taskCounter) TaskFinished(s task.Status) {
	if s == task.StatusCompleted {
		c.completed.Add(1)
	}
}
func (*taskCounter) StageAttempt(string, task.Outcome, time.Duration) {}
func (*taskCounter) StageRetry(string)                                {}
func (*taskCounter) LockConflict()                                    {}
func (*taskCounter) LeaseLost()                                       {}
func (*taskCounter) WriteRefused(task.RefuseReason)                   {}

// sharedRun is one plan run by several instances: the plan's run and the
// tasks each instance completed.
type sharedRun struct {
	planRun
	instances int
	// shared is facade.Config.SharedPlans of the run's instances.
	shared bool
	// perInstance is the tasks each instance completed, in instance order
	// (the first one created the plan).
	perInstance []int64
}

// planPoll is how often runShared reads the plan's status while it runs:
// one round trip (2 commands) a poll, the same in every run it compares.
const planPoll = 10 * time.Millisecond

// scaleHeartbeat is the instance heartbeat of the scale-out runs (the
// default is a third of the 60 s lease): an instance reads who else is
// alive with each heartbeat and takes its share of a plan's
// maxConcurrency from that, so fresh instances need a few beats to see
// each other, as instances that have been up for a while already do.
const scaleHeartbeat = 200 * time.Millisecond

// runShared starts k instances (ids bench-1 … bench-k, each with a Redis
// client of its own, as k processes would have) on one fresh prefix, lets
// the first create and start a plan of n tenants × 1 noop stage, and waits
// until the plan's status is COMPLETED (read every planPoll) and every
// instance is idle. Whoever runs the plan's tasks — the creator alone, or
// every instance once plan work is shared — the run checks the plan
// COMPLETED with every task counted and that the instances' completed tasks
// add up to n.
func (e *env) runShared(ctx context.Context, n, k int, shared bool) (sharedRun, error) {
	res := sharedRun{instances: k, shared: shared}
	prefix := newPrefix(fmt.Sprintf("shared%d", k))
	defer func() { _ = e.reset(context.Background(), prefix) }()
	ins := make([]*instance, k)
	counters := make([]*taskCounter, k)
	for i := range k {
		client := e.newClient()
		defer client.Close()
		counters[i] = &taskCounter{}
		in, err := e.newNamedInstance(client, prefix, instanceOpts{
			name: fmt.Sprintf("bench-%d", i+1), obs: counters[i], shared: shared, heartbeat: scaleHeartbeat,
		})
		if err != nil {
			return res, err
		}
		defer in.shutdown()
		ins[i] = in
	}
	// Every instance has registered itself (its first heartbeat is sent
	// when it starts) before the plan exists.
	if err := waitInstances(ctx, ins[0], k); err != nil {
		return res, err
	}
	// Every instance has read the registry since all were in it.
	waitCtx(ctx, 2*scaleHeartbeat)
	stop, err := meter(ctx, e.client)
	if err != nil {
		return res, err
	}
	start := time.Now()
	pv, err := ins[0].coord.CreatePlan(ctx, planSpec(0, n, 1, e.cfg.Concurrency, true), facade.Actor{Name: "bench"})
	if err != nil {
		return res, fmt.Errorf("create plan: %w", err)
	}
	created := time.Now()
	if err := waitPlanDone(ctx, ins[0], pv.ID); err != nil {
		return res, err
	}
	for _, in := range ins {
		if err := in.coord.Idle(ctx); err != nil {
			return res, fmt.Errorf("wait for plan %s: %w", pv.ID, err)
		}
	}
	done := time.Now()
	use, err := stop(ctx)
	if err != nil {
		return res, err
	}
	if err := verifyCompleted(ctx, ins[0], pv.ID, 0, n, 1); err != nil {
		return res, err
	}
	var sum int64
	for _, c := range counters {
		res.perInstance = append(res.perInstance, c.completed.Load())
		sum += c.completed.Load()
	}
	if sum != int64(n) {
		return res, fmt.Errorf("plan %s: the instances completed %v tasks, %d in all, want %d", pv.ID, res.perInstance, sum, n)
	}
	res.planRun = planRun{create: created.Sub(start), run: done.Sub(created), total: done.Sub(start), cpu: use.cpu, cmds: use.cmds}
	return res, nil
}

// waitInstances waits until in sees k live instances in the registry.
func waitInstances(ctx context.Context, in *instance, k int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		views, err := in.coord.Instances(ctx)
		live := 0
		for _, v := range views {
			if v.Alive {
				live++
			}
		}
		if err == nil && live >= k {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d instances registered, want %d: %w", live, k, errors.Join(err, ctx.Err()))
		case <-time.After(planPoll):
		}
	}
}

// waitPlanDone reads the plan's status every planPoll until it is final; a
// final status other than COMPLETED is an error.
func waitPlanDone(ctx context.Context, in *instance, planID string) error {
	t := time.NewTicker(planPoll)
	defer t.Stop()
	for {
		pv, err := in.coord.Plan(ctx, planID)
		if err != nil {
			return fmt.Errorf("plan %s status: %w", planID, err)
		}
		switch pv.Status {
		case plan.StatusCompleted:
			return nil
		case plan.StatusFailed, plan.StatusCancelled:
			return fmt.Errorf("plan %s ended %s (counts %v)", planID, pv.Status, pv.Counts)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("plan %s: %s with counts %v: %w", planID, pv.Status, pv.Counts, ctx.Err())
		case <-t.C:
		}
	}
}

// measureScaleOut runs the plan of n tenants × 1 noop with one instance and
// with two, -rounds times in alternating order, then (big > 0) a plan of
// big tenants with three instances once.
func (e *env) measureScaleOut(ctx context.Context, n, big int, progress func(string, ...any)) (scaleResult, error) {
	var res scaleResult
	type kind struct {
		k      int
		shared bool
	}
	kinds := []kind{{1, e.cfg.SharedPlans}, {2, e.cfg.SharedPlans}}
	if e.cfg.SharedPlans {
		// One instance running the plan it owns: the cost of sharing.
		kinds = append(kinds, kind{1, false})
	}
	for round := range e.cfg.Rounds {
		order := slices.Clone(kinds)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, c := range order {
			r, err := e.runShared(ctx, n, c.k, c.shared)
			if err != nil {
				return res, fmt.Errorf("%d instance(s), shared plans %t: %w", c.k, c.shared, err)
			}
			progress("  round %d: %d instance(s), shared plans %t, %d × 1 noop: %s, tasks per instance %v", round+1, c.k, c.shared, n, r.total.Round(time.Millisecond), r.perInstance)
			switch {
			case c.k == 2:
				res.two = append(res.two, r)
			case c.shared == e.cfg.SharedPlans:
				res.one = append(res.one, r)
			default:
				res.owned = append(res.owned, r)
			}
		}
	}
	if big > 0 {
		r, err := e.runShared(ctx, big, 3, e.cfg.SharedPlans)
		if err != nil {
			return res, fmt.Errorf("big plan, 3 instances: %w", err)
		}
		progress("  %d × 1 noop, 3 instances: %s, tasks per instance %v", big, r.total.Round(time.Millisecond), r.perInstance)
		res.big = &r
	}
	return res, nil
}

// scaleResult is the scale-out section's runs.
type scaleResult struct {
	one, two []sharedRun
	// owned is one instance running the plan it owns (shared plans off),
	// when the others share.
	owned []sharedRun
	big   *sharedRun
}
