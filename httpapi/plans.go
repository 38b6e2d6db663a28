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

// PlanService is what the plan routes (/v1/plans...) call;
// *facade.Coordinator implements it. The errors each method returns are the
// contract of the error table (see Service).
type PlanService interface {
	// CreatePlan stores a plan from spec and, unless spec.Start is false,
	// starts it. Returns ErrInvalid, ErrShuttingDown, ErrUnavailable.
	CreatePlan(ctx context.Context, spec plan.Spec, a facade.Actor) (facade.PlanView, error)
	// StartPlan starts a CREATED plan. Returns ErrInvalid, ErrNotFound,
	// ErrPlanFinished, ErrInvalidState, ErrUnavailable.
	StartPlan(ctx context.Context, planID, reason string, a facade.Actor) (facade.PlanView, error)
	// PausePlan pauses a RUNNING plan. Returns ErrInvalid, ErrNotFound,
	// ErrPlanFinished, ErrInvalidState, ErrUnavailable.
	PausePlan(ctx context.Context, planID, reason string, a facade.Actor) (facade.PlanView, error)
	// ResumePlan resumes a PAUSED plan or takes over a RUNNING one. Returns
	// ErrInvalid, ErrNotFound, ErrPlanFinished, ErrInvalidState,
	// ErrShuttingDown, ErrUnavailable.
	ResumePlan(ctx context.Context, planID string, o facade.ResumeOptions, a facade.Actor) (facade.PlanView, error)
	// CancelPlan cancels a plan. Returns ErrInvalid, ErrNotFound,
	// ErrPlanFinished, ErrInvalidState, ErrUnavailable.
	CancelPlan(ctx context.Context, planID, reason string, a facade.Actor) (facade.PlanView, error)
	// RepairCounts recomputes a plan's counts from its task records.
	// Returns ErrInvalid, ErrNotFound, ErrUnavailable.
	RepairCounts(ctx context.Context, planID, reason string, a facade.Actor) (facade.PlanView, error)
	// Plan returns a plan with its counts. Returns ErrInvalid, ErrNotFound,
	// ErrUnavailable.
	Plan(ctx context.Context, planID string) (facade.PlanView, error)
	// Plans lists plans, newest first. Returns ErrInvalid, ErrUnavailable.
	Plans(ctx context.Context, f plan.ListFilter) ([]facade.PlanView, string, error)
	// PlanTasks lists a plan's tasks. Returns ErrInvalid, ErrNotFound,
	// ErrUnavailable.
	PlanTasks(ctx context.Context, planID string, f plan.TaskFilter) ([]facade.TaskView, string, error)
	// SearchTasks returns the tasks a query selects across plans, newest
	// first (GET /v1/tasks). Returns ErrInvalid, ErrUnavailable.
	SearchTasks(ctx context.Context, q facade.TaskQuery) (facade.TaskPage, error)
	// RetryPlan retries the plan's tasks a selection picks, each as Retry
	// would; a task it does not retry is listed with the reason. Returns
	// ErrInvalid, ErrNotFound, ErrShuttingDown, ErrUnavailable.
	RetryPlan(ctx context.Context, planID string, req facade.PlanRetryRequest, a facade.Actor) (facade.PlanRetryResult, error)
}

// POST /v1/plans
func (a *api) createPlan(w http.ResponseWriter, r *http.Request) {
	if _, err := parseQuery(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	var spec plan.Spec
	if err := decodeJSON(w, r, a.cfg.MaxBodyBytes, &spec); err != nil {
		a.writeError(w, r, err)
		return
	}
	v, err := a.plans.CreatePlan(r.Context(), spec, a.actor(r))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	notePlan(r, v.ID)
	w.Header().Set("Location", "/v1/plans/"+v.ID)
	a.writeJSON(w, r, http.StatusCreated, planJSON(v, true), v.Degraded)
}

// GET /v1/plans
func (a *api) listPlans(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "status", "limit", "cursor")
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	var f plan.ListFilter
	if s, ok := q.lookup("status"); ok {
		if f.Status = plan.Status(s); !f.Status.Valid() {
			a.writeError(w, r, badRequest(fmt.Sprintf("status %s is not a plan status (%v)", task.Quote(s), plan.Statuses)))
			return
		}
	}
	if f.Limit, err = q.limit(plan.LimitMax); err != nil {
		a.writeError(w, r, err)
		return
	}
	if f.Cursor, err = q.cursor(); err != nil {
		a.writeError(w, r, err)
		return
	}
	vs, next, err := a.plans.Plans(r.Context(), f)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := PlanList{Plans: make([]Plan, len(vs)), NextCursor: next}
	degraded := false
	for i, v := range vs {
		out.Plans[i] = planJSON(v, false)
		degraded = degraded || v.Degraded
	}
	out.Degraded = degraded
	a.writeJSON(w, r, http.StatusOK, out, degraded)
}

