package repository

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/plan"
)

// MaxPlanCounts bounds the plans one PlanCounts call reads (a page of a
// plans listing is at most plan.LimitMax).
const MaxPlanCounts = plan.LimitMax

// PlanCounts returns the task counts of up to MaxPlanCounts plans, in ONE
// round trip whatever their number: one pipelined HMGET of each plan's
// counts hash (on a cluster, go-redis sends the pipeline to each master
// holding some of the hashes, concurrently). A plan whose counts hash does
// not exist (deleted, expired) is absent from the map. It is what lets a
// plans listing show each plan's progress without a call per plan.
func (r *Redis) PlanCounts(ctx context.Context, planIDs []string) (map[string]plan.Counts, error) {
	if err := checkPlanCountIDs(planIDs); err != nil {
		return nil, err
	}
	out := make(map[string]plan.Counts, len(planIDs))
	if len(planIDs) == 0 {
		return out, nil
	}
	keys := make([]string, len(planIDs))
	cmds := make([]*redis.SliceCmd, len(planIDs))
	pp := r.c.Pipeline()
	for i, id := range planIDs {
		pk, err := r.keys.planKeys(id)
		if err != nil {
			return nil, fmt.Errorf("plan counts: %w", err)
		}
		keys[i] = pk.counts
		cmds[i] = pp.HMGet(ctx, pk.counts, statusNames()...)
	}
	if err := transportErr(pp.Exec(ctx)); err != nil {
		return nil, wrapErr(ctx, "plan counts", err)
	}
	for i, id := range planIDs {
		if err := cmds[i].Err(); err != nil {
			return nil, wrapErr(ctx, "plan counts", err)
		}
		vals := cmds[i].Val()
		found := false
		for _, v := range vals {
			found = found || v != nil
		}
		if !found {
			continue
		}
		c, err := decodeCounts(keys[i], vals)
		if err != nil {
			return nil, err
		}
		out[id] = c
	}
	return out, nil
}

// PlanCounts returns the counts of the plans memory holds (see
// Redis.PlanCounts); the others are absent.
func (m *Memory) PlanCounts(ctx context.Context, planIDs []string) (map[string]plan.Counts, error) {
	if err := checkPlanCountIDs(planIDs); err != nil {
		return nil, err
	}
	out := make(map[string]plan.Counts, len(planIDs))
	for _, id := range planIDs {
		_, c, err := m.Plan(ctx, id)
		switch {
		case errors.Is(err, plan.ErrNotFound):
		case err != nil:
			return nil, err
		default:
			out[id] = c
		}
	}
	return out, nil
}

// PlanCounts reads Redis, or memory (see Dual).
func (d *Dual) PlanCounts(ctx context.Context, planIDs []string) (map[string]plan.Counts, error) {
	return read(ctx, d, func() (map[string]plan.Counts, error) {
		return d.r.PlanCounts(ctx, planIDs)
	}, memPlans(d, func() (map[string]plan.Counts, error) {
		return d.mem.PlanCounts(ctx, planIDs)
	}))
}

func checkPlanCountIDs(ids []string) error {
	if len(ids) > MaxPlanCounts {
		return fmt.Errorf("%w: plan counts: %d plans, at most %d", plan.ErrInvalid, len(ids), MaxPlanCounts)
	}
	for _, id := range ids {
		if err := checkPlanID(id); err != nil {
			return fmt.Errorf("plan counts: %w", err)
		}
	}
	return nil
}
