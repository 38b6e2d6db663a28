package repository

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/task"
)

// TenantBatchMax is the most tenants one TasksByTenant call reads.
const TenantBatchMax = 1000

// ownerField is the counts-hash field counting the RUNNING tasks of owner.
func ownerField(owner string) string { return string(task.StatusRunning) + "@" + owner }

func checkOwners(planID string, owners []string) error {
	if err := checkPlanID(planID); err != nil {
		return fmt.Errorf("running tasks by owner: %w", err)
	}
	for _, o := range owners {
		if err := checkInstanceID(o); err != nil {
			return fmt.Errorf("running tasks by owner of plan %s: %w", planID, err)
		}
	}
	return nil
}

// RunningByOwner returns how many of the plan's tasks each of owners runs,
// from the RUNNING@<owner> counters of the plan's counts (0 for an owner
// without one, and for every owner of a plan that does not exist). One round
// trip (HMGET), O(len(owners)). Returns an error wrapping task.ErrInvalid or
// plan.ErrInvalid for a bad id.
func (r *Redis) RunningByOwner(ctx context.Context, planID string, owners []string) (map[string]int, error) {
	if err := checkOwners(planID, owners); err != nil {
		return nil, err
	}
	out := make(map[string]int, len(owners))
	if len(owners) == 0 {
		return out, nil
	}
	k, _ := r.keys.PlanCounts(planID)
	fields := make([]string, len(owners))
	for i, o := range owners {
		fields[i] = ownerField(o)
	}
	vals, err := r.c.HMGet(ctx, k, fields...).Result()
	if err != nil {
		return nil, wrapErr(ctx, "running tasks by owner of plan "+planID, err)
	}
	for i, o := range owners {
		out[o] = 0
		if i >= len(vals) || vals[i] == nil {
			continue
		}
		v := replyStr(vals[i])
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("%w: %s field %s = %s: %v", ErrCorrupt, k, fields[i], task.Quote(v), err)
		}
		out[o] = n
	}
	return out, nil
}

