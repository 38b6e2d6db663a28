package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog/hlog"

	"github.com/deploycoord/deploycoord/facade"
)

// MaxRetryPlanBodyBytes bounds a POST /v1/plans/{planId}/retry body when
// Config.MaxSmallBodyBytes is smaller: room for facade.MaxBulkTenants tenant
// ids of the longest form (128 characters, quoted, with a separator) and
// the other fields.
const MaxRetryPlanBodyBytes = 2 << 20

// PlanRetry answers POST /v1/plans/{planId}/retry: how many tasks the
// selection matched, the tenants retried (for a dry run, that would be) and
// the ones skipped, each with the code and detail a single retry of it
// would have been refused with.
type PlanRetry struct {
	PlanID   string      `json:"planId"`
	DryRun   bool        `json:"dryRun"`
	Selected int         `json:"selected"`
	Retried  []string    `json:"retried"`
	Skipped  []RetrySkip `json:"skipped"`
	// NotSelected: tenants named in the request that the selection did not
	// hold (not in this plan, or in another status); nothing was done.
	NotSelected []string `json:"notSelected"`
}

// RetrySkip is a selected task a bulk retry did not retry.
type RetrySkip struct {
	TenantID string `json:"tenantId"`
	TaskID   string `json:"taskId"`
	// Code and Detail are those of the problem a single retry of the
	// tenant would have been answered (TASK_RUNNING, ATTEMPT_MISMATCH, ...).
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// retryPlanBodyBytes is the body limit of POST /v1/plans/{planId}/retry.
func (a *api) retryPlanBodyBytes() int64 {
	return max(a.cfg.MaxSmallBodyBytes, MaxRetryPlanBodyBytes)
}

// POST /v1/plans/{planId}/retry: 202 with what was retried and skipped, or
// 200 for a dry run (nothing changed).
func (a *api) retryPlan(w http.ResponseWriter, r *http.Request) {
	if _, err := parseQuery(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	var body facade.PlanRetryRequest
	if err := decodeJSON(w, r, a.retryPlanBodyBytes(), &body); err != nil {
		a.writeError(w, r, err)
		return
	}
	noteReason(r, body.Reason)
	res, err := a.plans.RetryPlan(r.Context(), chi.URLParam(r, paramPlanID), body, a.actor(r))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := PlanRetry{PlanID: res.PlanID, DryRun: res.DryRun, Selected: res.Selected,
		Retried: res.Retried, Skipped: make([]RetrySkip, len(res.Skipped)), NotSelected: res.NotSelected}
	if out.Retried == nil {
		out.Retried = []string{}
	}
	if out.NotSelected == nil {
		out.NotSelected = []string{}
	}
	for i, sk := range res.Skipped {
		_, code, detail, known := classify(sk.Err)
		if !known {
			hlog.FromRequest(r).Error().Str("tenant_id", sk.TenantID).Str("task_id", sk.TaskID).Err(sk.Err).
				Msg("bulk retry: retrying a task failed")
		}
		p := newProblem(r, http.StatusConflict, code, detail)
		out.Skipped[i] = RetrySkip{TenantID: sk.TenantID, TaskID: sk.TaskID, Code: p.Code, Detail: p.Detail}
	}
	status := http.StatusAccepted
	if res.DryRun {
		status = http.StatusOK
	}
	a.writeJSON(w, r, status, out, false)
}
