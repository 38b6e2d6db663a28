// Package task holds the Task aggregate — the deployment of one plan's
// pipeline to one tenant — with its status machine, the stage spec and retry
// policy, stage results and timeline events. It imports only the standard
// library and package checkpoint.
//
// # Status machine
//
//	             ┌────────────── cancel ───────────────┐
//	             │                                     ▼
//	PENDING ──start──► RUNNING ──► COMPLETED      CANCELLED
//	   │                │ │ │                          │
//	   │ (tenant locked)│ │ └──pause──► PAUSED ──cancel┘
//	   └────────────► FAILED ◄──┘        │
//	                    │                │
//	                    └── manual retry / resume ──► RUNNING
//
// A manual retry moves FAILED, PAUSED or CANCELLED back to RUNNING, and so
// does the takeover of an orphaned task (RUNNING, its owner silent for longer
// than the lock lease). Every move is a method that refuses an illegal one
// with a *TransitionError; nothing assigns Status directly.
//
// # Stages and retries
//
// A StageSpec names a kind ("http", "sleep", ...) whose settings sit under a
// key named after the kind; package task/stage turns specs into runnable
// stages. A stage run returns Success(outputs), Failure(reason, retryable) or
// Skip(reason). Retryable failures are retried on the same instance under the
// stage's RetryPolicy (exponential, linear or fixed backoff with bounded
// jitter); every attempt and delay becomes an Event in the task's timeline.
//
// # Writes
//
// Write describes one atomic change of a task in storage (record,
// checkpoint, timeline, plan counts) together with the Guard that proves the
// writer still holds the tenant lock with the newest fencing token.
package task
