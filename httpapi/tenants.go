package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// TenantService is what the tenant and task routes (/v1/tenants...,
// /v1/tasks/{taskId}) call; *facade.Coordinator implements it. The errors
// each method returns are the contract of the error table (see Service).
type TenantService interface {
	// TaskByTenant returns the tenant's current task. Returns ErrInvalid,
	// ErrNotFound, ErrUnavailable.
	TaskByTenant(ctx context.Context, tenantID string) (facade.TaskView, error)
	// TasksByTenant returns the current tasks of up to 1000 tenants in a
	// bounded number of round trips; tenants without a task are absent.
	// Returns ErrInvalid, ErrUnavailable.
	TasksByTenant(ctx context.Context, tenantIDs []string) (map[string]facade.TaskView, error)
	// Task returns a task by id. Returns ErrInvalid, ErrNotFound, ErrUnavailable.
	Task(ctx context.Context, taskID string) (facade.TaskView, error)
	// Checkpoint returns the checkpoint of the tenant's current task.
	// Returns ErrInvalid, ErrNotFound, ErrUnavailable.
	Checkpoint(ctx context.Context, tenantID string) (checkpoint.Checkpoint, error)
	// HasCheckpoint reports whether the tenant's current task has a
	// checkpoint. Returns ErrInvalid, ErrUnavailable.
	HasCheckpoint(ctx context.Context, tenantID string) (bool, error)
	// History returns the tenant's tasks, newest first. Returns ErrInvalid,
	// ErrUnavailable.
	History(ctx context.Context, tenantID string, limit int) ([]facade.TaskView, error)
	// Timeline returns the timeline of the tenant's current task, oldest
	// first. Returns ErrInvalid, ErrNotFound, ErrUnavailable.
	Timeline(ctx context.Context, tenantID string, limit int) (facade.TimelineView, error)
	// Lock returns the tenant lock. Returns ErrInvalid, ErrUnavailable.
	Lock(ctx context.Context, tenantID string) (tenantlock.Info, error)
	// ReleaseLock force-releases the tenant lock if its fence is
	// expectedFence. Returns ErrInvalid, ErrNotFound, ErrLockMismatch,
	// ErrUnavailable.
	ReleaseLock(ctx context.Context, tenantID string, expectedFence int64, reason string, a facade.Actor) (tenantlock.Info, error)
	// Retry re-runs the tenant's current task. Returns ErrInvalid,
	// ErrNotFound, ErrTaskRunning, ErrTaskCompleted, ErrTaskPending,
	// ErrAttemptMismatch, ErrInvalidState, ErrTenantLocked, ErrShuttingDown,
	// ErrUnavailable.
	Retry(ctx context.Context, tenantID string, req facade.RetryRequest, a facade.Actor) (facade.RetryResult, error)
	// PauseTask asks the tenant's task to pause. Returns ErrInvalid,
	// ErrNotFound, ErrTaskCompleted, ErrInvalidState, ErrUnavailable.
	PauseTask(ctx context.Context, tenantID, reason string, a facade.Actor) (facade.TaskView, error)
	// ResumeTask resumes the tenant's paused task. Returns ErrInvalid,
	// ErrNotFound, ErrInvalidState, ErrTaskRunning, ErrTenantLocked,
	// ErrShuttingDown, ErrUnavailable.
	ResumeTask(ctx context.Context, tenantID, reason string, a facade.Actor) (facade.TaskView, error)
	// CancelTask cancels the tenant's task. Returns ErrInvalid, ErrNotFound,
	// ErrTaskCompleted, ErrInvalidState, ErrUnavailable.
	CancelTask(ctx context.Context, tenantID, reason string, a facade.Actor) (facade.TaskView, error)
}

