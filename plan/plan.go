// Package plan holds the Plan aggregate — a rollout of one pipeline of stages
// to many tenants, one task per tenant — with its status machine, progress
// counts and the validation of a plan spec.
//
//	CREATED ──start──► RUNNING ◄──resume── PAUSED
//	   │                │  │ └──pause / failure threshold──►│
//	   │                │  └─► COMPLETED | FAILED ◄──────────┘ (no active task left)
//	   └──cancel──► CANCELLED ◄──cancel── RUNNING, PAUSED
//
// A finished plan (COMPLETED, FAILED, CANCELLED) goes back to RUNNING when a
// person re-runs one of its tasks (never because a task it was already running
// moves), and finishes again when that task does. The failure threshold
// pauses a RUNNING plan on each new failure beyond it; a resumed plan runs on
// until the next one. See Derive.
package plan

import (
	"errors"
	"fmt"
	"time"

	"github.com/deploycoord/deploycoord/task"
)

// Status is where a plan is in its life.
type Status string

const (
	// StatusCreated: stored, not started (created with "start": false).
	StatusCreated Status = "CREATED"
	// StatusRunning: its owner instance starts its pending tasks.
	StatusRunning Status = "RUNNING"
	// StatusPaused: no new task starts; running tasks pause between stages.
	StatusPaused Status = "PAUSED"
	// StatusCompleted: every task completed.
	StatusCompleted Status = "COMPLETED"
	// StatusFailed: no task is active and at least one did not complete.
	StatusFailed Status = "FAILED"
	// StatusCancelled: cancelled by a person.
	StatusCancelled Status = "CANCELLED"
)

// Statuses lists every plan status.
var Statuses = []Status{StatusCreated, StatusRunning, StatusPaused, StatusCompleted, StatusFailed, StatusCancelled}

// Finished reports whether s is COMPLETED, FAILED or CANCELLED.
func (s Status) Finished() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Valid reports whether s is one of Statuses.
func (s Status) Valid() bool {
	_, ok := transitions[s]
	return ok
}

var transitions = map[Status][]Status{
	StatusCreated:   {StatusRunning, StatusCancelled},
	StatusRunning:   {StatusPaused, StatusCancelled, StatusCompleted, StatusFailed},
	StatusPaused:    {StatusRunning, StatusCancelled, StatusCompleted, StatusFailed},
	StatusCompleted: {StatusRunning},
	StatusFailed:    {StatusRunning},
	StatusCancelled: {StatusRunning},
}

// CanTransition reports whether the status machine allows from → to.
func CanTransition(from, to Status) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

var (
	// ErrIllegalTransition is matched by every *TransitionError.
	ErrIllegalTransition = errors.New("plan: illegal status transition")
	// ErrNotFound is returned by stores when no such plan exists.
	ErrNotFound = errors.New("plan: not found")
	// ErrInvalid is wrapped by every validation error of a plan spec.
	ErrInvalid = errors.New("plan: invalid")
)

// TransitionError is returned when a move is not allowed from the current status.
type TransitionError struct {
	PlanID   string
	From, To Status
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("plan %s: cannot go from %s to %s", e.PlanID, e.From, e.To)
}

// Is makes errors.Is(err, ErrIllegalTransition) match.
func (e *TransitionError) Is(target error) bool { return target == ErrIllegalTransition }

// LockPolicy says what a task does when its tenant's lock is held elsewhere.
type LockPolicy string

const (
	// LockFail fails the task at once with TENANT_LOCKED naming the holder.
	LockFail LockPolicy = "fail"
	// LockWait waits for the lock up to the plan's LockWait, then fails.
	LockWait LockPolicy = "wait"
)

// ReasonFailureThreshold is the Reason of a plan paused by its failure threshold.
const ReasonFailureThreshold = "failure threshold exceeded"

// Plan is a rollout of one pipeline to many tenants.
type Plan struct {
	ID     string
	Name   string
	Status Status
	// Reason says why the plan is paused, cancelled or failed.
	Reason string
	// Pipeline names the operator-defined pipeline the stages came from
	// ("" for inline stages).
	Pipeline string
	Stages   []task.StageSpec
	// Params are the defaults for every tenant's params.
	Params         map[string]any
	MaxConcurrency int
	OnTenantLocked LockPolicy
	LockWait       time.Duration
	// MaxFailed pauses the plan when more tasks than this have failed; 0
	// means no threshold.
	MaxFailed int
	// Owner is the instance that starts the plan's tasks.
	Owner      string
	TotalTasks int
	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
	UpdatedAt  time.Time
	// CancelledAt is when the plan was last cancelled; a retry that reopens
	// it keeps it (a bulk retry that began before it stops: facade).
	CancelledAt time.Time
}

// NewID returns a new time-ordered plan id: "plan-" and a ULID.
func NewID(now time.Time) string { return "plan-" + task.ULID(now) }

// ValidID reports whether id has the form of an id made by NewID:
// ^plan-[0-9A-HJKMNP-TV-Z]{26}$.
func ValidID(id string) bool { return task.ValidULIDID(id, "plan-") }

// StageNames returns the names of the plan's stages in order.
func (p *Plan) StageNames() []string {
	names := make([]string, len(p.Stages))
	for i, s := range p.Stages {
		names[i] = s.Name
	}
	return names
}