// checkTenants validates the ids of a batch read and returns them without
// duplicates.
func checkTenants(tenantIDs []string) ([]string, error) {
	if len(tenantIDs) > TenantBatchMax {
		return nil, fmt.Errorf("%w: tasks by tenant: %d tenants, at most %d", task.ErrInvalid, len(tenantIDs), TenantBatchMax)
	}
	seen := make(map[string]bool, len(tenantIDs))
	out := make([]string, 0, len(tenantIDs))
	for _, id := range tenantIDs {
		if err := task.CheckTenantID(id); err != nil {
			return nil, fmt.Errorf("tasks by tenant: %w", err)
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}

// TasksByTenant returns the current task of each tenant (up to
// TenantBatchMax) and the checkpoints of those that have one. Tenants
// without a task are absent from the maps. Two round trips whatever the
// number of tenants: the index entries (each history's newest) in one
// pipeline, then the records
// and checkpoints in another — one when the store remembers, for every
// tenant, the task its index named at its last query (Config.TenantHints):
// those records go in the first pipeline, and only the tenants whose index
// moved on are read again. Returns an error wrapping task.ErrInvalid,
// before anything is sent, for a bad id or too many.
func (r *Redis) TasksByTenant(ctx context.Context, tenantIDs []string) (map[string]*task.Task, map[string]*checkpoint.Checkpoint, error) {
	ids, err := checkTenants(tenantIDs)
	if err != nil {
		return nil, nil, err
	}
	const op = "tasks by tenant"
	tasks := make(map[string]*task.Task, len(ids))
	ckpts := make(map[string]*checkpoint.Checkpoint)
	if len(ids) == 0 {
		return tasks, ckpts, nil
	}
	type found struct {
		tenant string
		k      taskKeys
		h      *redis.MapStringStringCmd
		c      *redis.StringCmd
	}
	pp := r.c.Pipeline()
	gets := make([]*redis.StringSliceCmd, len(ids))
	hinted := make([]*found, len(ids))
	for i, id := range ids {
		gets[i] = newestCmd(ctx, r.keys.history(id))
		_ = pp.Process(ctx, gets[i])
		if hint := r.hints.get(id); hint != "" {
			k, _ := r.keys.taskKeys(id, hint)
			hinted[i] = &found{tenant: id, k: k, h: pp.HGetAll(ctx, k.task), c: pp.Get(ctx, k.ckpt)}
		}
	}
	if err := transportErr(pp.Exec(ctx)); err != nil {
		return nil, nil, wrapErr(ctx, op, err)
	}
	fs := make([]*found, 0, len(ids))
	var again []*found
	for i, g := range gets {
		newest, err := newestOf(g)
		switch {
		case errors.Is(err, redis.Nil):
			r.hints.forget(ids[i])
			continue
		case err != nil:
			return nil, nil, wrapErr(ctx, op, err)
		}
		if f := hinted[i]; f != nil && f.k.id == newest {
			fs = append(fs, f)
			continue
		}
		k, err := r.keys.taskKeys(ids[i], newest)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s holds %s, not a task id", ErrCorrupt, r.keys.history(ids[i]), task.Quote(newest))
		}
		r.hints.put(ids[i], k.id)
		f := &found{tenant: ids[i], k: k}
		fs = append(fs, f)
		again = append(again, f)
	}
	if len(again) > 0 {
		pp = r.c.Pipeline()
		for _, f := range again {
			f.h = pp.HGetAll(ctx, f.k.task)
			f.c = pp.Get(ctx, f.k.ckpt)
		}
		if err := transportErr(pp.Exec(ctx)); err != nil {
			return nil, nil, wrapErr(ctx, op, err)
		}
	}
	for _, f := range fs {
		if err := f.h.Err(); err != nil {
			return nil, nil, wrapErr(ctx, op, err)
		}
		t, err := decodeTask(f.k.task, f.h.Val())
		if err != nil {
			return nil, nil, err
		}
		if t == nil {
			continue // the index outlived the record
		}
		tasks[f.tenant] = t
		switch err := f.c.Err(); {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			return nil, nil, wrapErr(ctx, op, err)
		}
		cp, err := unmarshalCheckpoint([]byte(f.c.Val()))
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, f.k.ckpt, err)
		}
		ckpts[f.tenant] = &cp
	}
	return tasks, ckpts, nil
}

// ---- memory ----------------------------------------------------------------

// RunningByOwner counts the plan's RUNNING tasks of each owner among the
// tasks in memory (0 for every owner of an unknown plan).
func (m *Memory) RunningByOwner(_ context.Context, planID string, owners []string) (map[string]int, error) {
	if err := checkOwners(planID, owners); err != nil {
		return nil, err
	}
	out := make(map[string]int, len(owners))
	for _, o := range owners {
		out[o] = 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mp := m.plans[planID]
	if mp == nil || len(owners) == 0 {
		return out, nil
	}
	for _, id := range mp.taskIDs {
		if mt := m.tasks[id]; mt != nil && mt.t.Status == task.StatusRunning {
			if _, ok := out[mt.t.Owner]; ok {
				out[mt.t.Owner]++
			}
		}
	}
	return out, nil
}

// TasksByTenant returns the current task and checkpoint of each tenant
// that has one in memory, as the Redis store does.
func (m *Memory) TasksByTenant(_ context.Context, tenantIDs []string) (map[string]*task.Task, map[string]*checkpoint.Checkpoint, error) {
	ids, err := checkTenants(tenantIDs)
	if err != nil {
		return nil, nil, err
	}
	tasks := make(map[string]*task.Task, len(ids))
	ckpts := make(map[string]*checkpoint.Checkpoint)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		mt := m.byTenantLocked(id)
		if mt == nil {
			continue
		}
		t, c, err := m.taskOut(mt)
		if err != nil {
			return nil, nil, err
		}
		tasks[id] = t
		if c != nil {
			ckpts[id] = c
		}
	}
	return tasks, ckpts, nil
}
