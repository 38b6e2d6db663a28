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
	// Of, when set and Data is nil, is the task event this feed event tells
	// of, and OfStatus the task's status after it: the event's data is
	// EventData(OfStatus, *Of), which a store may write without building
	// the map (the same JSON). Events read back from a feed carry Data.
	Of       *Event
	OfStatus Status
}

// EventData is the data of a task event in the feed: the task's status
// and the event's attempt, and each of its other fields that is set —
// stage, stageIndex, stageAttempt, delay and duration (as
// time.Duration.String writes them), reason, actor, role, requestId,
// instance, fence — then the event's own Data under the keys not taken.
func EventData(status Status, ev Event) map[string]any {
	data := map[string]any{"status": string(status), "attempt": ev.Attempt}
	set := func(k string, v any, ok bool) {
		if ok {
			data[k] = v
		}
	}
	set("stage", ev.Stage, ev.Stage != "")
	set("stageIndex", ev.StageIndex, ev.StageIndex != nil)
	set("stageAttempt", ev.StageAttempt, ev.StageAttempt != 0)
	set("delay", ev.Delay.D().String(), ev.Delay != 0)
	set("duration", ev.Duration.D().String(), ev.Duration != 0)
	set("reason", ev.Reason, ev.Reason != "")
	set("actor", ev.Actor, ev.Actor != "")
	set("role", ev.Role, ev.Role != "")
	set("requestId", ev.RequestID, ev.RequestID != "")
	set("instance", ev.Instance, ev.Instance != "")
	set("fence", ev.Fence, ev.Fence != 0)
	for k, v := range ev.Data {
		if _, taken := data[k]; !taken {
			data[k] = v
		}
	}
	return data
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
