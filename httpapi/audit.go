package httpapi

import (
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/rs/zerolog/hlog"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// RefusalRecorder is what the audit trail calls to put a refused or failed
// action on the event feed; *facade.Coordinator implements it.
type RefusalRecorder interface {
	// RecordRefusal records an operator action that was refused or failed
	// in the event feed (operator.refused). It never blocks.
	RecordRefusal(r facade.Refusal)
}

// auditRequest writes the audit line of a mutating request, or of any
// request refused with 401, 403 or 429: who (token name and role), what
// (the route), on what (plan or tenant id), why (the body's reason), from
// where, under which request id, and how it ended. A refused request is
// logged at Warn with the reason it was refused. Tokens never appear: only
// their names.
func (a *api) auditRequest(r *http.Request, info *requestInfo, route string, status int) {
	log := hlog.FromRequest(r)
	ev := log.Info()
	if info.denied != "" {
		ev = log.Warn().Str("denied", info.denied)
	}
	if info.planID != "" {
		ev = ev.Str("plan_id", info.planID)
	}
	if info.tenantID != "" {
		ev = ev.Str("tenant_id", info.tenantID)
	}
	if info.idemKey != "" {
		ev = ev.Str("idempotency_key", info.idemKey).Bool("replayed", info.replayed)
	}
	ev.Str("actor", info.actor).Str("role", string(info.role)).Str("action", r.Method+" "+route).
		Str("reason", info.reason).Str("client_addr", info.client).Int("status", status).Msg("audit")
	// A refused or failed action of an authenticated caller also goes to
	// the event feed, under the actor its service call had or would have
	// had (Config.ActorFunc). Unauthenticated (401) and rate-limited (429)
	// requests stay in the log only, so that nobody can flood the bounded
	// feed.
	if status >= 400 && info.actor != "" && status != http.StatusUnauthorized && status != http.StatusTooManyRequests &&
		status != statusClientClosed && a.refusals != nil {
		// A reason that was refused for what it holds (control characters,
		// say) goes to the feed quoted, never raw.
		reason := info.reason
		if reason != "" && plan.CheckReason(reason) != nil {
			reason = task.Quote(reason)
		}
		a.refusals.RecordRefusal(facade.Refusal{
			Actor:  a.actor(r),
			Action: r.Method + " " + route, PlanID: info.planID, TenantID: info.tenantID, Reason: reason,
			Status: status, Code: info.code,
		})
	}
}

// noteReason records the reason of a request's body for the audit log.
func noteReason(r *http.Request, reason string) {
	reason = strings.ToValidUTF8(reason, string(utf8.RuneError))
	if len(reason) > maxAuditReason {
		cut := maxAuditReason
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		reason = reason[:cut] + "…"
	}
	infoOf(r).reason = reason
}

// notePlan records the id of the plan a request created, for the audit log.
func notePlan(r *http.Request, planID string) { infoOf(r).planID = planID }
