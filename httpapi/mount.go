package httpapi

import (
	"context"
	"net/http"
)

// SetCaller records who sends r, for a handler of Config.Mounts that
// authenticates its own way (the web console's session cookie): the access
// and audit logs name the actor and role, and a refused or failed action
// goes to the event feed under that actor, as for a /v1 request.
func SetCaller(r *http.Request, actor string, role Role) {
	info := infoOf(r)
	info.actor, info.role = actor, role
}

// AuditAction marks r, served by a handler of Config.Mounts, as an action:
// it is written to the audit log like a mutating /v1 request, with the plan
// or tenant it is about and its reason, and, refused or failed (4xx, 5xx),
// recorded in the event feed.
func AuditAction(r *http.Request, planID, tenantID, reason string) {
	info := infoOf(r)
	info.audit = true
	info.planID, info.tenantID = planID, tenantID
	noteReason(r, reason)
}

// NoteCode records the stable code (CodePermissionDenied, ...) of the
// error a handler of Config.Mounts answered r with in its own form (a
// page): the event feed's record of a refused action carries it, as for a
// /v1 problem.
func NoteCode(r *http.Request, code string) { infoOf(r).code = code }

// Deny records why a handler of Config.Mounts refused r (a sign-in with an
// unknown token, a viewer's action): the request is written to the audit
// log at Warn with that reason.
func Deny(r *http.Request, why string) { infoOf(r).denied = why }

// ClientAddr returns the address of the client of the request ctx belongs
// to, as the API resolved it (through Config.TrustedProxies); "" outside a
// request served by this package.
func ClientAddr(ctx context.Context) string {
	if info, ok := ctx.Value(infoKey).(*requestInfo); ok {
		return info.client
	}
	return ""
}

// LeaveInFlight gives back r's Config.MaxInFlight slot, for a long-lived
// request of a handler of Config.Mounts that is bounded by a limit of its
// own from then on (the web console's event stream). It is safe to call
// more than once.
func LeaveInFlight(r *http.Request) { infoOf(r).leaveInFlight() }
