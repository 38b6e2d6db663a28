package httpapi

import (
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// The JSON documents of the API (API.md, docs/openapi.yaml). Times are
// RFC 3339 in UTC; a time that has not happened yet is null.

// Plan is a plan as answered by the plan endpoints.
type Plan struct {
	PlanID string      `json:"planId"`
	Name   string      `json:"name"`
	Status plan.Status `json:"status"`
	// Reason says why the plan is paused, cancelled or failed.
	Reason string `json:"reason"`
	// Pipeline names the operator-defined pipeline ("" for inline stages).
	Pipeline       string `json:"pipeline"`
	MaxConcurrency int    `json:"maxConcurrency"`
	TotalTasks     int    `json:"totalTasks"`
	// Counts holds the number of tasks in every task status. Single-plan
	// answers always carry all six; listings omit it (they do not count).
	Counts           map[task.Status]int    `json:"counts,omitempty"`
	Stages           []string               `json:"stages"`
	Owner            string                 `json:"owner"`
	OnTenantLocked   plan.LockPolicy        `json:"onTenantLocked"`
	LockWait         task.Duration          `json:"lockWait"`
	FailureThreshold *plan.FailureThreshold `json:"failureThreshold"`
	Params           map[string]any         `json:"params,omitempty"`
	CreatedAt        *time.Time             `json:"createdAt"`
	StartedAt        *time.Time             `json:"startedAt"`
	FinishedAt       *time.Time             `json:"finishedAt"`
	UpdatedAt        *time.Time             `json:"updatedAt"`
	// Degraded is true when the answer came from memory because Redis was
	// unreachable.
	Degraded bool `json:"degraded"`
}

// PlanList is a page of plans, newest first.
type PlanList struct {
	Plans []Plan `json:"plans"`
	// NextCursor continues the listing ("" at the end).
	NextCursor string `json:"nextCursor"`
}

// Task is a task as listed (a plan's tasks, a tenant's history): without its
// checkpoint, which listings do not load.
type Task struct {
	TaskID   string      `json:"taskId"`
	TenantID string      `json:"tenantId"`
	PlanID   string      `json:"planId"`
	Status   task.Status `json:"status"`
	// Orphaned is true when the task is RUNNING but its owner stopped
	// heartbeating for longer than the lock lease.
	Orphaned          bool           `json:"orphaned"`
	PauseRequested    bool           `json:"pauseRequested"`
	CancelRequested   bool           `json:"cancelRequested"`
	Attempt           int            `json:"attempt"`
	CurrentStageIndex int            `json:"currentStageIndex"`
	CurrentStage      string         `json:"currentStage"`
	TotalStages       int            `json:"totalStages"`
	LastError         string         `json:"lastError"`
	Reason            string         `json:"reason"`
	Owner             string         `json:"owner"`
	HeartbeatAt       *time.Time     `json:"heartbeatAt"`
	Fence             int64          `json:"fence"`
	Params            map[string]any `json:"params,omitempty"`
	CreatedAt         *time.Time     `json:"createdAt"`
	StartedAt         *time.Time     `json:"startedAt"`
	FinishedAt        *time.Time     `json:"finishedAt"`
	UpdatedAt         *time.Time     `json:"updatedAt"`
	Degraded          bool           `json:"degraded"`
}

// TaskDetail is one task with a summary of its checkpoint (null if none).
type TaskDetail struct {
	Task
	HasCheckpoint bool               `json:"hasCheckpoint"`
	Checkpoint    *CheckpointSummary `json:"checkpoint"`
}

// CheckpointSummary is a checkpoint without its context data.
type CheckpointSummary struct {
	LastCompletedStageIndex int        `json:"lastCompletedStageIndex"`
	CompletedStages         []string   `json:"completedStages"`
	SkippedStages           []string   `json:"skippedStages"`
	SavedAt                 *time.Time `json:"savedAt"`
	Attempt                 int        `json:"attempt"`
	Fence                   int64      `json:"fence"`
}

// Checkpoint is the full checkpoint of a tenant's current task.
type Checkpoint struct {
	TenantID string `json:"tenantId"`
	CheckpointSummary
	ContextData map[string]any `json:"contextData"`
}

// TaskList is a page of a plan's tasks, in plan order.
type TaskList struct {
	Tasks      []Task `json:"tasks"`
	NextCursor string `json:"nextCursor"`
}

// History is a tenant's tasks, newest first.
type History struct {
	TenantID string `json:"tenantId"`
	Tasks    []Task `json:"tasks"`
}

// Timeline is the timeline of a tenant's current task, oldest entry first.
type Timeline struct {
	TenantID string       `json:"tenantId"`
	TaskID   string       `json:"taskId"`
	Events   []task.Event `json:"events"`
}

// TenantsStatus answers POST /v1/tenants:status: each asked tenant's current
// task, null for a tenant without one.
type TenantsStatus struct {
	Tasks map[string]*TaskDetail `json:"tasks"`
}

// DryRun answers a retry with "dryRun": true.
type DryRun struct {
	DryRun   bool     `json:"dryRun"`
	WouldRun []string `json:"wouldRun"`
}

// Lock is a tenant lock as seen now.
type Lock struct {
	TenantID string `json:"tenantId"`
	Held     bool   `json:"held"`
	PlanID   string `json:"planId"`
	TaskID   string `json:"taskId"`
	Owner    string `json:"owner"`
	// TTLMs is the time left on the lease, in milliseconds.
	TTLMs int64 `json:"ttlMs"`
	// Fence is the holder's fencing token (the last one handed out when
	// nobody holds the lock).
	Fence int64 `json:"fence"`
}

// ReleasedLock answers a force-release: the holder whose lock was deleted.
type ReleasedLock struct {
	TenantID string `json:"tenantId"`
	Released bool   `json:"released"`
	PlanID   string `json:"planId"`
	TaskID   string `json:"taskId"`
	Owner    string `json:"owner"`
	Fence    int64  `json:"fence"`
}

// ReasonRequest is the body of the plan and task actions.
type ReasonRequest struct {
	Reason string `json:"reason"`
}

// ResumePlanRequest is the body of POST /v1/plans/{planId}/resume.
type ResumePlanRequest struct {
	Reason string `json:"reason"`
	// IncludeOrphaned also takes over the plan's orphaned tasks.
	IncludeOrphaned bool `json:"includeOrphaned"`
}

// TenantsStatusRequest is the body of POST /v1/tenants:status.
type TenantsStatusRequest struct {
	TenantIDs []string `json:"tenantIds"`
}

// ReleaseLockRequest is the body of DELETE /v1/tenants/{tenantId}/lock.
type ReleaseLockRequest struct {
	Reason string `json:"reason"`
	// ExpectedFence is the fence read with GET .../lock; the lock is
	// released only if it still has it.
	ExpectedFence int64 `json:"expectedFence"`
}

// timeOrNull returns t in UTC, nil when zero.
func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func planJSON(v facade.PlanView, withCounts bool) Plan {
	p := v.Plan
	out := Plan{
		PlanID: p.ID, Name: p.Name, Status: p.Status, Reason: p.Reason, Pipeline: p.Pipeline,
		MaxConcurrency: p.MaxConcurrency, TotalTasks: p.TotalTasks, Stages: p.StageNames(),
		Owner: p.Owner, OnTenantLocked: p.OnTenantLocked, LockWait: task.Duration(p.LockWait),
		Params:    p.Params,
		CreatedAt: timeOrNull(p.CreatedAt), StartedAt: timeOrNull(p.StartedAt),
		FinishedAt: timeOrNull(p.FinishedAt), UpdatedAt: timeOrNull(p.UpdatedAt),
		Degraded: v.Degraded,
	}
	if p.MaxFailed > 0 {
		out.FailureThreshold = &plan.FailureThreshold{MaxFailed: p.MaxFailed}
	}
	if withCounts || v.Counts != nil {
		out.Counts = make(map[task.Status]int, len(task.Statuses))
		for _, s := range task.Statuses {
			out.Counts[s] = v.Counts[s]
		}
	}
	return out
}

func taskJSON(v facade.TaskView) Task {
	t := v.Task
	return Task{
		TaskID: t.ID, TenantID: t.TenantID, PlanID: t.PlanID, Status: t.Status,
		Orphaned: v.Orphaned, PauseRequested: t.PauseRequested, CancelRequested: t.CancelRequested,
		Attempt: t.Attempt, CurrentStageIndex: t.StageIndex, CurrentStage: t.StageName, TotalStages: t.TotalStages,
		LastError: t.LastError, Reason: t.Reason, Owner: t.Owner, HeartbeatAt: timeOrNull(t.HeartbeatAt),
		Fence: t.Fence, Params: t.Params,
		CreatedAt: timeOrNull(t.CreatedAt), StartedAt: timeOrNull(t.StartedAt),
		FinishedAt: timeOrNull(t.FinishedAt), UpdatedAt: timeOrNull(t.UpdatedAt),
		Degraded: v.Degraded,
	}
}

func taskDetailJSON(v facade.TaskView) *TaskDetail {
	d := &TaskDetail{Task: taskJSON(v), HasCheckpoint: v.Checkpoint != nil}
	if v.Checkpoint != nil {
		s := checkpointSummary(*v.Checkpoint)
		d.Checkpoint = &s
	}
	return d
}

func tasksJSON(vs []facade.TaskView) []Task {
	out := make([]Task, len(vs))
	for i, v := range vs {
		out[i] = taskJSON(v)
	}
	return out
}

func checkpointSummary(c checkpoint.Checkpoint) CheckpointSummary {
	s := CheckpointSummary{
		LastCompletedStageIndex: c.LastCompletedStageIndex,
		CompletedStages:         c.CompletedStages, SkippedStages: c.SkippedStages,
		SavedAt: timeOrNull(c.SavedAt), Attempt: c.Attempt, Fence: c.Fence,
	}
	if s.CompletedStages == nil {
		s.CompletedStages = []string{}
	}
	if s.SkippedStages == nil {
		s.SkippedStages = []string{}
	}
	return s
}

func checkpointJSON(tenantID string, c checkpoint.Checkpoint) Checkpoint {
	out := Checkpoint{TenantID: tenantID, CheckpointSummary: checkpointSummary(c), ContextData: c.ContextData}
	if out.ContextData == nil {
		out.ContextData = map[string]any{}
	}
	return out
}

func lockJSON(tenantID string, info tenantlock.Info) Lock {
	l := Lock{TenantID: tenantID, Held: info.Held, Fence: info.Fence}
	if info.Held {
		l.PlanID, l.TaskID, l.Owner = info.Holder.PlanID, info.Holder.TaskID, info.Holder.Instance
		l.TTLMs = info.TTL.Milliseconds()
	}
	return l
}

func eventsJSON(evs []task.Event) []task.Event {
	out := make([]task.Event, len(evs))
	for i, e := range evs {
		e.At = e.At.UTC()
		out[i] = e
	}
	return out
}
