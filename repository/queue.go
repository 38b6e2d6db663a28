package repository

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// A plan's shared work queue (docs/architecture.md, "Shared plan work"): every live instance claims the
// plan's tasks from it, and the plan's maxConcurrency is one limit across
// all of them, kept as permits in Redis. Every key of a plan's queue is in
// the plan's slot; the set of active plans is a key of its own.

var (
	//go:embed scripts/claim_plan_task.lua
	claimPlanTaskLua string
	//go:embed scripts/renew_permits.lua
	renewPermitsLua string

	claimPlanTaskScript = newScript("claim_plan_task", claimPlanTaskLua)
	renewPermitsScript  = newScript("renew_permits", renewPermitsLua)
)

func init() { allScripts = append(allScripts, claimPlanTaskScript, renewPermitsScript) }

// queueBatch is how many entries one RPUSH carries.
const queueBatch = 1000

// PlanQueue returns {p}plan:{planId}:queue, the plan's queued work: LIST of
// "<kind>|<tenantId>|<taskId>" (plan.QueueEntry), with the plan keys' TTL.
func (k Keys) PlanQueue(planID string) (string, error) {
	if err := checkPlanID(planID); err != nil {
		return "", err
	}
	return k.plan(planID) + ":queue", nil
}

// PlanPermits returns {p}plan:{planId}:permits, the permits held on the
// plan's maxConcurrency: ZSET of queue entries scored by the end of their
// lease in Unix milliseconds of the Redis server's clock.
func (k Keys) PlanPermits(planID string) (string, error) {
	if err := checkPlanID(planID); err != nil {
		return "", err
	}
	return k.plan(planID) + ":permits", nil
}

// ActivePlans returns {p}plans:active, the ids of plans whose work may be
// queued (SET, no TTL; a plan leaves it once it is finished or gone).
func (k Keys) ActivePlans() string { return k.prefix + "plans:active" }

type queueKeys struct{ plan, queue, permits string }

func (k Keys) queueKeys(planID string) (queueKeys, error) {
	if err := checkPlanID(planID); err != nil {
		return queueKeys{}, err
	}
	p := k.plan(planID)
	return queueKeys{plan: p, queue: p + ":queue", permits: p + ":permits"}, nil
}

func entryStrings(es []plan.QueueEntry) ([]string, error) {
	out := make([]string, len(es))
	for i, e := range es {
		if err := e.Check(); err != nil {
			return nil, err
		}
		out[i] = e.String()
	}
	return out, nil
}

// PushQueue appends entries to a plan's queue (at its head when front) and
// marks the plan active: one round trip per 1000 entries, pipelined.
func (r *Redis) PushQueue(ctx context.Context, planID string, es []plan.QueueEntry, front bool) error {
	op := "queue tasks of plan " + planID
	qk, err := r.keys.queueKeys(planID)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	vals, err := entryStrings(es)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	ttl := r.cfg.TTL
	_, err = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		if front {
			// LPUSH reverses: push the entries backwards, the last batch
			// first, to keep their order at the head.
			for end := len(vals); end > 0; end -= queueBatch {
				batch := make([]any, 0, queueBatch)
				for i := end - 1; i >= max(end-queueBatch, 0); i-- {
					batch = append(batch, vals[i])
				}
				p.LPush(ctx, qk.queue, batch...)
			}
		}
		for start := 0; start < len(vals) && !front; start += queueBatch {
			batch := make([]any, 0, queueBatch)
			for _, v := range vals[start:min(start+queueBatch, len(vals))] {
				batch = append(batch, v)
			}
			p.RPush(ctx, qk.queue, batch...)
		}
		p.PExpire(ctx, qk.queue, ttl)
		p.SAdd(ctx, r.keys.ActivePlans(), planID)
		return nil
	})
	return wrapErr(ctx, op, err)
}

