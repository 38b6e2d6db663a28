package task

import (
	"errors"
	"fmt"
	"maps"
	"time"
)

// Status is where a task is in its life.
type Status string

const (
	// StatusPending: created, not started yet.
	StatusPending Status = "PENDING"
	// StatusRunning: an instance holds the tenant lock and runs its stages
	// (or did, and died: see Task.Orphaned).
	StatusRunning Status = "RUNNING"
	// StatusPaused: stopped between two stages on request (an operator, a
	// plan pause, an instance shutdown); resumable from its checkpoint.
	StatusPaused Status = "PAUSED"
	// StatusCompleted: every stage is done. Final.
	StatusCompleted Status = "COMPLETED"
	// StatusFailed: a stage failed for good, or the task could not start
	// (tenant locked). Retriable by hand.
	StatusFailed Status = "FAILED"
	// StatusCancelled: stopped for good on request. Retriable by hand.
	StatusCancelled Status = "CANCELLED"
)

// Statuses lists every status, in the order used for counts.
var Statuses = []Status{StatusPending, StatusRunning, StatusPaused, StatusCompleted, StatusFailed, StatusCancelled}

// Valid reports whether s is one of Statuses.
func (s Status) Valid() bool {
	_, ok := transitions[s]
	return ok
}

// Active reports whether a task in status s still has work ahead without a
// person acting: PENDING, RUNNING or PAUSED. A plan is finished when none of
// its tasks is active.
func (s Status) Active() bool {
	return s == StatusPending || s == StatusRunning || s == StatusPaused
}

// transitions is the status machine (docs/architecture.md). Beyond the design's diagram:
// PENDING → CANCELLED (a plan cancelled before the task's turn) and
// PENDING → FAILED (the task could not start: its tenant is locked), and
// PAUSED → CANCELLED. FAILED, PAUSED and CANCELLED go back to RUNNING only
// through a manual retry or resume, or back to PENDING when such a retry or
// resume is queued on the plan's shared work queue (it then starts from its
// checkpoint under the plan's maxConcurrency); RUNNING → RUNNING is the
// takeover of an orphaned task.
var transitions = map[Status][]Status{
	StatusPending:   {StatusRunning, StatusCancelled, StatusFailed},
	StatusRunning:   {StatusCompleted, StatusFailed, StatusPaused, StatusCancelled, StatusRunning},
	StatusPaused:    {StatusRunning, StatusCancelled, StatusPending},
	StatusFailed:    {StatusRunning, StatusPending},
	StatusCancelled: {StatusRunning, StatusPending},
	StatusCompleted: {},
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
	ErrIllegalTransition = errors.New("task: illegal status transition")
	// ErrNotFound is returned by stores when no such task exists.
	ErrNotFound = errors.New("task: not found")
	// ErrInvalid is wrapped by validation errors of task input.
	ErrInvalid = errors.New("task: invalid")
)

// TransitionError is returned when a move is not allowed from the current status.
type TransitionError struct {
	TaskID   string
	From, To Status
	// Why explains a refusal that the table alone does not (e.g. a takeover
	// of a task that is not orphaned).
	Why string
}

func (e *TransitionError) Error() string {
	msg := fmt.Sprintf("task %s: cannot go from %s to %s", e.TaskID, e.From, e.To)
	if e.Why != "" {
		msg += ": " + e.Why
	}
	return msg
}

// Is makes errors.Is(err, ErrIllegalTransition) match.
func (e *TransitionError) Is(target error) bool { return target == ErrIllegalTransition }

