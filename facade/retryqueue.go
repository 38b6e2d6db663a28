package facade

import (
	"context"
	"errors"
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// queuesReruns reports whether retries and resumes of a plan's tasks go
// through the plan's shared work queue (shared mode) rather than starting
// at once on the instance asked: there they run under the plan's
// maxConcurrency, a permit each, whoever claims them.
func (c *Coordinator) queuesReruns() bool { return c.queue != nil }

// queueRerun is rerun for shared mode: under the tenant lock it moves the
// task back to PENDING — the new attempt, the checkpoint the retry chose
// and the timeline entry in one fenced write that also deletes the lock —
// and queues it on the plan's shared queue; whoever claims it starts it
// from its checkpoint under a permit. A finished plan goes back to RUNNING
// with the write. Returns the task as written.
func (c *Coordinator) queueRerun(ctx context.Context, t *task.Task, p *plan.Plan, stages []stage.Runnable, rs rerunSpec) (*task.Task, *checkpoint.Checkpoint, error) {
	q, err := c.prepareRequeue(ctx, t, p, stages, rs)
	if err != nil {
		return nil, nil, err
	}
	if err := c.commitRequeue(ctx, q, p); err != nil {
		return nil, nil, err
	}
	if err := c.queueWork(ctx, p, stages, []planItem{{t: q.fresh, mode: itemStart}}); err != nil {
		// The task is PENDING and not queued: the plan's repair (resume,
		// or the counts repair) queues it again.
		c.log.Error().Err(err).Str("task_id", t.ID).Str("plan_id", p.ID).Msg("task queued again as PENDING but could not be pushed on the plan's queue; resume the plan to queue it")
	}
	return q.fresh, &q.base, nil
}

// requeue is queueRerun's write, prepared under the tenant lock and not
// sent yet (a bulk retry prepares many at once, then sends them one by
// one, each after its check of the plan).
type requeue struct {
	t, fresh *task.Task
	lease    Lease
	w        task.Write
	base     checkpoint.Checkpoint
}

// prepareRequeue takes the tenant lock for t, reads the task again under
// it and prepares the write that moves it back to PENDING. The caller
// commits it (commitRequeue) or releases q.lease.
func (c *Coordinator) prepareRequeue(ctx context.Context, t *task.Task, p *plan.Plan, stages []stage.Runnable, rs rerunSpec) (*requeue, error) {
	lease, err := c.lockFor(ctx, t)
	if err != nil {
		return nil, err
	}
	fresh, ck, err := c.store.Task(ctx, t.ID)
	if err != nil {
		c.releaseQuietly(lease)
		return nil, translate(err, "task "+t.ID)
	}
	return c.requeueLocked(t, fresh, ck, lease, p, stages, rs)
}

// lockFor takes the tenant lock for a re-run of t.
func (c *Coordinator) lockFor(ctx context.Context, t *task.Task) (Lease, error) {
	holder := tenantlock.Holder{PlanID: t.PlanID, TaskID: t.ID, Instance: c.cfg.Instance}
	lease, err := c.locks.Acquire(ctx, t.TenantID, holder)
	var stale *tenantlock.LockedError
	if errors.As(err, &stale) && c.freeOwnStaleLock(t, stale) {
		lease, err = c.locks.Acquire(ctx, t.TenantID, holder)
	}
	if err != nil {
		return nil, c.lockRefusal(t, err)
	}
	return lease, nil
}

// requeueLocked is prepareRequeue once the lock is held and the task read
// again under it (fresh, its checkpoint ck); it releases the lock if it
// fails.
func (c *Coordinator) requeueLocked(t, fresh *task.Task, ck *checkpoint.Checkpoint, lease Lease, p *plan.Plan, stages []stage.Runnable, rs rerunSpec) (*requeue, error) {
	if err := c.checkFresh(t, fresh, rs); err != nil {
		c.releaseQuietly(lease)
		return nil, err
	}
	base := checkpoint.Empty()
	if ck != nil {
		base = *ck
	}
	from := rs.from
	if from < 0 {
		from = min(base.NextStageIndex(), len(stages))
	}
	prev := fresh.Status
	now := c.now()
	if err := fresh.Requeue(now, lease.Fence(), from, stageAt(p.StageNames(), from), rs.mode); err != nil {
		c.releaseQuietly(lease)
		return nil, translate(err, "task")
	}
	var write *checkpoint.Checkpoint
	if rs.ckpt != nil && !rs.deleteCkpt {
		stamped := rs.ckpt.Stamp(now, fresh.Attempt, lease.Fence())
		write, base = &stamped, stamped
	} else if rs.deleteCkpt {
		base = checkpoint.Empty()
	}
	ev := rs.event
	ev.Fence = lease.Fence()
	ev.Attempt = fresh.Attempt // the attempt it queues, as a run's events carry theirs
	if ev.At.IsZero() {
		ev.At = now.UTC()
	}
	if ev.Data == nil {
		ev.Data = map[string]any{}
	}
	ev.Data["queued"] = true
	w := task.Write{Task: fresh, PrevStatus: prev, ExpectSeq: fresh.Seq, Guard: guardOf(lease), Checkpoint: write,
		DeleteCheckpoint: rs.deleteCkpt, Events: []task.Event{ev}, ClearRequests: true, ReleaseLock: true, ID: task.NewWriteID(),
		// The task must still be the tenant's current one when the write
		// lands, not only when it was read: a bulk retry writes a chunk's
		// tenants one after the other, long after it read them.
		Current: true}
	return &requeue{t: t, fresh: fresh, lease: lease, w: w, base: base}, nil
}

// commitRequeue sends q's write (releasing the lock if it fails) and
// publishes it; p's status becomes the plan's status after the write.
func (c *Coordinator) commitRequeue(ctx context.Context, q *requeue, p *plan.Plan) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.WriteTimeout)
	res, err := c.writeTask(wctx, q.w)
	cancel()
	if err != nil {
		c.releaseQuietly(q.lease)
		var refused *task.RefusedError
		if errors.As(err, &refused) && refused.Reason == task.RefusedCurrent {
			return wrapf(ErrInvalidState, "task %s is no longer the current task of tenant %s: a newer plan's task is; retry that one instead",
				q.t.ID, q.t.TenantID)
		}
		if errors.As(err, &refused) {
			return wrapf(ErrInvalidState, "task %s of tenant %s changed meanwhile; read it again", q.t.ID, q.t.TenantID)
		}
		return translate(err, "task")
	}
	q.lease.Forget() // the write deleted the lock
	q.fresh.Seq = res.Seq
	// On the feed as a run's writes are: the timeline entry, and the plan
	// going back to RUNNING if it had finished.
	c.publishWrite(q.fresh, q.w.PrevStatus, q.w.Events)
	c.planStatusChanged(p.ID, res)
	if res.PlanStatus != "" {
		p.Status = plan.Status(res.PlanStatus)
	}
	return nil
}