// ClaimTasks frees the permits of release (tasks of the caller that
// ended), then takes up to want queued entries of a RUNNING plan, each with
// a permit leased for lease, as many as fewer than the plan's
// maxConcurrency permits held allow. One round trip however many it
// grants. A permit not to be had is ClaimFull, not an error. An entry this
// package did not write is dropped with its permit; the others are granted.
func (r *Redis) ClaimTasks(ctx context.Context, planID string, release []plan.QueueEntry, lease time.Duration, want int) (plan.Claim, error) {
	op := "claim tasks of plan " + planID
	qk, err := r.keys.queueKeys(planID)
	if err != nil {
		return plan.Claim{}, fmt.Errorf("%s: %w", op, err)
	}
	rel, err := entryStrings(release)
	if err != nil {
		return plan.Claim{}, fmt.Errorf("%s: %w", op, err)
	}
	switch {
	case lease < time.Millisecond:
		return plan.Claim{}, fmt.Errorf("%s: %w: permit lease %s under 1ms", op, plan.ErrInvalid, lease)
	case want < 1 || want > plan.MaxConcurrencyLimit:
		return plan.Claim{}, fmt.Errorf("%s: %w: %d entries wanted, not 1 to %d", op, plan.ErrInvalid, want, plan.MaxConcurrencyLimit)
	}
	args := make([]any, 0, 4+len(rel))
	args = append(args, lease.Milliseconds(), r.ttlMs(), want, len(rel))
	for _, v := range rel {
		args = append(args, v)
	}
	v, err := r.run(ctx, claimPlanTaskScript, []string{qk.plan, qk.queue, qk.permits}, args...)
	if err != nil {
		return plan.Claim{}, wrapErr(ctx, op, err)
	}
	s, err := replySlice(op, v)
	if err != nil || len(s) == 0 {
		return plan.Claim{}, fmt.Errorf("%s: unexpected script reply %v", op, v)
	}
	switch replyInt(s[0]) {
	case 3:
		c := plan.Claim{Outcome: plan.ClaimGranted, Permits: int(replyInt(s[1])), Entries: make([]plan.QueueEntry, 0, len(s)-2)}
		var bad []any
		var badErr error
		for _, raw := range s[2:] {
			e, err := plan.ParseQueueEntry(replyStr(raw))
			if err != nil {
				bad = append(bad, replyStr(raw))
				badErr = err
				continue
			}
			c.Entries = append(c.Entries, e)
		}
		if len(bad) > 0 {
			// Not written by this package: drop them (their permits with them).
			_, _ = r.c.ZRem(ctx, qk.permits, bad...).Result()
			c.Permits -= len(bad)
			if len(c.Entries) == 0 {
				return plan.Claim{}, fmt.Errorf("%s: %w", op, badErr)
			}
		}
		return c, nil
	case 1:
		return plan.Claim{Outcome: plan.ClaimFull, Permits: int(replyInt(s[1]))}, nil
	case 2:
		return plan.Claim{Outcome: plan.ClaimEmpty, Permits: int(replyInt(s[1]))}, nil
	case 0:
		return plan.Claim{Outcome: plan.ClaimNotRunning, Status: plan.Status(replyStr(s[1]))}, nil
	default:
		return plan.Claim{Outcome: plan.ClaimNoPlan}, nil
	}
}

// RenewPermits extends the leases of the caller's permits still held (one
// round trip) and returns how many were.
func (r *Redis) RenewPermits(ctx context.Context, planID string, es []plan.QueueEntry, lease time.Duration) (int, error) {
	op := "renew permits of plan " + planID
	qk, err := r.keys.queueKeys(planID)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	vals, err := entryStrings(es)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if len(vals) == 0 {
		return 0, nil
	}
	args := make([]any, 0, 2+len(vals))
	args = append(args, lease.Milliseconds(), r.ttlMs())
	for _, v := range vals {
		args = append(args, v)
	}
	v, err := r.run(ctx, renewPermitsScript, []string{qk.permits}, args...)
	if err != nil {
		return 0, wrapErr(ctx, op, err)
	}
	return int(replyInt(v)), nil
}

// ReleasePermits frees permits (one round trip).
func (r *Redis) ReleasePermits(ctx context.Context, planID string, es []plan.QueueEntry) error {
	op := "release permits of plan " + planID
	qk, err := r.keys.queueKeys(planID)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	vals, err := entryStrings(es)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if len(vals) == 0 {
		return nil
	}
	members := make([]any, len(vals))
	for i, v := range vals {
		members[i] = v
	}
	return wrapErr(ctx, op, r.c.ZRem(ctx, qk.permits, members...).Err())
}

