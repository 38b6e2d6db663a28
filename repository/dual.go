package repository

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Dual is the double-writing store of DESIGN §4. Writes go to Redis first,
// which decides (the fenced scripts); a write Redis accepted is mirrored into
// the memory store, which should keep only unfinished aggregates
// (MemoryConfig.DropFinished) to stay bounded. A write that fails is not
// mirrored: with Redis unreachable it returns the *UnavailableError.
//
// Reads go to Redis. When Redis is unreachable they are answered from memory
// and Degraded reports true until a Redis call succeeds again; an answer
// memory does not have (not found) returns the Redis error instead, since
// Redis may well hold it.
type Dual struct {
	mem      *Memory
	r        *Redis
	degraded atomic.Bool
}

// NewDual returns the store writing to r and mirroring into mem.
func NewDual(mem *Memory, r *Redis) *Dual { return &Dual{mem: mem, r: r} }

// Degraded reports whether the last call found Redis unreachable (answers
// come from memory) and no Redis call has succeeded since.
func (d *Dual) Degraded() bool { return d.degraded.Load() }

// Redis returns the Redis half.
func (d *Dual) Redis() *Redis { return d.r }

// Memory returns the memory half.
func (d *Dual) Memory() *Memory { return d.mem }

// observe records what a Redis call said about Redis' reachability. Errors
// raised before Redis was asked (invalid input) or by the caller's
// cancellation say nothing.
func (d *Dual) observe(err error) {
	switch {
	case err == nil:
		d.degraded.Store(false)
	case IsUnavailable(err):
		d.degraded.Store(true)
	case errors.Is(err, task.ErrInvalid), errors.Is(err, plan.ErrInvalid), errors.Is(err, context.Canceled):
	default:
		d.degraded.Store(false)
	}
}

func isNotFound(err error) bool {
	return errors.Is(err, task.ErrNotFound) || errors.Is(err, plan.ErrNotFound) || errors.Is(err, checkpoint.ErrNotFound)
}

// fallback returns the memory answer when Redis was unreachable, unless
// memory does not know the answer either.
func fallback[T any](d *Dual, v T, err error, mem func() (T, error)) (T, error) {
	d.observe(err)
	if !IsUnavailable(err) {
		return v, err
	}
	mv, merr := mem()
	if merr != nil && isNotFound(merr) {
		return v, err
	}
	return mv, merr
}

// CreatePlan stores the plan in Redis, then in memory.
func (d *Dual) CreatePlan(ctx context.Context, p *plan.Plan, tasks []*task.Task) error {
	err := d.r.CreatePlan(ctx, p, tasks)
	d.observe(err)
	if err == nil {
		d.mem.mirrorCreate(p, tasks)
	}
	return err
}

// UpdatePlan updates the plan in Redis, then in memory.
func (d *Dual) UpdatePlan(ctx context.Context, p *plan.Plan, from ...plan.Status) error {
	err := d.r.UpdatePlan(ctx, p, from...)
	d.observe(err)
	if err == nil {
		d.mem.mirrorPlan(p)
	}
	return err
}

type planAndCounts struct {
	p *plan.Plan
	c plan.Counts
}

// Plan reads Redis, or memory when Redis is unreachable.
func (d *Dual) Plan(ctx context.Context, planID string) (*plan.Plan, plan.Counts, error) {
	p, c, err := d.r.Plan(ctx, planID)
	v, err := fallback(d, planAndCounts{p, c}, err, func() (planAndCounts, error) {
		p, c, err := d.mem.Plan(ctx, planID)
		return planAndCounts{p, c}, err
	})
	return v.p, v.c, err
}

type page[T any] struct {
	items []T
	next  string
}

// Plans reads Redis, or memory when Redis is unreachable.
func (d *Dual) Plans(ctx context.Context, f plan.ListFilter) ([]*plan.Plan, string, error) {
	ps, next, err := d.r.Plans(ctx, f)
	v, err := fallback(d, page[*plan.Plan]{ps, next}, err, func() (page[*plan.Plan], error) {
		ps, next, err := d.mem.Plans(ctx, f)
		return page[*plan.Plan]{ps, next}, err
	})
	return v.items, v.next, err
}

