package plan

import (
	"fmt"
	"strings"

	"github.com/deploycoord/deploycoord/task"
)

// QueueKind says what an instance does with a queued task once it holds a
// permit for it. The task's status decides too: an entry whose task is no
// longer in the status its kind expects is dropped (its permit freed).
type QueueKind string

const (
	// QueueStart starts a PENDING task.
	QueueStart QueueKind = "s"
	// QueueResume resumes a PAUSED task from its checkpoint (a plan resume).
	QueueResume QueueKind = "r"
	// QueueTakeover takes over an orphaned RUNNING task from its
	// checkpoint (a plan resume with includeOrphaned).
	QueueTakeover QueueKind = "o"
)

// QueueEntry is one task in a plan's shared work queue.
type QueueEntry struct {
	Kind     QueueKind
	TenantID string
	TaskID   string
}

// String is the entry as stored: "<kind>|<tenantId>|<taskId>".
func (e QueueEntry) String() string { return string(e.Kind) + "|" + e.TenantID + "|" + e.TaskID }

// Check validates the entry's kind and ids.
func (e QueueEntry) Check() error {
	switch e.Kind {
	case QueueStart, QueueResume, QueueTakeover:
	default:
		return fmt.Errorf("%w: queue entry kind %s is not one of s, r, o", ErrInvalid, task.Quote(string(e.Kind)))
	}
	if err := task.CheckTenantID(e.TenantID); err != nil {
		return err
	}
	if !task.ValidID(e.TaskID) {
		return fmt.Errorf("%w: task id %s is not an id made by task.NewID", ErrInvalid, task.Quote(e.TaskID))
	}
	return nil
}

// ParseQueueEntry parses an entry as stored (see QueueEntry.String).
func ParseQueueEntry(s string) (QueueEntry, error) {
	parts := strings.Split(s, "|")
	if len(parts) != 3 {
		return QueueEntry{}, fmt.Errorf("%w: queue entry %s is not <kind>|<tenantId>|<taskId>", ErrInvalid, task.Quote(s))
	}
	e := QueueEntry{Kind: QueueKind(parts[0]), TenantID: parts[1], TaskID: parts[2]}
	return e, e.Check()
}

// ClaimOutcome is what a claim on a plan's queue got.
type ClaimOutcome int

const (
	// ClaimGranted: one or more entries and a permit for each.
	ClaimGranted ClaimOutcome = iota
	// ClaimFull: maxConcurrency permits are held (across all instances).
	ClaimFull
	// ClaimEmpty: nothing is queued.
	ClaimEmpty
	// ClaimNotRunning: the plan is not RUNNING (Status says what it is).
	ClaimNotRunning
	// ClaimNoPlan: the plan does not exist (any more).
	ClaimNoPlan
)

// Claim is the answer to a claim on a plan's queue.
type Claim struct {
	Outcome ClaimOutcome
	// Entries are the granted entries, in queue order (ClaimGranted).
	Entries []QueueEntry
	// Status is the plan's stored status (ClaimNotRunning).
	Status Status
	// Permits is how many permits are held after the claim.
	Permits int
}

// QueueState is what an instance needs to know about an active plan to
// decide whether to run it: its status, queued entries and held permits.
type QueueState struct {
	PlanID         string
	Status         Status
	MaxConcurrency int
	Queued         int
	Permits        int
}