// Task is the deployment of one plan's pipeline to one tenant.
//
// Fields are set by the methods below, which refuse illegal moves; stores set
// them when they load a task. Nothing else should assign Status.
type Task struct {
	ID       string
	TenantID string
	PlanID   string
	Status   Status
	// Params are the tenant's template parameters (plan defaults merged in).
	Params map[string]any
	// PauseRequested and CancelRequested are cooperative requests, honoured
	// between two stages by the instance running the task.
	PauseRequested  bool
	CancelRequested bool
	// Attempt is 1 + the number of manual retries.
	Attempt int
	// StageIndex and StageName are the stage being run, or next to run.
	StageIndex  int
	StageName   string
	TotalStages int
	// StageStartedAt is when the stage being run started (zero before the
	// first stage and after the last): a stage on a live instance running
	// for long is hung, not orphaned. Retries of a stage keep it.
	StageStartedAt time.Time
	// LastError says why the task failed; Reason why it paused or was cancelled.
	LastError string
	Reason    string
	// Owner is the instance that runs (or last ran) the task; it refreshes
	// HeartbeatAt while the task runs.
	Owner       string
	HeartbeatAt time.Time
	// Fence is the fencing token of the tenant lock that last wrote the task.
	Fence int64
	// Seq counts writes of the task record. Stores use it for compare-and-set;
	// domain code leaves it alone.
	Seq        int64
	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
	UpdatedAt  time.Time
}

// New returns a PENDING task.
func New(id, planID, tenantID string, params map[string]any, stages []string, now time.Time) *Task {
	t := &Task{
		ID: id, TenantID: tenantID, PlanID: planID, Status: StatusPending,
		Params: params, TotalStages: len(stages), CreatedAt: now.UTC(), UpdatedAt: now.UTC(),
	}
	if len(stages) > 0 {
		t.StageName = stages[0]
	}
	return t
}

// Clone returns a deep copy (Params is copied one level deep; values are
// treated as immutable).
func (t *Task) Clone() *Task {
	c := *t
	if t.Params != nil {
		c.Params = maps.Clone(t.Params)
	}
	return &c
}

func (t *Task) move(to Status, now time.Time) error {
	if !CanTransition(t.Status, to) {
		return &TransitionError{TaskID: t.ID, From: t.Status, To: to}
	}
	t.Status = to
	t.UpdatedAt = now.UTC()
	return nil
}

// Start moves PENDING → RUNNING on instance owner holding the lock with fence.
func (t *Task) Start(now time.Time, owner string, fence int64) error {
	if t.Status != StatusPending {
		return &TransitionError{TaskID: t.ID, From: t.Status, To: StatusRunning, Why: "only a pending task starts"}
	}
	if err := t.move(StatusRunning, now); err != nil {
		return err
	}
	if t.Attempt == 0 {
		t.Attempt = 1
	}
	t.run(now, owner, fence)
	t.StartedAt = now.UTC()
	t.StageStartedAt = now.UTC()
	return nil
}

// RetryMode says how a manual retry re-enters a task.
type RetryMode int

const (
	// RetryNew counts as a new attempt (a manual retry).
	RetryNew RetryMode = iota
	// RetryResume continues the same attempt (resume after a pause).
	RetryResume
)

// Rerun moves a FAILED, PAUSED or CANCELLED task — or an orphaned RUNNING one
// when orphaned is true — back to RUNNING on instance owner with fence, to run
// from stage index from. RetryNew increments Attempt.
func (t *Task) Rerun(now time.Time, owner string, fence int64, from int, name string, mode RetryMode, orphaned bool) error {
	if t.Status == StatusRunning && !orphaned {
		return &TransitionError{TaskID: t.ID, From: t.Status, To: StatusRunning, Why: "it is running on a live instance"}
	}
	if t.Status == StatusPending {
		return &TransitionError{TaskID: t.ID, From: t.Status, To: StatusRunning, Why: "it has not started"}
	}
	if mode == RetryResume && t.Status != StatusPaused {
		return &TransitionError{TaskID: t.ID, From: t.Status, To: StatusRunning, Why: "only a paused task resumes"}
	}
	if err := t.move(StatusRunning, now); err != nil {
		return err
	}
	if mode == RetryNew {
		t.Attempt++
	}
	t.run(now, owner, fence)
	t.StageIndex, t.StageName = from, name
	t.StageStartedAt = now.UTC()
	t.LastError, t.Reason = "", ""
	t.FinishedAt = time.Time{}
	if t.StartedAt.IsZero() {
		t.StartedAt = now.UTC()
	}
	return nil
}

