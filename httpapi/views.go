package httpapi

import (
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// The JSON documents of the API (docs/api.md, docs/openapi.yaml). Times are
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
	// Counts holds the number of tasks in every task status, all six:
	// single-plan answers and listings (GET /v1/plans) carry it.
	Counts map[task.Status]int `json:"counts,omitempty"`
	// Orphaned is how many RUNNING tasks have an owner instance that is not
	// alive (-1: unknown, the instance registry could not be read). Single-
	// plan answers only: a listing does not look for the live owners.
	Orphaned         *int                   `json:"orphaned,omitempty"`
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
	// Degraded is true when the page came from memory because Redis was
	// not answering: it may lack what other instances run.
	Degraded bool `json:"degraded"`
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
	Orphaned          bool   `json:"orphaned"`
	PauseRequested    bool   `json:"pauseRequested"`
	CancelRequested   bool   `json:"cancelRequested"`
	Attempt           int    `json:"attempt"`
	CurrentStageIndex int    `json:"currentStageIndex"`
	CurrentStage      string `json:"currentStage"`
	TotalStages       int    `json:"totalStages"`
	// StageStartedAt is when the current stage started (null when no stage runs).
	StageStartedAt *time.Time     `json:"stageStartedAt"`
	LastError      string         `json:"lastError"`
	Reason         string         `json:"reason"`
	Owner          string         `json:"owner"`
	HeartbeatAt    *time.Time     `json:"heartbeatAt"`
	Fence          int64          `json:"fence"`
	Params         map[string]any `json:"params,omitempty"`
	CreatedAt      *time.Time     `json:"createdAt"`
	StartedAt      *time.Time     `json:"startedAt"`
	FinishedAt     *time.Time     `json:"finishedAt"`
	UpdatedAt      *time.Time     `json:"updatedAt"`
	Degraded       bool           `json:"degraded"`
}

// TaskDetail is one task with a summary of its checkpoint (null if none).
type TaskDetail struct {
	Task
	HasCheckpoint bool               `json:"hasCheckpoint"`
	Checkpoint    *CheckpointSummary `json:"checkpoint"`
	// LockExpiresAt is when the tenant's lock frees unless its holder
	// renews it, for a RUNNING task holding it; null otherwise.
	LockExpiresAt *time.Time `json:"lockExpiresAt"`
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
	// Degraded is true when the page came from memory (see PlanList).
	Degraded bool `json:"degraded"`
}

// History is a tenant's tasks, newest first.
type History struct {
	TenantID string `json:"tenantId"`
	Tasks    []Task `json:"tasks"`
	// Degraded is true when the answer came from memory (see PlanList).
	Degraded bool `json:"degraded"`
}

// Timeline is the timeline of a tenant's current task, oldest entry first.
type Timeline struct {
	TenantID string       `json:"tenantId"`
	TaskID   string       `json:"taskId"`
	Events   []task.Event `json:"events"`
	// Degraded: the timeline came from memory (Redis unreachable), as far
	// as this instance wrote it.
	Degraded bool `json:"degraded"`
}

// TenantsStatus answers POST /v1/tenants:status: each asked tenant's current
// task, null for a tenant without one.
type TenantsStatus struct {
	Tasks map[string]*TaskDetail `json:"tasks"`
	// Degraded: the answer came from memory (Redis unreachable); each task
	// says so too.
	Degraded bool `json:"degraded"`
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
	if withCounts {
		orphaned := v.Orphaned
		out.Orphaned = &orphaned
	}
	return out
}

func taskJSON(v facade.TaskView) Task {
	t := v.Task
	return Task{
		TaskID: t.ID, TenantID: t.TenantID, PlanID: t.PlanID, Status: t.Status,
		Orphaned: v.Orphaned, PauseRequested: t.PauseRequested, CancelRequested: t.CancelRequested,
		Attempt: t.Attempt, CurrentStageIndex: t.StageIndex, CurrentStage: t.StageName, TotalStages: t.TotalStages,
		StageStartedAt: timeOrNull(t.StageStartedAt),
		LastError:      t.LastError, Reason: t.Reason, Owner: t.Owner, HeartbeatAt: timeOrNull(t.HeartbeatAt),
		Fence: t.Fence, Params: t.Params,
		CreatedAt: timeOrNull(t.CreatedAt), StartedAt: timeOrNull(t.StartedAt),
		FinishedAt: timeOrNull(t.FinishedAt), UpdatedAt: timeOrNull(t.UpdatedAt),
		Degraded: v.Degraded,
	}
}

