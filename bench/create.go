package main

import (
	"context"
	"fmt"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// creation is the cost of creating one plan (not started) and of asking
// its status.
type creation struct {
	tenants int
	took    time.Duration
	rtt     int64
	kinds   map[string]int64
	// status is the mean latency of one plan status query, statusRTT its
	// round trips.
	status    time.Duration
	statusRTT float64
}

// measureCreate creates plans of each size in sizes (not started), timing
// them and counting their round trips, then times the plan status query of
// each (the same query whatever the plan's size).
func (e *env) measureCreate(ctx context.Context, sizes ...int) ([]creation, error) {
	client := e.newClient()
	defer client.Close()
	counter := newRTTCounter()
	client.AddHook(counter)
	prefix := newPrefix("create")
	defer func() { _ = e.reset(context.Background(), prefix) }()
	in, err := e.newInstance(client, prefix)
	if err != nil {
		return nil, err
	}
	defer in.shutdown()
	// Warm up: scripts loaded, connections open.
	if _, err := in.coord.CreatePlan(ctx, planSpec(0, 10, 1, e.cfg.Concurrency, false), facade.Actor{Name: "bench"}); err != nil {
		return nil, fmt.Errorf("create plan: %w", err)
	}
	out := make([]creation, len(sizes))
	ids := make([]string, len(sizes))
	for i, n := range sizes {
		spec := planSpec(0, n, 1, e.cfg.Concurrency, false)
		var pv facade.PlanView
		start := time.Now()
		rtt, kinds := counter.CountTagged(ctx, func(ctx context.Context) {
			pv, err = in.coord.CreatePlan(ctx, spec, facade.Actor{Name: "bench"})
		})
		took := time.Since(start)
		if err != nil {
			return nil, fmt.Errorf("create plan of %d tenants: %w", n, err)
		}
		v, err := in.coord.Plan(ctx, pv.ID)
		if err != nil {
			return nil, err
		}
		if v.Status != plan.StatusCreated || v.TotalTasks != n || v.Counts[task.StatusPending] != n {
			return nil, fmt.Errorf("plan %s: %s, %d tasks, counts %v; want CREATED with %d PENDING", pv.ID, v.Status, v.TotalTasks, v.Counts, n)
		}
		out[i] = creation{tenants: n, took: took, rtt: rtt, kinds: kinds}
		ids[i] = pv.ID
	}
	// Plan status: alternate the plans so that both see the same conditions.
	const queries = 2000
	var lat = make([]time.Duration, len(sizes))
	var rtt = make([]int64, len(sizes))
	for q := range queries {
		for i, id := range ids {
			start := time.Now()
			n, _ := counter.CountTagged(ctx, func(ctx context.Context) { _, err = in.coord.Plan(ctx, id) })
			lat[i] += time.Since(start)
			rtt[i] += n
			if err != nil {
				return nil, fmt.Errorf("plan status (query %d): %w", q, err)
			}
		}
	}
	for i := range out {
		out[i].status = lat[i] / queries
		out[i].statusRTT = float64(rtt[i]) / queries
	}
	return out, nil
}