// DropQueue deletes a plan's queue (a cancelled plan) and takes the plan
// off the active set; held permits stay until their tasks end.
func (r *Redis) DropQueue(ctx context.Context, planID string) error {
	op := "drop queue of plan " + planID
	qk, err := r.keys.queueKeys(planID)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	_, err = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, qk.queue)
		p.SRem(ctx, r.keys.ActivePlans(), planID)
		return nil
	})
	return wrapErr(ctx, op, err)
}

// QueueEntries returns a plan's queued entries and held permits (for a
// repair: what is not in either is not queued).
func (r *Redis) QueueEntries(ctx context.Context, planID string) (queued, held []plan.QueueEntry, err error) {
	op := "read queue of plan " + planID
	qk, err := r.keys.queueKeys(planID)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", op, err)
	}
	var q, h *redis.StringSliceCmd
	_, err = r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		q = p.LRange(ctx, qk.queue, 0, -1)
		h = p.ZRange(ctx, qk.permits, 0, -1)
		return nil
	})
	if err != nil {
		return nil, nil, wrapErr(ctx, op, err)
	}
	parse := func(vals []string) []plan.QueueEntry {
		out := make([]plan.QueueEntry, 0, len(vals))
		for _, v := range vals {
			if e, err := plan.ParseQueueEntry(v); err == nil {
				out = append(out, e)
			}
		}
		return out
	}
	return parse(q.Val()), parse(h.Val()), nil
}

// ActiveQueues returns the state of every active plan (one round trip for
// the set, one pipelined for the plans) and takes plans that are finished
// or gone off the set.
func (r *Redis) ActiveQueues(ctx context.Context) ([]plan.QueueState, error) {
	op := "list active plans"
	ids, err := r.c.SMembers(ctx, r.keys.ActivePlans()).Result()
	if err != nil {
		return nil, wrapErr(ctx, op, err)
	}
	type cmds struct {
		id      string
		rec     *redis.SliceCmd
		queued  *redis.IntCmd
		permits *redis.IntCmd
	}
	var all []cmds
	var bad []any
	res, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			qk, err := r.keys.queueKeys(id)
			if err != nil {
				bad = append(bad, id)
				continue
			}
			all = append(all, cmds{id: id, rec: p.HMGet(ctx, qk.plan, "status", fMaxConcurrency),
				queued: p.LLen(ctx, qk.queue), permits: p.ZCard(ctx, qk.permits)})
		}
		return nil
	})
	if terr := transportErr(res, err); terr != nil && !errors.Is(terr, redis.Nil) {
		return nil, wrapErr(ctx, op, terr)
	}
	out := make([]plan.QueueState, 0, len(all))
	for _, c := range all {
		vals := c.rec.Val()
		if len(vals) < 2 || vals[0] == nil {
			bad = append(bad, c.id)
			continue
		}
		st := plan.Status(fmt.Sprint(vals[0]))
		if st.Finished() {
			bad = append(bad, c.id)
			continue
		}
		maxc, _ := strconv.Atoi(fmt.Sprint(vals[1]))
		out = append(out, plan.QueueState{PlanID: c.id, Status: st, MaxConcurrency: maxc,
			Queued: int(c.queued.Val()), Permits: int(c.permits.Val())})
	}
	if len(bad) > 0 {
		_ = r.c.SRem(ctx, r.keys.ActivePlans(), bad...).Err()
	}
	return out, nil
}

// QueuedTask reads the task of a queue entry (its record and nothing else:
// not its checkpoint, which only a retried task starts from and reads
// then): one round trip, shared with other reads. Returns task.ErrNotFound.
func (r *Redis) QueuedTask(ctx context.Context, e plan.QueueEntry) (*task.Task, error) {
	op := "read task " + e.TaskID
	if err := e.Check(); err != nil {
		return nil, fmt.Errorf("read queued task: %w", err)
	}
	tk, err := r.keys.taskKeys(e.TenantID, e.TaskID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	h := redis.NewMapStringStringCmd(ctx, "hgetall", tk.task)
	if err := r.readPipe(ctx, h); err != nil {
		return nil, wrapErr(ctx, op, err)
	}
	return decodeRecord(ctx, op, tk, h)
}
