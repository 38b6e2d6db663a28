package facade

import (
	"errors"
	"fmt"

	"github.com/deploycoord/deploycoord/tenantlock"
)

// errStopping is why a run whose lease is unconfirmed ends when the
// instance stops.
var errStopping = errors.New("facade: instance stopping while the lease is unconfirmed")

// leaseLostReason is the one sentence people read for a lost lease (the
// task.lease_lost entry of the timeline and the feed): what happened and
// what to do, without the wrapped chain of internals, which goes to the log.
func leaseLostReason(err error) string {
	var re *tenantlock.RefusedError
	switch {
	case errors.As(err, &re) && re.Current.Held && re.Current.Holder.Instance != "":
		return fmt.Sprintf("This instance lost the tenant's lock to instance %s (task %s) and stopped the run without writing; "+
			"that task carries on, nothing to do here.", re.Current.Holder.Instance, orDash(re.Current.Holder.TaskID))
	case errors.As(err, &re) && re.Current.Held:
		return "This instance lost the tenant's lock (someone else holds it now) and stopped the run without writing; " +
			"see the lock (GET /v1/tenants/{tenantId}/lock) before retrying."
	case errors.Is(err, errStopping):
		return "This instance stopped while Redis was not confirming the tenant's lock, so the run stopped without writing; " +
			"retry the task or resume the plan."
	}
	return "The tenant's lock lapsed or vanished before Redis could confirm it (Redis slow, unreachable, or restarted without it), " +
		"so this instance stopped the run without writing; retry the task once Redis answers."
}