// PlanTasks reads Redis, or memory when Redis is unreachable.
func (d *Dual) PlanTasks(ctx context.Context, planID string, f plan.TaskFilter) ([]*task.Task, string, error) {
	ts, next, err := d.r.PlanTasks(ctx, planID, f)
	v, err := fallback(d, page[*task.Task]{ts, next}, err, func() (page[*task.Task], error) {
		ts, next, err := d.mem.PlanTasks(ctx, planID, f)
		return page[*task.Task]{ts, next}, err
	})
	return v.items, v.next, err
}

// RepairCounts repairs the counts in Redis and copies them into memory.
func (d *Dual) RepairCounts(ctx context.Context, planID string) (plan.Counts, error) {
	c, err := d.r.RepairCounts(ctx, planID)
	d.observe(err)
	if err == nil {
		d.mem.mirrorCounts(planID, c)
	}
	return c, err
}

// WriteTask writes to Redis (the fenced script decides) and mirrors an
// accepted write into memory.
func (d *Dual) WriteTask(ctx context.Context, w task.Write) (task.WriteResult, error) {
	res, err := d.r.WriteTask(ctx, w)
	d.observe(err)
	if res.Seq > 0 {
		// Also when the counts update failed after the record was written.
		d.mem.mirrorWrite(w, res)
	}
	return res, err
}

// RequestTask stores the request in Redis and mirrors it into memory.
func (d *Dual) RequestTask(ctx context.Context, tenantID, taskID string, r task.Request, ev task.Event) (*task.Task, error) {
	t, applied, err := d.r.requestTask(ctx, tenantID, taskID, r, ev)
	d.observe(err)
	if err == nil {
		d.mem.mirrorRequest(t, applied, ev)
	}
	return t, err
}

// Beat refreshes the heartbeat in Redis and mirrors it into memory.
func (d *Dual) Beat(ctx context.Context, tenantID, taskID string, g task.Guard, now time.Time) error {
	err := d.r.Beat(ctx, tenantID, taskID, g, now)
	d.observe(err)
	if err == nil {
		d.mem.mirrorBeat(taskID, now)
	}
	return err
}

type taskAndCheckpoint struct {
	t *task.Task
	c *checkpoint.Checkpoint
}

// TaskByTenant reads Redis, or memory when Redis is unreachable.
func (d *Dual) TaskByTenant(ctx context.Context, tenantID string) (*task.Task, *checkpoint.Checkpoint, error) {
	t, c, err := d.r.TaskByTenant(ctx, tenantID)
	v, err := fallback(d, taskAndCheckpoint{t, c}, err, func() (taskAndCheckpoint, error) {
		t, c, err := d.mem.TaskByTenant(ctx, tenantID)
		return taskAndCheckpoint{t, c}, err
	})
	return v.t, v.c, err
}

// Task reads Redis, or memory when Redis is unreachable.
func (d *Dual) Task(ctx context.Context, taskID string) (*task.Task, *checkpoint.Checkpoint, error) {
	t, c, err := d.r.Task(ctx, taskID)
	v, err := fallback(d, taskAndCheckpoint{t, c}, err, func() (taskAndCheckpoint, error) {
		t, c, err := d.mem.Task(ctx, taskID)
		return taskAndCheckpoint{t, c}, err
	})
	return v.t, v.c, err
}

// TenantHistory reads Redis, or memory when Redis is unreachable.
func (d *Dual) TenantHistory(ctx context.Context, tenantID string, limit int) ([]*task.Task, error) {
	ts, err := d.r.TenantHistory(ctx, tenantID, limit)
	return fallback(d, ts, err, func() ([]*task.Task, error) { return d.mem.TenantHistory(ctx, tenantID, limit) })
}

// Timeline reads Redis, or memory when Redis is unreachable.
func (d *Dual) Timeline(ctx context.Context, tenantID, taskID string, limit int) ([]task.Event, error) {
	evs, err := d.r.Timeline(ctx, tenantID, taskID, limit)
	return fallback(d, evs, err, func() ([]task.Event, error) { return d.mem.Timeline(ctx, tenantID, taskID, limit) })
}
