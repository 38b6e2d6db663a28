package repository

import (
	"context"
	"time"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// The shared work queue lives in Redis only: an instance that cannot reach
// Redis claims no work (the other instances go on), so the Dual store
// passes every queue call to its Redis half.

// PushQueue queues entries in Redis (see Redis.PushQueue).
func (d *Dual) PushQueue(ctx context.Context, planID string, es []plan.QueueEntry, front bool) error {
	err := d.r.PushQueue(ctx, planID, es, front)
	d.observe(err)
	return err
}

// ClaimTasks claims in Redis (see Redis.ClaimTasks).
func (d *Dual) ClaimTasks(ctx context.Context, planID string, release []plan.QueueEntry, lease time.Duration, want int) (plan.Claim, error) {
	c, err := d.r.ClaimTasks(ctx, planID, release, lease, want)
	d.observe(err)
	return c, err
}

// RenewPermits renews in Redis (see Redis.RenewPermits).
func (d *Dual) RenewPermits(ctx context.Context, planID string, es []plan.QueueEntry, lease time.Duration) (int, error) {
	n, err := d.r.RenewPermits(ctx, planID, es, lease)
	d.observe(err)
	return n, err
}

// ReleasePermits frees permits in Redis (see Redis.ReleasePermits).
func (d *Dual) ReleasePermits(ctx context.Context, planID string, es []plan.QueueEntry) error {
	err := d.r.ReleasePermits(ctx, planID, es)
	d.observe(err)
	return err
}

// DropQueue drops the queue in Redis (see Redis.DropQueue).
func (d *Dual) DropQueue(ctx context.Context, planID string) error {
	err := d.r.DropQueue(ctx, planID)
	d.observe(err)
	return err
}

// QueueEntries reads the queue in Redis (see Redis.QueueEntries).
func (d *Dual) QueueEntries(ctx context.Context, planID string) (queued, held []plan.QueueEntry, err error) {
	q, h, err := d.r.QueueEntries(ctx, planID)
	d.observe(err)
	return q, h, err
}

// ActiveQueues reads Redis (see Redis.ActiveQueues).
func (d *Dual) ActiveQueues(ctx context.Context) ([]plan.QueueState, error) {
	qs, err := d.r.ActiveQueues(ctx)
	d.observe(err)
	return qs, err
}

// QueuedTask reads Redis (see Redis.QueuedTask) — except for the start entry
// of a task this store created and never wrote since (Memory.FreshTask),
// answered from memory without a round trip: it is PENDING with seq 0 as
// created, unless another instance wrote it in Redis meanwhile, and then
// the start's write, which expects seq 0, is refused and memory lets the
// task go (WriteTask), so the entry, queued again, is read from Redis.
// Not in single-instance mode, which has no shared queues.
func (d *Dual) QueuedTask(ctx context.Context, e plan.QueueEntry) (*task.Task, error) {
	if t := d.CreatedQueuedTask(e); t != nil {
		return t, nil
	}
	t, err := d.r.QueuedTask(ctx, e)
	d.observe(err)
	return t, err
}

// CreatedQueuedTask is QueuedTask's answer from memory (the start entry of
// a task this store created and never wrote since), or nil when Redis has
// to answer: a caller that tries it first needs no deadline for it.
func (d *Dual) CreatedQueuedTask(e plan.QueueEntry) *task.Task {
	if e.Kind != plan.QueueStart || d.cfg.SingleInstance || e.Check() != nil {
		return nil
	}
	if t := d.mem.FreshTask(e.TaskID, ""); t != nil && t.TenantID == e.TenantID && t.Status == task.StatusPending {
		return t
	}
	return nil
}
