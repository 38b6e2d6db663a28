package task

import (
	"regexp"
	"time"
)

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

var (
	// feedCursorRe is a feed cursor: "$" (only new events) or the id of a
	// stream entry, <ms>-<seq>.
	feedCursorRe = regexp.MustCompile(`^(\$|[0-9]{1,20}-[0-9]{1,20})$`)
	// eventTypeRe is an event type: a family, a dot and a name
	// (task.stage_succeeded).
	eventTypeRe = regexp.MustCompile(`^[a-z]+\.[a-z_]{1,64}$`)
)

// ValidFeedCursor reports whether s may be FeedFilter.After: "$" (only new
// events) or a cursor of the feed, <ms>-<seq> (like 1732233600000-0). The
// empty string, "from the oldest kept event", is not a cursor: callers
// treat it apart.
func ValidFeedCursor(s string) bool { return feedCursorRe.MatchString(s) }

// ValidEventType reports whether s has the form of a FeedEvent type, like
// task.failed or plan.created.
func ValidEventType(s string) bool { return eventTypeRe.MatchString(s) }