// lockRefusal translates a failed Acquire of a re-run.
func (c *Coordinator) lockRefusal(t *task.Task, err error) error {
	var locked *tenantlock.LockedError
	if !errors.As(err, &locked) {
		return translate(err, "tenant lock")
	}
	c.obs.LockConflict()
	if locked.Holder.TaskID == t.ID {
		if alive, known := c.ownerAlive(locked.Holder.Instance); alive && known {
			// A live instance holds it: it runs the task, or is retrying it
			// right now (two retries at once). Breaking its lock is not the
			// way; reading the task again is.
			return wrapf(ErrTaskRunning, "task %s of tenant %s is being run or retried by instance %s, which is alive (lock fence %d); read the task again",
				t.ID, t.TenantID, locked.Holder.Instance, locked.Fence)
		}
		return wrapf(ErrTaskRunning, "task %s of tenant %s still holds its lease on instance %s for %s (fence %d); wait for it to expire or release it with DELETE /v1/tenants/%s/lock",
			t.ID, t.TenantID, locked.Holder.Instance, locked.TTL.Round(time.Millisecond), locked.Fence, t.TenantID)
	}
	return translate(err, "tenant lock")
}

// checkFresh makes sure the task read again under the lock is still what
// the decision to re-run it was based on.
func (c *Coordinator) checkFresh(t, fresh *task.Task, rs rerunSpec) error {
	if rs.expectSeq < 0 || fresh.Seq == rs.expectSeq {
		return nil
	}
	if fresh.Attempt != t.Attempt {
		return wrapf(ErrAttemptMismatch, "task %s of tenant %s moved to attempt %d meanwhile", t.ID, t.TenantID, fresh.Attempt)
	}
	if err := c.retriable(fresh, 0); err != nil {
		return err
	}
	return wrapf(ErrInvalidState, "task %s of tenant %s changed meanwhile (now %s); read it again", t.ID, t.TenantID, fresh.Status)
}

// queuedCheckpoint returns the checkpoint a PENDING task starts from and
// the stage index after it: empty and 0 for a task never started, the
// stored one for a task a retry or resume queued again (one more round
// trip, for those only).
func (c *Coordinator) queuedCheckpoint(t *task.Task, stages int) (checkpoint.Checkpoint, int, error) {
	if t.Attempt == 0 {
		return checkpoint.Empty(), 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.WriteTimeout)
	defer cancel()
	_, ck, err := c.store.Task(ctx, t.ID)
	if err != nil {
		return checkpoint.Checkpoint{}, 0, err
	}
	if ck == nil {
		return checkpoint.Empty(), 0, nil
	}
	return *ck, min(ck.NextStageIndex(), stages), nil
}