// GET /v1/tenants/{tenantId}/task
func (a *api) tenantTask(w http.ResponseWriter, r *http.Request) {
	if _, err := parseQuery(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	v, err := a.tenants.TaskByTenant(r.Context(), chi.URLParam(r, paramTenantID))
	a.answerTaskGet(w, r, v, err)
}

// GET /v1/tasks/{taskId}
func (a *api) getTask(w http.ResponseWriter, r *http.Request) {
	if _, err := parseQuery(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	v, err := a.tenants.Task(r.Context(), chi.URLParam(r, paramTaskID))
	a.answerTaskGet(w, r, v, err)
}

// GET /v1/tenants/{tenantId}/checkpoint
func (a *api) getCheckpoint(w http.ResponseWriter, r *http.Request) {
	if _, err := parseQuery(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	tenantID := chi.URLParam(r, paramTenantID)
	c, err := a.tenants.Checkpoint(r.Context(), tenantID)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	a.writeJSON(w, r, http.StatusOK, checkpointJSON(tenantID, c), false)
}

// HEAD /v1/tenants/{tenantId}/checkpoint: 200 or 404, no body.
func (a *api) headCheckpoint(w http.ResponseWriter, r *http.Request) {
	if _, err := parseQuery(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	tenantID := chi.URLParam(r, paramTenantID)
	ok, err := a.tenants.HasCheckpoint(r.Context(), tenantID)
	switch {
	case err != nil:
		a.writeError(w, r, err)
	case !ok:
		WriteProblem(w, r, http.StatusNotFound, CodeNotFound, "tenant "+tenantID+" has no checkpoint")
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
	}
}

// GET /v1/tenants/{tenantId}/history
func (a *api) history(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "limit")
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	limit, err := q.limit(plan.LimitMax)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	tenantID := chi.URLParam(r, paramTenantID)
	vs, err := a.tenants.History(r.Context(), tenantID, limit)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	deg := anyDegraded(vs)
	a.writeJSON(w, r, http.StatusOK, History{TenantID: tenantID, Tasks: tasksJSON(vs), Degraded: deg}, deg)
}

// GET /v1/tenants/{tenantId}/timeline
func (a *api) timeline(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "limit")
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	limit, err := q.limit(task.MaxTimeline)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	tenantID := chi.URLParam(r, paramTenantID)
	tv, err := a.tenants.Timeline(r.Context(), tenantID, limit)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	a.writeJSON(w, r, http.StatusOK, Timeline{TenantID: tenantID, TaskID: tv.TaskID, Events: eventsJSON(tv.Events), Degraded: tv.Degraded}, tv.Degraded)
}

// POST /v1/tenants:status
func (a *api) tenantsStatus(w http.ResponseWriter, r *http.Request) {
	if _, err := parseQuery(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	var body TenantsStatusRequest
	if err := decodeJSON(w, r, max(a.cfg.MaxSmallBodyBytes, statusBodyBytes), &body); err != nil {
		a.writeError(w, r, err)
		return
	}
	switch n := len(body.TenantIDs); {
	case n == 0:
		a.writeError(w, r, badRequest("tenantIds: at least one tenant id is required"))
		return
	case n > MaxStatusTenants:
		a.writeError(w, r, badRequest(fmt.Sprintf("tenantIds: %d ids, at most %d", n, MaxStatusTenants)))
		return
	}
	ids := make([]string, 0, len(body.TenantIDs))
	seen := make(map[string]bool, len(body.TenantIDs))
	for i, id := range body.TenantIDs {
		if !task.ValidTenantID(id) {
			a.writeError(w, r, badRequest(fmt.Sprintf("tenantIds[%d]: tenant id %s is not valid", i, task.Quote(id))))
			return
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	// One call for all ids: the store reads them in two round trips
	// whatever their number (pipelined), not one lookup per id.
	views, err := a.tenants.TasksByTenant(r.Context(), ids)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := TenantsStatus{Tasks: make(map[string]*TaskDetail, len(ids))}
	// A tenant without a task is null. (When Redis is unreachable the
	// store answers from memory only if memory holds every tenant asked.)
	degraded := false
	for _, id := range ids {
		v, ok := views[id]
		if !ok {
			out.Tasks[id] = nil
			continue
		}
		out.Tasks[id] = taskDetailJSON(v)
		degraded = degraded || v.Degraded
	}
	out.Degraded = degraded
	a.writeJSON(w, r, http.StatusOK, out, degraded)
}

// POST /v1/tenants/{tenantId}/retry: 202 with the task, or 200 with the
// stages that would run for a dry run.
func (a *api) retry(w http.ResponseWriter, r *http.Request) {
	var body facade.RetryRequest
	if err := a.decodeSmall(w, r, &body); err != nil {
		a.writeError(w, r, err)
		return
	}
	noteReason(r, body.Reason)
	res, err := a.tenants.Retry(r.Context(), chi.URLParam(r, paramTenantID), body, a.actor(r))
	switch {
	case err != nil:
		a.writeError(w, r, err)
	case res.DryRun || res.Task == nil:
		wouldRun := res.WouldRun
		if wouldRun == nil {
			wouldRun = []string{}
		}
		a.writeJSON(w, r, http.StatusOK, DryRun{DryRun: true, WouldRun: wouldRun}, false)
	default:
		a.answerTask(w, r, http.StatusAccepted, *res.Task, nil)
	}
}

// taskAction serves POST /v1/tenants/{tenantId}/pause, resume and cancel with do.
func (a *api) taskAction(w http.ResponseWriter, r *http.Request,
	do func(ctx context.Context, tenantID, reason string, act facade.Actor) (facade.TaskView, error)) {
	var body ReasonRequest
	if err := a.decodeSmall(w, r, &body); err != nil {
		a.writeError(w, r, err)
		return
	}
	noteReason(r, body.Reason)
	v, err := do(r.Context(), chi.URLParam(r, paramTenantID), body.Reason, a.actor(r))
	a.answerTask(w, r, http.StatusOK, v, err)
}

// POST /v1/tenants/{tenantId}/pause
func (a *api) pauseTask(w http.ResponseWriter, r *http.Request) {
	a.taskAction(w, r, a.tenants.PauseTask)
}

// POST /v1/tenants/{tenantId}/resume
func (a *api) resumeTask(w http.ResponseWriter, r *http.Request) {
	a.taskAction(w, r, a.tenants.ResumeTask)
}

// POST /v1/tenants/{tenantId}/cancel
func (a *api) cancelTask(w http.ResponseWriter, r *http.Request) {
	a.taskAction(w, r, a.tenants.CancelTask)
}

// answerTaskGet answers a GET of one task, with an ETag.
func (a *api) answerTaskGet(w http.ResponseWriter, r *http.Request, v facade.TaskView, err error) {
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	a.writeCacheable(w, r, taskDetailJSON(v), v.Degraded)
}

func (a *api) answerTask(w http.ResponseWriter, r *http.Request, status int, v facade.TaskView, err error) {
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	a.writeJSON(w, r, status, taskDetailJSON(v), v.Degraded)
}

// GET /v1/tenants/{tenantId}/lock
func (a *api) getLock(w http.ResponseWriter, r *http.Request) {
	if _, err := parseQuery(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	tenantID := chi.URLParam(r, paramTenantID)
	info, err := a.tenants.Lock(r.Context(), tenantID)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	a.writeJSON(w, r, http.StatusOK, lockJSON(tenantID, info), false)
}

// DELETE /v1/tenants/{tenantId}/lock (break-glass)
func (a *api) releaseLock(w http.ResponseWriter, r *http.Request) {
	var body ReleaseLockRequest
	if err := a.decodeSmall(w, r, &body); err != nil {
		a.writeError(w, r, err)
		return
	}
	noteReason(r, body.Reason)
	tenantID := chi.URLParam(r, paramTenantID)
	info, err := a.tenants.ReleaseLock(r.Context(), tenantID, body.ExpectedFence, body.Reason, a.actor(r))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := ReleasedLock{
		TenantID: tenantID, Released: true, PlanID: info.Holder.PlanID, TaskID: info.Holder.TaskID,
		Owner: info.Holder.Instance, Fence: info.Fence,
	}
	a.writeJSON(w, r, http.StatusOK, out, false)
}