// StageIndex returns the index of the stage named name, or -1.
func (p *Plan) StageIndex(name string) int {
	for i, s := range p.Stages {
		if s.Name == name {
			return i
		}
	}
	return -1
}

// Clone returns a copy that shares Stages and Params (treated as immutable).
func (p *Plan) Clone() *Plan {
	c := *p
	return &c
}

func (p *Plan) move(to Status, now time.Time) error {
	if !CanTransition(p.Status, to) {
		return &TransitionError{PlanID: p.ID, From: p.Status, To: to}
	}
	p.Status = to
	p.UpdatedAt = now.UTC()
	return nil
}

// Start moves CREATED → RUNNING, owned by instance owner.
func (p *Plan) Start(now time.Time, owner string) error {
	if p.Status != StatusCreated {
		return &TransitionError{PlanID: p.ID, From: p.Status, To: StatusRunning}
	}
	if err := p.move(StatusRunning, now); err != nil {
		return err
	}
	p.Owner = owner
	p.StartedAt = now.UTC()
	p.Reason = ""
	return nil
}

// Pause moves RUNNING → PAUSED for reason.
func (p *Plan) Pause(now time.Time, reason string) error {
	if p.Status != StatusRunning {
		return &TransitionError{PlanID: p.ID, From: p.Status, To: StatusPaused}
	}
	if err := p.move(StatusPaused, now); err != nil {
		return err
	}
	p.Reason = reason
	return nil
}

// Resume moves PAUSED → RUNNING (or keeps a RUNNING plan running, to take it
// over), owned by instance owner.
func (p *Plan) Resume(now time.Time, owner string) error {
	if p.Status != StatusPaused && p.Status != StatusRunning {
		return &TransitionError{PlanID: p.ID, From: p.Status, To: StatusRunning}
	}
	p.Status = StatusRunning
	p.UpdatedAt = now.UTC()
	p.Owner = owner
	p.Reason = ""
	return nil
}

// Cancel moves CREATED, RUNNING or PAUSED → CANCELLED for reason.
func (p *Plan) Cancel(now time.Time, reason string) error {
	if err := p.move(StatusCancelled, now); err != nil {
		return err
	}
	p.Reason = reason
	p.FinishedAt = now.UTC()
	p.CancelledAt = now.UTC()
	return nil
}

// Apply sets the status that Derive computed from the plan's counts.
func (p *Plan) Apply(now time.Time, status Status, reason string) {
	if status == p.Status {
		return
	}
	p.Status = status
	p.Reason = reason
	p.UpdatedAt = now.UTC()
	if status.Finished() {
		p.FinishedAt = now.UTC()
	} else {
		p.FinishedAt = time.Time{}
	}
}

// Counts is the number of a plan's tasks in each task status.
type Counts map[task.Status]int

// Active is the number of PENDING, RUNNING and PAUSED tasks.
func (c Counts) Active() int {
	return c[task.StatusPending] + c[task.StatusRunning] + c[task.StatusPaused]
}

// Total is the number of tasks counted.
func (c Counts) Total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// Derive returns the status a plan in status current moves to, and the
// reason to record, when a write moves its task counts. c is the counts after
// the write, total the plan's number of tasks, maxFailed its failure
// threshold (0 = none), and from → to the status move of the task whose write
// moved the counts (both "" when no single task moved, e.g. a recount). Stores
// apply the same rule atomically when counts move
// (repository/scripts/derive_plan.lua mirrors it; a test keeps the two in
// step):
//
//   - RUNNING or PAUSED with no active task → COMPLETED if every task
//     completed, else FAILED;
//   - COMPLETED, FAILED or CANCELLED, and the move is a manual re-run (to
//     RUNNING, or to PENDING when queued again, from FAILED, PAUSED,
//     CANCELLED or RUNNING: a retry, a resume or a takeover; not a start
//     from PENDING) → RUNNING. Other moves leave a
//     finished plan alone, even with tasks still RUNNING: a cancelled plan's
//     task finishing its stage, another of its tasks being cancelled, or a
//     PENDING task started just after the cancel;
//   - RUNNING, maxFailed > 0, the move is a new failure (to FAILED from any
//     other status) and more than maxFailed tasks FAILED → PAUSED with
//     ReasonFailureThreshold. Each new failure beyond the threshold pauses
//     the plan again, but a plan resumed by a person is not paused again by
//     moves that add no failure.
func Derive(current Status, c Counts, total, maxFailed int, from, to task.Status) (Status, string) {
	switch {
	case (current == StatusRunning || current == StatusPaused) && c.Active() == 0:
		if c[task.StatusCompleted] == total {
			return StatusCompleted, ""
		}
		return StatusFailed, fmt.Sprintf("%d of %d tasks did not complete", total-c[task.StatusCompleted], total)
	case current.Finished() && (to == task.StatusRunning || to == task.StatusPending) && from != task.StatusPending && from != "":
		return StatusRunning, ""
	case current == StatusRunning && maxFailed > 0 && to == task.StatusFailed && from != task.StatusFailed &&
		c[task.StatusFailed] > maxFailed:
		return StatusPaused, ReasonFailureThreshold
	}
	return current, ""
}