// GET /v1/plans/{planId}
func (a *api) getPlan(w http.ResponseWriter, r *http.Request) {
	if _, err := parseQuery(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	v, err := a.plans.Plan(r.Context(), chi.URLParam(r, paramPlanID))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	a.writeCacheable(w, r, planJSON(v, true), v.Degraded)
}

// GET /v1/plans/{planId}/tasks
func (a *api) planTasks(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "status", "orphaned", "limit", "cursor")
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	var f plan.TaskFilter
	if s, ok := q.lookup("status"); ok {
		if f.Status = task.Status(s); !f.Status.Valid() {
			a.writeError(w, r, badRequest(fmt.Sprintf("status %s is not a task status (%v)", task.Quote(s), task.Statuses)))
			return
		}
	}
	if f.Orphaned, err = q.boolean("orphaned"); err != nil {
		a.writeError(w, r, err)
		return
	}
	if f.Limit, err = q.limit(plan.LimitMax); err != nil {
		a.writeError(w, r, err)
		return
	}
	if f.Cursor, err = q.cursor(); err != nil {
		a.writeError(w, r, err)
		return
	}
	vs, next, err := a.plans.PlanTasks(r.Context(), chi.URLParam(r, paramPlanID), f)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	deg := anyDegraded(vs)
	a.writeCacheable(w, r, TaskList{Tasks: tasksJSON(vs), NextCursor: next, Degraded: deg}, deg)
}

// planAction serves POST /v1/plans/{planId}/start, pause and cancel with do.
func (a *api) planAction(w http.ResponseWriter, r *http.Request,
	do func(ctx context.Context, planID, reason string, act facade.Actor) (facade.PlanView, error)) {
	var body ReasonRequest
	if err := a.decodeSmall(w, r, &body); err != nil {
		a.writeError(w, r, err)
		return
	}
	noteReason(r, body.Reason)
	v, err := do(r.Context(), chi.URLParam(r, paramPlanID), body.Reason, a.actor(r))
	a.answerPlan(w, r, v, err)
}

// POST /v1/plans/{planId}/start
func (a *api) startPlan(w http.ResponseWriter, r *http.Request) {
	a.planAction(w, r, a.plans.StartPlan)
}

// POST /v1/plans/{planId}/pause
func (a *api) pausePlan(w http.ResponseWriter, r *http.Request) {
	a.planAction(w, r, a.plans.PausePlan)
}

// POST /v1/plans/{planId}/cancel
func (a *api) cancelPlan(w http.ResponseWriter, r *http.Request) {
	a.planAction(w, r, a.plans.CancelPlan)
}

// POST /v1/plans/{planId}/repair-counts
func (a *api) repairCounts(w http.ResponseWriter, r *http.Request) {
	a.planAction(w, r, a.plans.RepairCounts)
}

// POST /v1/plans/{planId}/resume
func (a *api) resumePlan(w http.ResponseWriter, r *http.Request) {
	var body ResumePlanRequest
	if err := a.decodeSmall(w, r, &body); err != nil {
		a.writeError(w, r, err)
		return
	}
	noteReason(r, body.Reason)
	o := facade.ResumeOptions{Reason: body.Reason, IncludeOrphaned: body.IncludeOrphaned}
	v, err := a.plans.ResumePlan(r.Context(), chi.URLParam(r, paramPlanID), o, a.actor(r))
	a.answerPlan(w, r, v, err)
}

func (a *api) answerPlan(w http.ResponseWriter, r *http.Request, v facade.PlanView, err error) {
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	a.writeJSON(w, r, http.StatusOK, planJSON(v, true), v.Degraded)
}

// decodeSmall refuses query parameters and decodes a small JSON body.
func (a *api) decodeSmall(w http.ResponseWriter, r *http.Request, dst any) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	return decodeJSON(w, r, a.cfg.MaxSmallBodyBytes, dst)
}

func anyDegraded(vs []facade.TaskView) bool {
	for _, v := range vs {
		if v.Degraded {
			return true
		}
	}
	return false
}
