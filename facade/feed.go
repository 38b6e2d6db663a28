package facade

import (
	"context"
	"time"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Event feed limits.
const (
	// EventsLimitDefault is the page size of Events when none is asked.
	EventsLimitDefault = 100
	// EventsLimitMax is the largest page accepted.
	EventsLimitMax = 1000
	// EventsWaitMax is the longest long-poll accepted.
	EventsWaitMax = 60 * time.Second
)

// Events returns feed events after f.After, waiting up to wait for one when
// there is none (a long poll), and the cursor to continue from.
func (c *Coordinator) Events(ctx context.Context, f task.FeedFilter, wait time.Duration) ([]task.FeedEvent, string, error) {
	switch {
	case f.After != "" && !task.ValidFeedCursor(f.After):
		return nil, "", wrapf(ErrInvalid, "after %s is not a feed cursor (like 1732233600000-0, or $ for new events only)", task.Quote(f.After))
	case f.Limit < 0 || f.Limit > EventsLimitMax:
		return nil, "", wrapf(ErrInvalid, "limit %d out of range 1..%d", f.Limit, EventsLimitMax)
	case wait < 0 || wait > EventsWaitMax:
		return nil, "", wrapf(ErrInvalid, "wait %s out of range 0..%s", wait, EventsWaitMax)
	case f.PlanID != "" && !plan.ValidID(f.PlanID):
		return nil, "", wrapf(ErrInvalid, "planId %s is not a plan id", task.Quote(f.PlanID))
	case f.TenantID != "" && !task.ValidTenantID(f.TenantID):
		return nil, "", wrapf(ErrInvalid, "tenantId %s is not a valid tenant id", task.Quote(f.TenantID))
	case f.Type != "" && !task.ValidEventType(f.Type):
		return nil, "", wrapf(ErrInvalid, "type %s is not an event type (like task.failed)", task.Quote(f.Type))
	}
	if f.Limit == 0 {
		f.Limit = EventsLimitDefault
	}
	evs, next, err := c.store.ReadEvents(ctx, f, wait)
	if err != nil {
		return nil, "", translate(err, "events")
	}
	return evs, next, nil
}

// MaxStatusTenants is the most tenants one TasksByTenant call accepts.
const MaxStatusTenants = 1000

// TasksByTenant returns the current tasks of up to MaxStatusTenants tenants
// in a bounded number of round trips; tenants without a task are absent.
func (c *Coordinator) TasksByTenant(ctx context.Context, tenantIDs []string) (map[string]TaskView, error) {
	if len(tenantIDs) > MaxStatusTenants {
		return nil, wrapf(ErrInvalid, "%d tenant ids, at most %d", len(tenantIDs), MaxStatusTenants)
	}
	for _, id := range tenantIDs {
		if err := checkTenant(id); err != nil {
			return nil, err
		}
	}
	ctx, cancel := c.queryCtx(ctx)
	defer cancel()
	ts, cks, err := c.store.TasksByTenant(ctx, tenantIDs)
	if err != nil {
		return nil, translate(err, "tasks")
	}
	degraded := c.degradedOf(ctx)
	out := make(map[string]TaskView, len(ts))
	for id, t := range ts {
		out[id] = c.taskView(t, cks[id], degraded)
	}
	return out, nil
}
