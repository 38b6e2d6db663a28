package task

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
)

// Guard is what a write proves about its writer: the tenant lock value it
// holds and the lock's fencing token. A write with an empty LockValue is made
// without the lock; stores accept it only when the record is unchanged since
// the writer read it (Write.ExpectSeq) and no newer fence has written it.
type Guard struct {
	LockValue string
	Fence     int64
}

// Write is one atomic change of a task in storage: the task record, its
// checkpoint, its timeline and, when the status changes, its plan's counts.
// A store applies all of it or none of it (the plan counts follow in the same
// round trip; see the repository package).
type Write struct {
	// Task is the record after the change. Every field is written except the
	// requests (PauseRequested, CancelRequested), which belong to whoever
	// asks for them; see ClearRequests.
	Task *Task
	// PrevStatus is the status the writer saw before the change. When it
	// differs from Task.Status the plan's counts move — and so does the
	// per-owner running counter on a takeover (RUNNING → RUNNING with
	// ClearRequests, which every re-run write sets).
	PrevStatus Status
	// ExpectSeq is the Seq the stored record must have; the write stores
	// ExpectSeq+1.
	ExpectSeq int64
	Guard     Guard
	// Checkpoint, when set, replaces the task's checkpoint; DeleteCheckpoint
	// removes it (a retry from the start).
	Checkpoint       *checkpoint.Checkpoint
	DeleteCheckpoint bool
	// Events are appended to the task's timeline.
	Events []Event
	// ClearRequests resets the stored pause and cancel requests.
	ClearRequests bool
	// ReleaseLock deletes the tenant lock held with Guard.LockValue in the
	// same atomic step as the write (the task's last write of a run).
	ReleaseLock bool
	// TakeLock, when positive, makes the write a task's start that takes
	// the tenant lock itself, in the same atomic step: the lock with value
	// Guard.LockValue for TakeLock, and the fence Guard.Fence, which must be
	// above every fence taken for the tenant before (the caller's clock in
	// Unix ms, as the lock's own acquisitions take it). Nothing is written
	// when the lock is held or the fencing counter is not below Guard.Fence:
	// the store answers a *LockNotTakenError then, and the caller takes the
	// lock the usual way. Stores that cannot take the lock refuse such a
	// write as invalid.
	TakeLock time.Duration
	// Blind makes a start that takes the lock (TakeLock) from a task known
	// only by its queue entry: ID, TenantID, PlanID, the plan's first stage
	// and PENDING at seq 0 (ExpectSeq 0), as created. The store does not
	// compare the fixed fields (Params, TotalStages, CreatedAt) with the
	// record; it refuses the write (RefusedPlan) when the record is of
	// another plan, and once written sets them on Task from the record. A
	// task written since its creation refuses it with RefusedSeq, as any
	// start: the writer reads the task then. Saves the read of a task that
	// another instance created (the shared plans' claimed starts).
	Blind bool
	// Current makes the write apply only while Task is its tenant's current
	// task (the newest created for the tenant), else the store refuses it
	// with RefusedCurrent. A re-run of a task (a retry, a resume) sets it:
	// a task of a plan created for the tenant since the re-run was decided
	// is the tenant's change now, and running the older one again would
	// undo it.
	Current bool
	// ID names the write so that sending it again is safe: a store that
	// finds it already applied (an earlier attempt whose answer was lost)
	// answers it as written, with the stored result. Empty: the store gives
	// each call an id of its own (see NewWriteID and ValidWriteID).
	ID string
}

// Write ids are a random prefix per process (64 bits) and a counter:
// unique without reading crypto/rand on every write.
var (
	writeIDPrefix = func() string {
		var b [8]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}()
	writeIDCount atomic.Uint64
)

// NewWriteID returns a write id unique across processes.
func NewWriteID() string {
	return writeIDPrefix + strconv.FormatUint(writeIDCount.Add(1), 36)
}

