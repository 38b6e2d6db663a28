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

// QueuedTask reads Redis (see Redis.QueuedTask).
func (d *Dual) QueuedTask(ctx context.Context, e plan.QueueEntry) (*task.Task, error) {
	t, err := d.r.QueuedTask(ctx, e)
	d.observe(err)
	return t, err
}
