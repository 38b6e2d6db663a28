package facade

import (
	"context"
	"errors"
	"fmt"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// HistoryLimitDefault is how many past tasks History returns by default.
const HistoryLimitDefault = 50

// ckptRef returns a copy of ck for a view, nil when no stage is done and
// nothing was ever saved.
func ckptRef(ck checkpoint.Checkpoint) *checkpoint.Checkpoint {
	if ck.IsEmpty() && ck.SavedAt.IsZero() {
		return nil
	}
	c := ck.Clone()
	return &c
}

// TaskByTenant returns the tenant's current task (the newest one created for
// it) with its checkpoint — seed 002's queryTaskStatusByTenant.
func (c *Coordinator) TaskByTenant(ctx context.Context, tenantID string) (TaskView, error) {
	if err := checkTenant(tenantID); err != nil {
		return TaskView{}, err
	}
	ctx, cancel := c.queryCtx(ctx)
	defer cancel()
	t, ck, err := c.store.TaskByTenant(ctx, tenantID)
	if err != nil {
		return TaskView{}, translate(err, "task of tenant "+tenantID)
	}
	v := c.taskView(t, ck, c.degradedOf(ctx))
	if t.Status == task.StatusRunning {
		// One more round trip, for running tasks only: when the lock frees
		// is what an operator waiting to retry an orphaned task needs.
		if info, err := c.locks.View(ctx, tenantID); err == nil && info.Held && info.Holder.TaskID == t.ID {
			at := c.now().Add(info.TTL).UTC()
			v.LockExpiresAt = &at
		}
	}
	return v, nil
}

// Task returns a task by id with its checkpoint.
func (c *Coordinator) Task(ctx context.Context, taskID string) (TaskView, error) {
	if !task.ValidID(taskID) {
		return TaskView{}, wrapf(ErrInvalid, "task id %s is not a task id", task.Quote(taskID))
	}
	return c.viewOf(ctx, taskID)
}

// Checkpoint returns the checkpoint of the tenant's current task.
func (c *Coordinator) Checkpoint(ctx context.Context, tenantID string) (checkpoint.Checkpoint, error) {
	v, err := c.TaskByTenant(ctx, tenantID)
	if err != nil {
		return checkpoint.Checkpoint{}, err
	}
	if v.Checkpoint == nil {
		return checkpoint.Checkpoint{}, wrapf(ErrNotFound, "task %s of tenant %s has no checkpoint", v.ID, tenantID)
	}
	return *v.Checkpoint, nil
}

// HasCheckpoint reports whether the tenant's current task has a checkpoint
// (seed 002's hasCheckpoint).
func (c *Coordinator) HasCheckpoint(ctx context.Context, tenantID string) (bool, error) {
	_, err := c.Checkpoint(ctx, tenantID)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// History returns the tenant's tasks, newest first (limit 0 = default).
func (c *Coordinator) History(ctx context.Context, tenantID string, limit int) ([]TaskView, error) {
	if err := checkTenant(tenantID); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = HistoryLimitDefault
	}
	if limit > plan.LimitMax {
		return nil, wrapf(ErrInvalid, "limit %d out of range 1..%d", limit, plan.LimitMax)
	}
	ctx, cancel := c.queryCtx(ctx)
	defer cancel()
	ts, err := c.store.TenantHistory(ctx, tenantID, limit)
	if err != nil {
		return nil, translate(err, "history of tenant "+tenantID)
	}
	degraded := c.degradedOf(ctx)
	if err := fromMemory(degraded, len(ts), "the history of tenant "+tenantID); err != nil {
		return nil, err
	}
	views := make([]TaskView, len(ts))
	for i, t := range ts {
		views[i] = c.taskView(t, nil, degraded)
	}
	return views, nil
}

// TimelineView is a task's timeline as queried.
type TimelineView struct {
	TenantID string
	TaskID   string
	Events   []task.Event
	Degraded bool
}

// Timeline returns the timeline of the tenant's current task, oldest first
// (limit 0 = the whole bounded timeline).
func (c *Coordinator) Timeline(ctx context.Context, tenantID string, limit int) (TimelineView, error) {
	if err := checkTenant(tenantID); err != nil {
		return TimelineView{}, err
	}
	if limit <= 0 || limit > task.MaxTimeline {
		limit = task.MaxTimeline
	}
	ctx, cancel := c.queryCtx(ctx)
	defer cancel()
	t, _, err := c.store.TaskByTenant(ctx, tenantID)
	if err != nil {
		return TimelineView{}, translate(err, "task of tenant "+tenantID)
	}
	evs, err := c.store.Timeline(ctx, tenantID, t.ID, limit)
	if err != nil {
		return TimelineView{}, translate(err, "timeline of task "+t.ID)
	}
	return TimelineView{TenantID: tenantID, TaskID: t.ID, Events: evs, Degraded: c.degradedOf(ctx)}, nil
}

// Lock returns who holds the tenant's lock, for how long, with which fence.
func (c *Coordinator) Lock(ctx context.Context, tenantID string) (tenantlock.Info, error) {
	if err := checkTenant(tenantID); err != nil {
		return tenantlock.Info{}, err
	}
	ctx, cancel := c.queryCtx(ctx)
	defer cancel()
	info, err := c.locks.View(ctx, tenantID)
	return info, translate(err, "lock")
}

// ReleaseLock deletes the tenant's lock if its fence is still expectedFence
// (break-glass) and records it in the holder task's timeline.
func (c *Coordinator) ReleaseLock(ctx context.Context, tenantID string, expectedFence int64, reason string, a Actor) (tenantlock.Info, error) {
	if err := checkTenant(tenantID); err != nil {
		return tenantlock.Info{}, err
	}
	if err := checkReason(reason); err != nil {
		return tenantlock.Info{}, err
	}
	if expectedFence <= 0 {
		return tenantlock.Info{}, wrapf(ErrInvalid, "expectedFence is required: read it with GET /v1/tenants/%s/lock", tenantID)
	}
	info, err := c.locks.ForceRelease(ctx, tenantID, expectedFence)
	if errors.Is(err, tenantlock.ErrNotHeld) {
		return tenantlock.Info{}, wrapf(ErrNotFound, "tenant %s holds no lock", tenantID)
	}
	var mm *tenantlock.MismatchError
	if errors.As(err, &mm) {
		return tenantlock.Info{}, &codedError{kind: ErrLockMismatch, cause: err, msg: fmt.Sprintf(
			"tenant %s: the lock's fence is %d, expectedFence given is %d: nothing released. If you typed it, check the digits; "+
				"if you read it earlier, the lock changed hands since (now held by %s for task %s): read it again with GET /v1/tenants/%s/lock",
			tenantID, mm.Current.Fence, expectedFence, orDash(mm.Current.Holder.Instance), orDash(mm.Current.Holder.TaskID), tenantID)}
	}
	if err != nil {
		return tenantlock.Info{}, translate(err, "lock")
	}
	c.log.Warn().Str("tenant_id", tenantID).Int64("fence", info.Fence).Str("holder_task", info.Holder.TaskID).
		Str("holder", info.Holder.Instance).Str("actor", a.Name).Str("reason", reason).Msg("tenant lock force-released")
	if info.Holder.TaskID != "" && task.ValidID(info.Holder.TaskID) {
		ev := a.event(task.EventLockReleased, c.now(), reason)
		ev.Fence, ev.Instance = info.Fence, c.cfg.Instance
		ev.Data = map[string]any{"holder": info.Holder.Instance, "planId": info.Holder.PlanID}
		if _, err := c.store.RequestTask(ctx, tenantID, info.Holder.TaskID, task.RequestNote, ev); err != nil && !errors.Is(err, task.ErrNotFound) {
			c.log.Warn().Err(err).Str("tenant_id", tenantID).Msg("record lock release in timeline")
		}
	}
	c.pub.publish(task.FeedEvent{Type: string(task.EventLockReleased), At: c.now().UTC(), PlanID: info.Holder.PlanID,
		TaskID: info.Holder.TaskID, TenantID: tenantID, Data: map[string]any{"fence": info.Fence, "holder": info.Holder.Instance,
			"reason": reason, "actor": actorName(a), "role": a.Role, "requestId": a.RequestID, "clientAddr": a.Addr}})
	return info, nil
}

// PauseTask asks the tenant's task to pause between two stages. A task that
// runs on this instance is told at once; one on another instance sees the
// request at its next stage boundary.
func (c *Coordinator) PauseTask(ctx context.Context, tenantID, reason string, a Actor) (TaskView, error) {
	return c.requestTask(ctx, tenantID, reason, a, task.RequestPause)
}

// CancelTask cancels the tenant's task: a PENDING or PAUSED task at once, a
// running one between two stages.
func (c *Coordinator) CancelTask(ctx context.Context, tenantID, reason string, a Actor) (TaskView, error) {
	return c.requestTask(ctx, tenantID, reason, a, task.RequestCancel)
}

func (c *Coordinator) requestTask(ctx context.Context, tenantID, reason string, a Actor, req task.Request) (TaskView, error) {
	if err := checkTenant(tenantID); err != nil {
		return TaskView{}, err
	}
	if err := checkReason(reason); err != nil {
		return TaskView{}, err
	}
	t, _, err := c.store.TaskByTenant(ctx, tenantID)
	if err != nil {
		return TaskView{}, translate(err, "task of tenant "+tenantID)
	}
	typ := task.EventPauseRequested
	if req == task.RequestCancel {
		typ = task.EventCancelRequested
	}
	ev := a.event(typ, c.now(), reason)
	ev.Instance = c.cfg.Instance
	switch {
	case t.Status == task.StatusCompleted:
		return TaskView{}, wrapf(ErrTaskCompleted, "task %s of tenant %s is completed", t.ID, tenantID)
	case req == task.RequestCancel && t.Status != task.StatusRunning:
		if t.Status == task.StatusCancelled {
			return c.viewOf(ctx, t.ID)
		}
		if t.Status == task.StatusFailed {
			return TaskView{}, wrapf(ErrInvalidState, "task %s of tenant %s already failed", t.ID, tenantID)
		}
		if err := c.cancelIdle(ctx, t, reason, ev); err != nil {
			return TaskView{}, err
		}
		return c.viewOf(ctx, t.ID)
	case req == task.RequestPause && t.Status != task.StatusRunning && t.Status != task.StatusPending:
		if t.Status == task.StatusPaused {
			return c.viewOf(ctx, t.ID)
		}
		return TaskView{}, wrapf(ErrInvalidState, "task %s of tenant %s is %s; only a running task pauses", t.ID, tenantID, t.Status)
	case t.Status == task.StatusRunning && c.orphaned(t):
		return TaskView{}, wrapf(ErrInvalidState, "task %s of tenant %s is orphaned (instance %s stopped heartbeating): retry it to take it over, or cancel it after retrying", t.ID, tenantID, t.Owner)
	}
	r := c.localRun(t.ID)
	if r != nil {
		if req == task.RequestCancel {
			r.requestCancel(reason)
		} else {
			r.requestPause(reason)
		}
	}
	stored, err := c.store.RequestTask(ctx, tenantID, t.ID, req, ev)
	if err != nil {
		return TaskView{}, translate(err, "task")
	}
	// The store takes a pause or cancel request on a RUNNING task only; a
	// run of this instance told above honours it whatever the store says
	// (a start whose RUNNING write has not landed yet).
	taken := (req == task.RequestPause && stored.PauseRequested) || (req == task.RequestCancel && stored.CancelRequested) || r != nil
	if !taken {
		if stored.Status == task.StatusPending {
			// Not started (a pending task is asked to pause; a cancel of
			// one is immediate, above): nothing was stored.
			return TaskView{}, wrapf(ErrTaskPending, "task %s of tenant %s has not started, so it cannot be paused: pause its plan, or cancel the task", t.ID, tenantID)
		}
		// It ended meanwhile: nothing was stored; the view says how it ended.
		return c.viewOf(ctx, t.ID)
	}
	c.publishTask(stored, ev)
	c.log.Info().Str("tenant_id", tenantID).Str("task_id", t.ID).Str("request", string(req)).Str("actor", ev.Actor).Str("reason", reason).Msg("task request stored")
	return c.viewOf(ctx, t.ID)
}

// cancelIdle cancels a task no instance runs (PENDING or PAUSED) with a
// write that applies only if nobody touched the task since it was read; if
// it started meanwhile, a cancel request is stored instead.
func (c *Coordinator) cancelIdle(ctx context.Context, t *task.Task, reason string, ev task.Event) error {
	prev := t.Status
	now := c.now()
	if err := t.Cancel(now, reason); err != nil {
		return translate(err, "task")
	}
	if ev.Type == "" {
		ev = task.Event{Type: task.EventCancelled, Instance: c.cfg.Instance}
	}
	ev.At, ev.Attempt = now.UTC(), t.Attempt
	done := task.Event{At: now.UTC(), Type: task.EventCancelled, Reason: reason, Attempt: t.Attempt, Instance: c.cfg.Instance}
	events := []task.Event{ev}
	if ev.Type != task.EventCancelled {
		events = append(events, done)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.WriteTimeout)
	defer cancel()
	res, err := c.writeTask(wctx, task.Write{
		Task: t, PrevStatus: prev, ExpectSeq: t.Seq, Guard: task.Guard{Fence: t.Fence}, Events: events, ClearRequests: true,
	})
	var refused *task.RefusedError
	if errors.As(err, &refused) && refused.Status == task.StatusRunning {
		_, err = c.store.RequestTask(wctx, t.TenantID, t.ID, task.RequestCancel, ev)
		if err == nil {
			c.publishTask(t, ev)
		}
	} else if err == nil {
		for _, e := range events {
			c.publishTask(t, e)
		}
		c.planStatusChanged(t.PlanID, res) // the plan's last task cancelled: it finished
	}
	if err != nil && !errors.As(err, &refused) {
		return translate(err, "task")
	}
	return nil
}
