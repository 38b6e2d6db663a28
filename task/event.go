package task

import "time"

// EventType names a timeline entry. The same names are used in the event feed.
type EventType string

// Timeline event types.
const (
	EventStarted         EventType = "task.started"
	EventStageStarted    EventType = "task.stage_started"
	EventStageSucceeded  EventType = "task.stage_succeeded"
	EventStageRetrying   EventType = "task.stage_retrying"
	EventStageFailed     EventType = "task.stage_failed"
	EventStageSkipped    EventType = "task.stage_skipped"
	EventCompleted       EventType = "task.completed"
	EventFailed          EventType = "task.failed"
	EventPaused          EventType = "task.paused"
	EventCancelled       EventType = "task.cancelled"
	EventRetryRequested  EventType = "task.retry_requested"
	EventResumed         EventType = "task.resumed"
	EventPauseRequested  EventType = "task.pause_requested"
	EventCancelRequested EventType = "task.cancel_requested"
	EventLeaseLost       EventType = "task.lease_lost"
	EventLeaseRegained   EventType = "task.lease_regained"
	EventWriteRefused    EventType = "task.write_refused"
	EventLockReleased    EventType = "lock.released"
)

// MaxTimeline is how many entries a task's timeline keeps (oldest dropped).
const MaxTimeline = 200

// Event is one entry of a task's timeline: a transition, a stage attempt, a
// retry delay or an operator action.
type Event struct {
	At   time.Time `json:"at"`
	Type EventType `json:"type"`
	// Stage and StageIndex name the stage the event is about, if any.
	Stage      string `json:"stage,omitempty"`
	StageIndex *int   `json:"stageIndex,omitempty"`
	// Attempt is the task attempt; StageAttempt the attempt of the stage
	// within it (1-based).
	Attempt      int `json:"attempt,omitempty"`
	StageAttempt int `json:"stageAttempt,omitempty"`
	// Delay is the wait before the next stage attempt (stage_retrying).
	Delay Duration `json:"delay,omitempty"`
	// Duration is how long the stage attempt took.
	Duration Duration `json:"duration,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	// Actor and Role say who asked for an operator action; RequestID ties
	// the entry to the HTTP request that caused it.
	Actor     string         `json:"actor,omitempty"`
	Role      string         `json:"role,omitempty"`
	RequestID string         `json:"requestId,omitempty"`
	Instance  string         `json:"instance,omitempty"`
	Fence     int64          `json:"fence,omitempty"`
	Data      map[string]any `json:"data,omitempty"`
}

// AtStage returns e about stage index named name.
func (e Event) AtStage(index int, name string) Event {
	e.Stage, e.StageIndex = name, &index
	return e
}
