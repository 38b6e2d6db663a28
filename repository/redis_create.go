package repository

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// ---- plans -----------------------------------------------------------------

// CreatePlan stores a new plan and its PENDING tasks: the plan record and
// counters first (refused with ErrPlanExists when the id is taken), then
// pipelines of Config.Batch tasks (records, taskrefs, the tenants'
// histories, the plan's task list and ledger), the plans index last. Round
// trips: 1 + ceil(len(tasks)/Batch). Each batch is encoded just before it
// is sent (every task's params are checked first), so a big plan is never
// held encoded whole. If a batch fails, what was written is deleted (best
// effort) and the error returned.
func (r *Redis) CreatePlan(ctx context.Context, p *plan.Plan, tasks []*task.Task) error {
	if err := checkNewPlan(p, tasks); err != nil {
		return err
	}
	op := "create plan " + p.ID
	pk, _ := r.keys.planKeys(p.ID)
	for _, t := range tasks {
		if err := checkJSON(t.Params); err != nil {
			return fmt.Errorf("%w: %s: task %s: encode params: %v", task.ErrInvalid, op, t.ID, err)
		}
	}
	rec, err := planRecord(p)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", plan.ErrInvalid, op, err)
	}
	now := r.now()
	// ttlAt: when the plan's keys got the TTL (move_plan_counts.lua).
	rec = append(rec, fTTLAt, strconv.FormatInt(now.UnixMilli(), 10))

	ttl := r.ttlMs()
	v, err := r.run(ctx, createPlanScript, []string{pk.plan, pk.counts}, strArgs([]any{ttl, len(tasks)}, rec...)...)
	if err != nil {
		return wrapErr(ctx, op, err)
	}
	if replyInt(v) != 1 {
		return fmt.Errorf("%s: %w", op, ErrPlanExists)
	}

	// One answer for the whole plan: its rollback undoes what it wrote.
	legacy := r.legacy.on.Load()
	written := 0
	for start := 0; start == 0 || start < len(tasks); start += r.cfg.Batch {
		end := min(start+r.cfg.Batch, len(tasks))
		written = end
		err := r.createBatch(ctx, p, tasks, start, end, now, legacy)
		if err != nil {
			r.rollbackPlan(ctx, pk, p.ID, r.keysOf(tasks[:written]), legacy)
			if errors.Is(err, task.ErrInvalid) {
				return fmt.Errorf("%s: %w", op, err)
			}
			return wrapErr(ctx, op, err)
		}
		if end == len(tasks) {
			break
		}
	}
	return nil
}

// keysOf returns the task keys of tasks (their ids are checked).
func (r *Redis) keysOf(tasks []*task.Task) []taskKeys {
	out := make([]taskKeys, len(tasks))
	for i, t := range tasks {
		out[i], _ = r.keys.taskKeys(t.TenantID, t.ID)
	}
	return out
}

