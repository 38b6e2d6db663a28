package facade

import (
	"context"
	"fmt"
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// Store is the storage the coordinator needs. The repository package provides
// a Redis store, a memory store and the double-writing store that combines
// them. Errors other than the ones listed are storage failures; an error
// from an unreachable backend has a method Unavailable() bool that returns
// true (see IsUnavailable).
type Store interface {
	// CreatePlan stores a new plan and its PENDING tasks: records, the plan's
	// task list and counts, the tenants' index and history entries. Writes
	// are pipelined in batches.
	CreatePlan(ctx context.Context, p *plan.Plan, tasks []*task.Task) error
	// UpdatePlan writes p's status, reason, owner and times if the stored
	// status is one of from. Returns plan.ErrNotFound, or a
	// *plan.TransitionError naming the stored status when it is not in from.
	UpdatePlan(ctx context.Context, p *plan.Plan, from ...plan.Status) error
	// Plan returns a plan and its task counts in one round trip, whatever
	// the plan's size. Returns plan.ErrNotFound.
	Plan(ctx context.Context, planID string) (*plan.Plan, plan.Counts, error)
	// Plans lists plans, newest first, and the cursor of the next page ("" at the end).
	Plans(ctx context.Context, f plan.ListFilter) ([]*plan.Plan, string, error)
	// PlanCounts returns the task counts of up to plan.LimitMax plans in
	// one round trip; a plan without counts is absent.
	PlanCounts(ctx context.Context, planIDs []string) (map[string]plan.Counts, error)
	// PlanTasks lists a plan's tasks in plan order, and the cursor of the
	// next page ("" at the end). A page may hold fewer than f.Limit tasks
	// when a filter is set. Returns plan.ErrNotFound.
	PlanTasks(ctx context.Context, planID string, f plan.TaskFilter) ([]*task.Task, string, error)
	// RepairCounts recomputes a plan's counts from its task records.
	RepairCounts(ctx context.Context, planID string) (counts plan.Counts, statusChanged bool, err error)
	// SearchTasks returns the tasks f selects across plans, newest first,
	// and the cursor of the next page ("" at the end), from indexes kept by
	// the writes (never reading every task). A page may hold fewer than
	// f.Limit tasks when a filter the indexes cannot apply dropped some.
	SearchTasks(ctx context.Context, f plan.TaskSearch) ([]*task.Task, string, error)

	// WriteTask applies w atomically (one round trip). Returns a
	// *task.RefusedError (errors.Is task.ErrWriteRefused) when the guard,
	// fence or sequence check fails; nothing is written then. A result
	// with Seq > 0 and an error means the record was written but the
	// plan's counts did not move (the Redis stores: its move failed): the
	// write landed.
	WriteTask(ctx context.Context, w task.Write) (task.WriteResult, error)
	// RequestTask stores a cooperative request on a task (and appends ev to
	// its timeline) without the tenant lock, and returns the task as stored.
	// Pause and cancel requests are stored only on RUNNING tasks; otherwise
	// the task is returned unchanged. Returns task.ErrNotFound.
	RequestTask(ctx context.Context, tenantID, taskID string, r task.Request, ev task.Event) (*task.Task, error)
	// Beat refreshes a running task's heartbeat if g still holds its tenant
	// lock. Returns a *task.RefusedError otherwise.
	Beat(ctx context.Context, tenantID, taskID string, g task.Guard, now time.Time) error

	// TaskByTenant returns the tenant's current task and its checkpoint (nil
	// if none) in at most two round trips. Returns task.ErrNotFound.
	TaskByTenant(ctx context.Context, tenantID string) (*task.Task, *checkpoint.Checkpoint, error)
	// Task returns a task by id and its checkpoint (nil if none). Returns
	// task.ErrNotFound.
	Task(ctx context.Context, taskID string) (*task.Task, *checkpoint.Checkpoint, error)
	// TenantHistory returns up to limit of the tenant's tasks, newest first.
	TenantHistory(ctx context.Context, tenantID string, limit int) ([]*task.Task, error)
	// Timeline returns up to limit of the newest timeline entries of a task,
	// oldest first. Returns task.ErrNotFound.
	Timeline(ctx context.Context, tenantID, taskID string, limit int) ([]task.Event, error)
	// TasksByTenant returns the current tasks (and checkpoints) of up to
	// 1000 tenants in two round trips; tenants without a task are absent.
	TasksByTenant(ctx context.Context, tenantIDs []string) (map[string]*task.Task, map[string]*checkpoint.Checkpoint, error)
	// RunningByOwner returns how many of a plan's tasks each of owners runs.
	RunningByOwner(ctx context.Context, planID string, owners []string) (map[string]int, error)

	// RegisterInstance records this instance's heartbeat for ttl.
	RegisterInstance(ctx context.Context, inst task.Instance, ttl time.Duration) error
	// DeregisterInstance removes an instance's live record (clean shutdown).
	DeregisterInstance(ctx context.Context, id string) error
	// Instances lists the instances seen recently, newest first.
	Instances(ctx context.Context) ([]task.Instance, error)

	// PublishEvents appends events to the bounded feed (one round trip).
	PublishEvents(ctx context.Context, evs []task.FeedEvent) error
	// ReadEvents returns feed events after f.After (waiting up to wait for
	// one when there is none) and the cursor to continue from.
	ReadEvents(ctx context.Context, f task.FeedFilter, wait time.Duration) ([]task.FeedEvent, string, error)
}

// ServerWatcher reports the identity of the Redis server, to detect a
// restart or failover (its run id changes). Optional: a store that does not
// implement it gets no detection.
type ServerWatcher interface {
	ServerRunID(ctx context.Context) (string, error)
}

// Lease is one holding of a tenant lock, as a task run uses it: the lock
// value and fencing token its writes carry, the lease's deadline, and how it
// ends. It renews itself until it is released, forgotten or lost; every
// method is safe to call from any goroutine. A lease is lost in one of two
// ways: refused (an extension or re-acquisition was refused: the lock was
// force-released, holds another value, or another holder took a token since;
// gone for good) or lapsed (its deadline passed while the lock's store did
// not confirm an extension; Locker.Reacquire may take it back).
type Lease interface {
	// TenantID returns the locked tenant.
	TenantID() string
	// Value returns the lock value; fenced writes check it in Redis.
	Value() string
	// Fence returns the fencing token taken with the lock.
	Fence() int64
	// Deadline returns when the lease ends unless renewed (local clock,
	// clock drift allowed for).
	Deadline() time.Time
	// Confirmed returns when the lock's store last confirmed the lease (its
	// acquisition, re-acquisition or latest extension).
	Confirmed() time.Time
	// Local reports whether the lease is an in-process lock
	// (single-instance mode): no lock key exists in Redis, so fenced writes
	// carry an empty lock value (the fence and sequence checks still apply).
	Local() bool
	// Refused reports whether the lease was lost because an extension was
	// refused, rather than because its deadline passed; Err then matches
	// tenantlock.ErrLeaseRefused. False while the lease is not lost.
	Refused() bool
	// Check returns nil while the lease is valid for at least margin more.
	// Returns an error matching tenantlock.ErrLeaseLost otherwise — after
	// Release or Forget too — and also tenantlock.ErrLeaseRefused (a
	// *tenantlock.RefusedError) when it was lost by a refusal.
	Check(margin time.Duration) error
	// Err returns why the lease was lost, nil before: an error matching
	// tenantlock.ErrLeaseLost, and also tenantlock.ErrLeaseRefused (a
	// *tenantlock.RefusedError) when an extension was refused.
	Err() error
	// OnLost calls f with Err's value the moment the lease is lost (at once
	// if it is lost already), unless stop was called first; f must not call
	// the lease. Release, Forget and a replacing Reacquire are not losses.
	OnLost(f func(cause error)) (stop func())
	// Release stops renewal and deletes the lock if it still holds Value.
	// Returns nil when the lock is deleted or already gone, an error
	// matching tenantlock.ErrLeaseLost when it holds another holder's value
	// (left in place), and a storage failure (see IsUnavailable) or a
	// context error when the store did not answer; Release may be called
	// again then. After a nil return, Forget or a replacing Reacquire it
	// does nothing.
	Release(ctx context.Context) error
	// Forget stops renewal without deleting the lock: the task's last write
	// deleted it (task.Write.ReleaseLock). An in-process lease also frees
	// its lock. Safe to call at any time, more than once.
	Forget()
}

// Locker takes and inspects tenant locks (package tenantlock/redislock: New
// on Redis, NewLocal in process). One lock per tenant; a lease renews itself
// until it is released or lost. L is the locker's own lease type
// (*redislock.Lease): Go has no covariant results, so New takes a Locker of
// any lease type and uses it as a Locker[Lease].
type Locker[L Lease] interface {
	// Acquire takes the tenant's lock for holder, with a new fencing token.
	// Returns a *tenantlock.LockedError (errors.Is tenantlock.ErrLocked)
	// naming the holder when the lock is held.
	Acquire(ctx context.Context, tenantID string, holder tenantlock.Holder) (L, error)
	// View returns who holds the tenant's lock, for how long, with which fence.
	View(ctx context.Context, tenantID string) (tenantlock.Info, error)
	// ForceRelease deletes the tenant's lock if its fence is still
	// expectedFence (break-glass). Returns tenantlock.ErrNotHeld, or a
	// *tenantlock.MismatchError (errors.Is tenantlock.ErrFenceMismatch).
	ForceRelease(ctx context.Context, tenantID string, expectedFence int64) (tenantlock.Info, error)
	// Reacquire takes the lock again with the lease's value and fence if it
	// is still ours or nobody took it since the lease lapsed, and returns
	// the new lease (the old one is retired). Returns an error matching
	// tenantlock.ErrLeaseRefused otherwise.
	Reacquire(ctx context.Context, lease L) (L, error)
}

// leases is a Locker[L] as a Locker[Lease], the form the coordinator uses.
type leases[L Lease] struct{ locks Locker[L] }

func (l leases[L]) Acquire(ctx context.Context, tenantID string, holder tenantlock.Holder) (Lease, error) {
	lease, err := l.locks.Acquire(ctx, tenantID, holder)
	if err != nil {
		return nil, err // not a Lease holding a nil L
	}
	return lease, nil
}

func (l leases[L]) View(ctx context.Context, tenantID string) (tenantlock.Info, error) {
	return l.locks.View(ctx, tenantID)
}

func (l leases[L]) ForceRelease(ctx context.Context, tenantID string, expectedFence int64) (tenantlock.Info, error) {
	return l.locks.ForceRelease(ctx, tenantID, expectedFence)
}

func (l leases[L]) Reacquire(ctx context.Context, lease Lease) (Lease, error) {
	own, ok := lease.(L)
	if !ok {
		// Every lease the coordinator holds came from this Locker.
		return nil, fmt.Errorf("%w: reacquire: a %T is not a lease of this Locker", tenantlock.ErrInvalid, lease)
	}
	next, err := l.locks.Reacquire(ctx, own)
	if err != nil {
		return nil, err
	}
	return next, nil
}

// Clock returns the current time. Tests inject their own.
type Clock func() time.Time
