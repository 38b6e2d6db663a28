package facade

import (
	"time"

	"github.com/deploycoord/deploycoord/task"
)

// Observer is told what the coordinator does, for metrics. Every method
// must be cheap and safe for concurrent use. Config.Observer defaults to one
// that does nothing.
type Observer interface {
	// TaskStarted: a task run began (start, retry, resume or takeover).
	TaskStarted()
	// TaskFinished: a task run ended in status (COMPLETED, FAILED, PAUSED,
	// CANCELLED).
	TaskFinished(status task.Status)
	// StageAttempt: one attempt of a stage of kind ended with outcome
	// (success, failure, skip) after d.
	StageAttempt(kind string, outcome task.Outcome, d time.Duration)
	// StageRetry: a stage of kind will be attempted again.
	StageRetry(kind string)
	// LockConflict: a tenant lock was held by another task.
	LockConflict()
	// LeaseLost: a held lease was lost (refused or lapsed).
	LeaseLost()
	// WriteRefused: the store refused a fenced write.
	WriteRefused(reason task.RefuseReason)
}

type nopObserver struct{}

func (nopObserver) TaskStarted()                                     {}
func (nopObserver) TaskFinished(task.Status)                         {}
func (nopObserver) StageAttempt(string, task.Outcome, time.Duration) {}
func (nopObserver) StageRetry(string)                                {}
func (nopObserver) LockConflict()                                    {}
func (nopObserver) LeaseLost()                                       {}
func (nopObserver) WriteRefused(task.RefuseReason)                   {}