// createBatch writes tasks[start:end] of a new plan in one pipeline (with
// the plans index when end is the last task).
func (r *Redis) createBatch(ctx context.Context, p *plan.Plan, tasks []*task.Task, start, end int, now time.Time, legacy bool) error {
	pk, _ := r.keys.planKeys(p.ID)
	ttl := r.ttlMs()
	pp := r.pipeline()
	nowMs := strconv.FormatInt(now.UnixMilli(), 10)
	var push *evalCmd
	if end > start {
		args := make([]any, 0, 3+2*(end-start))
		args = append(args, start, ttl, micros(createdAt(p, now)))
		for _, t := range tasks[start:end] {
			args = append(args, t.ID, ledger{Status: task.StatusPending, TenantID: t.TenantID}.String())
		}
		pending, _ := r.keys.PlanStatusIndex(p.ID, task.StatusPending)
		push = pp.eval(ctx, pushPlanTasksScript, []string{pk.tasks, pk.counts, pending}, args...)
	}
	// The taskrefs go to their buckets, one HSET each (a batch's ids were
	// made together: the 16 shards of an hour at most, rarely two hours).
	var refs map[string][]any
	for _, t := range tasks[start:end] {
		k, _ := r.keys.taskKeys(t.TenantID, t.ID)
		rec, err := taskRecord(t)
		if err != nil {
			return fmt.Errorf("%w: %v", task.ErrInvalid, err)
		}
		rec = append(rec, fTTLAt, nowMs)
		pp.p.HSet(ctx, k.task, strArgs(make([]any, 0, len(rec)), rec...)...)
		pp.p.PExpire(ctx, k.task, r.cfg.TTL)
		pp.p.ZAdd(ctx, k.history, redis.Z{Score: float64(scoreOf(t.CreatedAt, now)), Member: t.ID})
		pp.p.PExpire(ctx, k.history, r.cfg.TTL)
		if legacy {
			r.writeLegacy(ctx, pp, k, t)
		}
		if refs == nil {
			refs = make(map[string][]any, 16)
		}
		refs[k.ref] = append(refs[k.ref], t.ID, t.TenantID)
	}
	for ref, fields := range refs {
		pp.p.HSet(ctx, ref, fields...)
		pp.p.PExpire(ctx, ref, r.cfg.TTL)
	}
	if end == len(tasks) {
		if len(tasks) > 0 {
			r.indexPlans(ctx, pp, p.ID, createdAt(p, now), task.StatusPending)
		}
		pp.p.ZAdd(ctx, r.keys.Plans(), redis.Z{Score: float64(scoreOf(p.CreatedAt, now)), Member: p.ID})
		pp.p.ZRemRangeByScore(ctx, r.keys.Plans(), "-inf", "("+strconv.FormatInt(now.Add(-r.cfg.TTL).UnixMilli(), 10))
	}
	err := pp.exec(ctx)
	if err == nil {
		err = pp.replyErr()
	}
	if err == nil && push != nil {
		if n, perr := push.cmd.Int64(); perr != nil {
			err = perr
		} else if n != int64(end) {
			err = fmt.Errorf("task list of plan %s has %d entries, want %d (concurrent creation?)", p.ID, n, end)
		}
	}
	return err
}

func scoreOf(t, now time.Time) int64 {
	if t.IsZero() {
		t = now
	}
	return t.UnixMilli()
}

// replyErr returns the first error reply of the pipeline other than redis.Nil.
func (p *pipe) replyErr() error {
	for _, c := range p.cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) && !isNoScript(err) {
			return err
		}
	}
	for _, e := range p.evals {
		if err := e.cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
	}
	return nil
}

// RecreatePlan creates the plan as CreatePlan does; when the plan exists
// already it first deletes it with its tasks' records (and puts their
// tenants' indexes back), then creates it again — the write-back of a
// creation that reached Redis, maybe in part, before its outage was seen
// (Dual, single-instance mode), when no later operation on it has been
// written yet. Nothing else should call it.
func (r *Redis) RecreatePlan(ctx context.Context, p *plan.Plan, tasks []*task.Task) error {
	err := r.CreatePlan(ctx, p, tasks)
	if !errors.Is(err, ErrPlanExists) {
		return err
	}
	pk, _ := r.keys.planKeys(p.ID)
	// The first creation may have written the keys of layout 1 whatever
	// the mode is now; undoing them where it did not changes nothing.
	r.rollbackPlan(ctx, pk, p.ID, r.keysOf(tasks), true)
	return r.CreatePlan(ctx, p, tasks)
}

// rollbackPlan deletes a plan created in part, best effort, with its own
// deadline (the caller's context may be what failed).
func (r *Redis) rollbackPlan(ctx context.Context, pk planKeys, planID string, tasks []taskKeys, legacy bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	pp := r.pipeline()
	n := 0
	flush := func() {
		_ = pp.exec(ctx)
		pp, n = r.pipeline(), 0
	}
	pp.p.Del(ctx, pk.plan, pk.tasks, pk.counts)
	pp.p.ZRem(ctx, r.keys.Plans(), planID)
	r.dropSearchIndexes(ctx, pp, planID)
	for _, k := range tasks {
		// A DEL and an HDEL: the record is in the tenant's slot, the
		// taskref in its bucket's, and a Redis Cluster refuses a command
		// across slots (CROSSSLOT) — the whole rollback then left the
		// records behind.
		pp.p.Del(ctx, k.task)
		pp.p.HDel(ctx, k.ref, k.id)
		pp.p.ZRem(ctx, k.history, k.id)
		if legacy {
			r.rollbackLegacy(ctx, pp, k)
		}
		if n++; n >= r.cfg.Batch {
			flush()
		}
	}
	flush()
}