// ValidWriteID reports whether id may name a write: 1 to 64 ASCII letters,
// digits, '.', '_' or '-' (it is stored in records and ledger entries).
func ValidWriteID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// WriteResult is what a store reports after a successful Write.
type WriteResult struct {
	// Seq is the record's new Seq.
	Seq int64
	// PauseRequested and CancelRequested are the requests stored on the task
	// when it was written, for the running instance to honour.
	PauseRequested  bool
	CancelRequested bool
	// PlanStatus is the plan's status after its counts moved (a plan.Status
	// value), or "" when the counts did not move.
	PlanStatus string
	// PlanStatusChanged reports that this write's counts move changed the
	// plan's status by its derivation (plan.Derive: the plan finished, a
	// re-run reopened it, or a failure paused it past maxFailed). Exactly
	// one write sees each such change, whichever instance sent it; a
	// status set by an operator (pause, resume, cancel) is never one.
	PlanStatusChanged bool
	// CountsCorrected is set only with the error of a refused write whose
	// counts move had applied all the same (the two are sent together but
	// cannot be one script): the store undid that move, so the plan's
	// counts changed. PlanStatus is then the plan's status after the
	// correction, PlanStatusChanged whether the refused move and its
	// correction together changed it from what it was before the write,
	// and Counts the plan's task counts after the correction; the
	// coordinator publishes them (the move they undid was never published).
	CountsCorrected bool
	Counts          map[Status]int
}

// ErrWriteRefused is matched by every *RefusedError.
var ErrWriteRefused = errors.New("task: write refused")

// RefuseReason says why a store refused a write.
type RefuseReason string

const (
	// RefusedLock: the writer does not hold the tenant lock any more.
	RefusedLock RefuseReason = "lock"
	// RefusedFence: a writer with a newer fencing token has written the task.
	RefusedFence RefuseReason = "fence"
	// RefusedSeq: the record changed since the writer read it.
	RefusedSeq RefuseReason = "seq"
	// RefusedMissing: the record does not exist (expired or never created).
	RefusedMissing RefuseReason = "missing"
	// RefusedPlan: the record is of another plan than the blind start's
	// (Write.Blind).
	RefusedPlan RefuseReason = "plan"
	// RefusedCurrent: the task is no longer its tenant's current task
	// (Write.Current).
	RefusedCurrent RefuseReason = "current"
)

// RefusedError is returned when a store refuses a write. It carries what is
// stored now, so the writer can tell what happened without another read.
type RefusedError struct {
	TaskID string
	Reason RefuseReason
	// Stored state of the record at the time of the refusal.
	Status Status
	Seq    int64
	Fence  int64
	Owner  string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("task %s: write refused (%s): stored status %s, seq %d, fence %d, owner %q",
		e.TaskID, e.Reason, e.Status, e.Seq, e.Fence, e.Owner)
}

// Is makes errors.Is(err, ErrWriteRefused) match.
func (e *RefusedError) Is(target error) bool { return target == ErrWriteRefused }

// ErrLockNotTaken matches a *LockNotTakenError.
var ErrLockNotTaken = errors.New("task: the start did not take the tenant lock")

// LockNotTakenError is a start with Write.TakeLock that could not take the
// tenant lock: nothing was written. Reason is "locked" (another value holds
// the lock) or "fence" (the tenant's fencing counter is not below the
// write's fence, or is not a counter).
type LockNotTakenError struct {
	TaskID, TenantID string
	Reason           string
}

func (e *LockNotTakenError) Error() string {
	return fmt.Sprintf("task %s: start did not take the lock of tenant %s (%s); nothing written", e.TaskID, e.TenantID, e.Reason)
}

// Is makes errors.Is(err, ErrLockNotTaken) match.
func (e *LockNotTakenError) Is(target error) bool { return target == ErrLockNotTaken }

// Request is a cooperative request stored on a task for its running instance.
type Request string

const (
	// RequestPause asks the running instance to pause after the current stage.
	RequestPause Request = "pause"
	// RequestCancel asks it to cancel after the current stage.
	RequestCancel Request = "cancel"
	// RequestClearPause withdraws a pause request not yet honoured.
	RequestClearPause Request = "clear_pause"
	// RequestNote changes nothing and only appends the event to the task's
	// timeline (an operator action about the task, like a lock release).
	RequestNote Request = "note"
)
