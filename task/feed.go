package task

import "time"

// FeedEvent is one entry of the event feed: a plan or task transition or an
// operator action, published to one bounded stream that external systems
// poll. Type uses the timeline names (task.stage_succeeded, ...) and
// plan.* / lock.* names for plan and lock events.
type FeedEvent struct {
	// ID is the feed cursor of the event, set by the store.
	ID       string
	Type     string
	At       time.Time
	PlanID   string
	TaskID   string
	TenantID string
	Data     map[string]any
}

// FeedFilter selects events of the feed.
type FeedFilter struct {
	// After is the cursor to read after ("" = from the oldest kept event,
	// "$" = only new events).
	After    string
	Limit    int
	PlanID   string
	TenantID string
	Type     string
}
