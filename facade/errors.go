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

// Errors returned by the coordinator. Every error a use case returns matches
// (errors.Is) at most one of these; package httpapi maps them to statuses and
// stable codes in one table. The error's message is the detail shown to the
// caller.
var (
	// ErrInvalid: malformed or disallowed input (400 INVALID_ARGUMENT).
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound: no such plan, task, tenant or checkpoint (404 NOT_FOUND).
	ErrNotFound = errors.New("not found")
	// ErrTaskRunning: the task runs on a live instance (409 TASK_RUNNING).
	ErrTaskRunning = errors.New("task is running")
	// ErrTaskCompleted: the task already completed (409 TASK_COMPLETED).
	ErrTaskCompleted = errors.New("task is completed")
	// ErrTaskPending: the task has not started yet (409 TASK_PENDING).
	ErrTaskPending = errors.New("task has not started")
	// ErrAttemptMismatch: expectedAttempt is not the task's attempt (409 ATTEMPT_MISMATCH).
	ErrAttemptMismatch = errors.New("attempt mismatch")
	// ErrPlanFinished: the plan is finished (409 PLAN_FINISHED).
	ErrPlanFinished = errors.New("plan is finished")
	// ErrInvalidState: the move is not allowed from the current status (409 INVALID_STATE).
	ErrInvalidState = errors.New("not allowed in the current state")
	// ErrLockMismatch: the lock's fence is not the expected one (409 LOCK_MISMATCH).
	ErrLockMismatch = errors.New("lock mismatch")
	// ErrTenantLocked: another task holds the tenant's lock (409 TENANT_LOCKED).
	ErrTenantLocked = errors.New("tenant is locked")
	// ErrUnavailable: Redis is unreachable and the answer cannot come from
	// memory (503 UNAVAILABLE).
	ErrUnavailable = errors.New("storage unavailable")
	// ErrShuttingDown: the instance is shutting down and takes no new work
	// (503 UNAVAILABLE).
	ErrShuttingDown = errors.New("instance is shutting down")
)

// IsUnavailable reports whether err comes from an unreachable backend: it has
// a method Unavailable() bool that returns true (repository and redislock
// errors do), or it is ErrUnavailable.
func IsUnavailable(err error) bool {
	if errors.Is(err, ErrUnavailable) {
		return true
	}
	var u interface{ Unavailable() bool }
	return errors.As(err, &u) && u.Unavailable()
}

// IsMalformed reports whether err is about a stored record that cannot be
// read — a field that does not decode, left by a hand edit or a bug: it has
// a method Malformed() bool that returns true (repository errors do). Its
// message names the key and the field; the record stays as it is until
// someone fixes it (docs/operations.md, "A malformed record").
func IsMalformed(err error) bool {
	var m interface{ Malformed() bool }
	return errors.As(err, &m) && m.Malformed()
}

// wrapf returns an error matching kind whose message is the formatted detail.
func wrapf(kind error, format string, args ...any) error {
	return &codedError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

type codedError struct {
	kind  error
	msg   string
	cause error
}

func (e *codedError) Error() string { return e.msg }

func (e *codedError) Is(target error) bool { return target == e.kind }

func (e *codedError) Unwrap() error { return e.cause }

// translate turns an error from a store, the lock or the domain into one of
// the facade's errors (errors already translated pass through). what names
// the thing looked up, for not-found messages.
func translate(err error, what string) error {
	if err == nil {
		return nil
	}
	var ce *codedError
	if errors.As(err, &ce) {
		return err
	}
	switch {
	case IsUnavailable(err):
		return &codedError{kind: ErrUnavailable, msg: "storage unavailable: " + err.Error(), cause: err}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, task.ErrNotFound), errors.Is(err, plan.ErrNotFound), errors.Is(err, checkpoint.ErrNotFound):
		return &codedError{kind: ErrNotFound, msg: what + " not found", cause: err}
	case errors.Is(err, plan.ErrInvalid), errors.Is(err, task.ErrInvalid):
		return &codedError{kind: ErrInvalid, msg: err.Error(), cause: err}
	case errors.Is(err, tenantlock.ErrLocked):
		return &codedError{kind: ErrTenantLocked, msg: err.Error(), cause: err}
	case errors.Is(err, tenantlock.ErrFenceMismatch):
		return &codedError{kind: ErrLockMismatch, msg: err.Error(), cause: err}
	case errors.Is(err, plan.ErrIllegalTransition), errors.Is(err, task.ErrIllegalTransition):
		return &codedError{kind: ErrInvalidState, msg: err.Error(), cause: err}
	}
	return err
}

// fromMemory refuses an empty list answered from memory (degraded): memory
// holds only what this instance runs, so "nothing" from it says nothing of
// the plans, tasks or tenants other instances run. A list with items is
// answered with each item marked degraded; an empty one is ErrUnavailable
// rather than a 200 that looks complete.
func fromMemory(degraded bool, n int, what string) error {
	if !degraded || n > 0 {
		return nil
	}
	return wrapf(ErrUnavailable, "redis is not answering and this instance holds none of %s in memory; "+
		"an empty answer would not mean there are none: try again when redis answers", what)
}

// orDash is s, or "-" when it is empty (an unknown holder in a message).
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