func taskDetailJSON(v facade.TaskView) *TaskDetail {
	d := &TaskDetail{Task: taskJSON(v), HasCheckpoint: v.Checkpoint != nil, LockExpiresAt: v.LockExpiresAt}
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

// Instance is a coordinator instance as listed by GET /v1/instances. An
// instance that stopped heartbeating longer ago than its registration lives
// is listed with its id and last heartbeat only.
type Instance struct {
	ID      string `json:"id"`
	Addr    string `json:"addr"`
	Version string `json:"version"`
	// StartedAt is when the instance started; LastSeen its last heartbeat.
	StartedAt *time.Time `json:"startedAt"`
	LastSeen  *time.Time `json:"lastSeen"`
	// TasksRunning is how many task runs it had at its last heartbeat.
	TasksRunning int `json:"tasksRunning"`
	// SingleInstance is true when it runs in single-instance mode.
	SingleInstance bool `json:"singleInstance"`
	// StorageLayout is the layout of the Redis keys its version writes (1:
	// versions before the field; absent when unknown): see the operations
	// runbook, "Upgrading".
	StorageLayout int `json:"storageLayout,omitempty"`
	// Alive is true when it heartbeated within one lock lease.
	Alive bool `json:"alive"`
}

// InstanceList answers GET /v1/instances, newest heartbeat first.
type InstanceList struct {
	Instances []Instance `json:"instances"`
	// Degraded: Redis is unreachable and the list holds what this instance
	// knows of itself only; the others' liveness is unknown.
	Degraded bool `json:"degraded"`
}

// FeedEvent is one event of the feed (GET /v1/events): a plan or task
// transition or an operator action. Ids it is not about are "".
type FeedEvent struct {
	// ID is the event's cursor: read after it to get the events that follow.
	ID       string         `json:"id"`
	Type     string         `json:"type"`
	At       time.Time      `json:"at"`
	PlanID   string         `json:"planId"`
	TaskID   string         `json:"taskId"`
	TenantID string         `json:"tenantId"`
	Data     map[string]any `json:"data"`
}

// Feed is a page of the event feed, oldest first.
type Feed struct {
	Events []FeedEvent `json:"events"`
	// NextCursor is the "after" of the next read: the last entry examined
	// (with a filter, entries skipped count), or the cursor read from when
	// there was none.
	NextCursor string `json:"nextCursor"`
}

// Readiness answers GET /readyz when the instance is ready.
type Readiness struct {
	Status  string      `json:"status"`
	Version string      `json:"version"`
	Checks  ReadyChecks `json:"checks"`
}

// ReadyChecks is the "checks" object of GET /readyz (in the 503 problem
// too). Redis decides readiness; the rest informs.
type ReadyChecks struct {
	// Redis is "ok" or why Redis did not answer.
	Redis string `json:"redis"`
	// Degraded is true while answers may come from memory.
	Degraded bool `json:"degraded"`
	// PendingWrites is how many writes wait in memory to be written back
	// to Redis (single-instance mode).
	PendingWrites int `json:"pendingWrites"`
	// SelfCheck is the Redis self-check (nil when the server has none).
	SelfCheck *SelfCheck `json:"selfCheck"`
}

// SelfCheck reports the Redis settings that decide whether deploycoord's
// data survives (maxmemory-policy, persistence) and whether Redis restarted
// since this instance started. Its warnings do not make the instance
// unready.
type SelfCheck struct {
	Warnings []string `json:"warnings"`
	// RedisVersion and RunID identify the server ("" when unknown).
	RedisVersion string `json:"redisVersion"`
	RunID        string `json:"runId"`
	// Restarted is true when the server's run id changed since this
	// instance started: Redis restarted or failed over, and writes
	// acknowledged before may be lost.
	Restarted bool `json:"restarted"`
	// CheckedAt is when the settings were last read (null: never).
	CheckedAt *time.Time `json:"checkedAt"`
	// Error says why the last check failed ("" when it did not).
	Error string `json:"error"`
}

func instanceJSON(v facade.InstanceView) Instance {
	return Instance{
		ID: v.ID, Addr: v.Addr, Version: v.Version, StartedAt: timeOrNull(v.StartedAt), LastSeen: timeOrNull(v.LastSeen),
		TasksRunning: v.TasksRunning, SingleInstance: v.SingleInstance, StorageLayout: v.StorageLayout, Alive: v.Alive,
	}
}

func feedEventJSON(ev task.FeedEvent) FeedEvent {
	data := ev.Data
	if data == nil {
		data = map[string]any{}
	}
	return FeedEvent{ID: ev.ID, Type: ev.Type, At: ev.At.UTC(), PlanID: ev.PlanID, TaskID: ev.TaskID, TenantID: ev.TenantID, Data: data}
}
