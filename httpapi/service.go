package httpapi

import (
	"context"
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// Service is what the HTTP API needs from the coordinator; *facade.Coordinator
// implements it. Every method returns errors matching (errors.Is) at most one
// of the facade sentinels (facade.ErrInvalid, facade.ErrNotFound, ...), which
// the API maps to statuses and codes in one table (errors.go); anything else
// is answered 500 INTERNAL.
type Service interface {
	// CreatePlan stores a plan from spec and, unless spec.Start is false,
	// starts it. Returns ErrInvalid, ErrShuttingDown, ErrUnavailable.
	CreatePlan(ctx context.Context, spec plan.Spec, a facade.Actor) (facade.PlanView, error)
	// StartPlan starts a CREATED plan. Returns ErrInvalid, ErrNotFound,
	// ErrPlanFinished, ErrInvalidState, ErrUnavailable.
	StartPlan(ctx context.Context, planID, reason string, a facade.Actor) (facade.PlanView, error)
	// PausePlan pauses a RUNNING plan. Returns ErrInvalid, ErrNotFound,
	// ErrPlanFinished, ErrInvalidState, ErrUnavailable.
	PausePlan(ctx context.Context, planID, reason string, a facade.Actor) (facade.PlanView, error)
	// ResumePlan resumes a PAUSED plan or takes over a RUNNING one. Returns
	// ErrInvalid, ErrNotFound, ErrPlanFinished, ErrInvalidState,
	// ErrShuttingDown, ErrUnavailable.
	ResumePlan(ctx context.Context, planID string, o facade.ResumeOptions, a facade.Actor) (facade.PlanView, error)
	// CancelPlan cancels a plan. Returns ErrInvalid, ErrNotFound,
	// ErrPlanFinished, ErrInvalidState, ErrUnavailable.
	CancelPlan(ctx context.Context, planID, reason string, a facade.Actor) (facade.PlanView, error)
	// RepairCounts recomputes a plan's counts from its task records.
	// Returns ErrInvalid, ErrNotFound, ErrUnavailable.
	RepairCounts(ctx context.Context, planID, reason string, a facade.Actor) (facade.PlanView, error)
	// Plan returns a plan with its counts. Returns ErrInvalid, ErrNotFound,
	// ErrUnavailable.
	Plan(ctx context.Context, planID string) (facade.PlanView, error)
	// Plans lists plans, newest first. Returns ErrInvalid, ErrUnavailable.
	Plans(ctx context.Context, f plan.ListFilter) ([]facade.PlanView, string, error)
	// PlanTasks lists a plan's tasks. Returns ErrInvalid, ErrNotFound,
	// ErrUnavailable.
	PlanTasks(ctx context.Context, planID string, f plan.TaskFilter) ([]facade.TaskView, string, error)

	// TaskByTenant returns the tenant's current task. Returns ErrInvalid,
	// ErrNotFound, ErrUnavailable.
	TaskByTenant(ctx context.Context, tenantID string) (facade.TaskView, error)
	// TasksByTenant returns the current tasks of up to 1000 tenants in a
	// bounded number of round trips; tenants without a task are absent.
	// Returns ErrInvalid, ErrUnavailable.
	TasksByTenant(ctx context.Context, tenantIDs []string) (map[string]facade.TaskView, error)
	// Task returns a task by id. Returns ErrInvalid, ErrNotFound, ErrUnavailable.
	Task(ctx context.Context, taskID string) (facade.TaskView, error)
	// Checkpoint returns the checkpoint of the tenant's current task.
	// Returns ErrInvalid, ErrNotFound, ErrUnavailable.
	Checkpoint(ctx context.Context, tenantID string) (checkpoint.Checkpoint, error)
	// HasCheckpoint reports whether the tenant's current task has a
	// checkpoint. Returns ErrInvalid, ErrUnavailable.
	HasCheckpoint(ctx context.Context, tenantID string) (bool, error)
	// History returns the tenant's tasks, newest first. Returns ErrInvalid,
	// ErrUnavailable.
	History(ctx context.Context, tenantID string, limit int) ([]facade.TaskView, error)
	// Timeline returns the timeline of the tenant's current task, oldest
	// first. Returns ErrInvalid, ErrNotFound, ErrUnavailable.
	Timeline(ctx context.Context, tenantID string, limit int) (facade.TimelineView, error)
	// Lock returns the tenant lock. Returns ErrInvalid, ErrUnavailable.
	Lock(ctx context.Context, tenantID string) (tenantlock.Info, error)
	// ReleaseLock force-releases the tenant lock if its fence is
	// expectedFence. Returns ErrInvalid, ErrNotFound, ErrLockMismatch,
	// ErrUnavailable.
	ReleaseLock(ctx context.Context, tenantID string, expectedFence int64, reason string, a facade.Actor) (tenantlock.Info, error)
	// Retry re-runs the tenant's current task. Returns ErrInvalid,
	// ErrNotFound, ErrTaskRunning, ErrTaskCompleted, ErrTaskPending,
	// ErrAttemptMismatch, ErrInvalidState, ErrTenantLocked, ErrShuttingDown,
	// ErrUnavailable.
	Retry(ctx context.Context, tenantID string, req facade.RetryRequest, a facade.Actor) (facade.RetryResult, error)
	// PauseTask asks the tenant's task to pause. Returns ErrInvalid,
	// ErrNotFound, ErrTaskCompleted, ErrInvalidState, ErrUnavailable.
	PauseTask(ctx context.Context, tenantID, reason string, a facade.Actor) (facade.TaskView, error)
	// ResumeTask resumes the tenant's paused task. Returns ErrInvalid,
	// ErrNotFound, ErrInvalidState, ErrTaskRunning, ErrTenantLocked,
	// ErrShuttingDown, ErrUnavailable.
	ResumeTask(ctx context.Context, tenantID, reason string, a facade.Actor) (facade.TaskView, error)
	// CancelTask cancels the tenant's task. Returns ErrInvalid, ErrNotFound,
	// ErrTaskCompleted, ErrInvalidState, ErrUnavailable.
	CancelTask(ctx context.Context, tenantID, reason string, a facade.Actor) (facade.TaskView, error)

	// Events returns up to f.Limit feed events after the cursor f.After,
	// oldest first, waiting up to wait for one when there is none, and the
	// cursor to continue from. Returns ErrInvalid, ErrUnavailable (the feed
	// lives in Redis only).
	Events(ctx context.Context, f task.FeedFilter, wait time.Duration) ([]task.FeedEvent, string, error)
	// Instances lists the coordinator instances seen recently, newest
	// first. Returns ErrUnavailable.
	Instances(ctx context.Context) ([]facade.InstanceView, error)
	// RecordRefusal records an operator action that was refused or failed
	// in the event feed (operator.refused). It never blocks.
	RecordRefusal(r facade.Refusal)
}
