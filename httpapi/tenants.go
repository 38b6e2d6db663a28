package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// GET /v1/tenants/{tenantId}/task
func (a *api) tenantTask(w http.ResponseWriter, r *http.Request) {
	if _, err := parseQuery(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	v, err := a.svc.TaskByTenant(r.Context(), chi.URLParam(r, paramTenantID))
	a.answerTaskGet(w, r, v, err)
}

// GET /v1/tasks/{taskId}
func (a *api) getTask(w http.ResponseWriter, r *http.Request) {
	if _, err := parseQuery(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	v, err := a.svc.Task(r.Context(), chi.URLParam(r, paramTaskID))
	a.answerTaskGet(w, r, v, err)
}

// GET /v1/tenants/{tenantId}/checkpoint
func (a *api) getCheckpoint(w http.ResponseWriter, r *http.Request) {
	if _, err := parseQuery(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	tenantID := chi.URLParam(r, paramTenantID)
	c, err := a.svc.Checkpoint(r.Context(), tenantID)
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
	ok, err := a.svc.HasCheckpoint(r.Context(), tenantID)
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
	vs, err := a.svc.History(r.Context(), tenantID, limit)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	a.writeJSON(w, r, http.StatusOK, History{TenantID: tenantID, Tasks: tasksJSON(vs)}, anyDegraded(vs))
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
	tv, err := a.svc.Timeline(r.Context(), tenantID, limit)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	a.writeJSON(w, r, http.StatusOK, Timeline{TenantID: tenantID, TaskID: tv.TaskID, Events: eventsJSON(tv.Events)}, tv.Degraded)
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
	views, err := a.svc.TasksByTenant(r.Context(), ids)
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
	res, err := a.svc.Retry(r.Context(), chi.URLParam(r, paramTenantID), body, a.actor(r))
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
func (a *api) pauseTask(w http.ResponseWriter, r *http.Request) { a.taskAction(w, r, a.svc.PauseTask) }

// POST /v1/tenants/{tenantId}/resume
func (a *api) resumeTask(w http.ResponseWriter, r *http.Request) {
	a.taskAction(w, r, a.svc.ResumeTask)
}

// POST /v1/tenants/{tenantId}/cancel
func (a *api) cancelTask(w http.ResponseWriter, r *http.Request) {
	a.taskAction(w, r, a.svc.CancelTask)
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
	info, err := a.svc.Lock(r.Context(), tenantID)
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
	info, err := a.svc.ReleaseLock(r.Context(), tenantID, body.ExpectedFence, body.Reason, a.actor(r))
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