// Requeue moves FAILED, CANCELLED or PAUSED back to PENDING for a retry
// (mode RetryNew: a new attempt) or resume that waits on the plan's queue;
// whoever starts it runs it from stage index from (its checkpoint's next
// stage). fence is the fence of the lock held for the write.
func (t *Task) Requeue(now time.Time, fence int64, from int, name string, mode RetryMode) error {
	switch {
	case t.Status == StatusRunning || t.Status == StatusPending || t.Status == StatusCompleted:
		return &TransitionError{TaskID: t.ID, From: t.Status, To: StatusPending, Why: "only a failed, cancelled or paused task is queued again"}
	case mode == RetryResume && t.Status != StatusPaused:
		return &TransitionError{TaskID: t.ID, From: t.Status, To: StatusPending, Why: "only a paused task resumes"}
	}
	if err := t.move(StatusPending, now); err != nil {
		return err
	}
	if mode == RetryNew {
		t.Attempt++
	}
	t.Owner, t.Fence = "", fence
	t.PauseRequested, t.CancelRequested = false, false
	t.StageIndex, t.StageName = from, name
	t.StageStartedAt = time.Time{}
	t.LastError, t.Reason = "", ""
	t.FinishedAt = time.Time{}
	return nil
}

func (t *Task) run(now time.Time, owner string, fence int64) {
	t.Owner = owner
	t.Fence = fence
	t.HeartbeatAt = now.UTC()
	t.PauseRequested, t.CancelRequested = false, false
}

// EnterStage records that stage index (named name) is the one being run.
func (t *Task) EnterStage(index int, name string, now time.Time) {
	t.StageIndex, t.StageName = index, name
	t.StageStartedAt = now.UTC()
	t.UpdatedAt = now.UTC()
	t.HeartbeatAt = now.UTC()
}

// Complete moves RUNNING → COMPLETED.
func (t *Task) Complete(now time.Time) error {
	if err := t.move(StatusCompleted, now); err != nil {
		return err
	}
	t.StageIndex, t.StageName = t.TotalStages, ""
	t.StageStartedAt = time.Time{}
	t.LastError, t.Reason = "", ""
	t.FinishedAt = now.UTC()
	return nil
}

// Fail moves RUNNING (or PENDING, when the task could not start) → FAILED.
func (t *Task) Fail(now time.Time, reason string) error {
	if err := t.move(StatusFailed, now); err != nil {
		return err
	}
	t.LastError = reason
	t.FinishedAt = now.UTC()
	return nil
}

// Pause moves RUNNING → PAUSED, for reason.
func (t *Task) Pause(now time.Time, reason string) error {
	if err := t.move(StatusPaused, now); err != nil {
		return err
	}
	t.Reason = reason
	t.PauseRequested = false
	return nil
}

// Cancel moves PENDING, RUNNING or PAUSED → CANCELLED, for reason.
func (t *Task) Cancel(now time.Time, reason string) error {
	if err := t.move(StatusCancelled, now); err != nil {
		return err
	}
	t.Reason = reason
	t.PauseRequested, t.CancelRequested = false, false
	t.FinishedAt = now.UTC()
	return nil
}

// Beat records that the owner is alive and still runs the task.
func (t *Task) Beat(now time.Time) { t.HeartbeatAt = now.UTC() }

// Orphaned reports whether the task is RUNNING but its owner has not
// heartbeated for longer than lease: its instance died or is cut off. An
// orphaned task stays RUNNING until a person acts.
func (t *Task) Orphaned(now time.Time, lease time.Duration) bool {
	return t.Status == StatusRunning && now.Sub(t.HeartbeatAt) > lease
}
