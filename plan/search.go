package plan

import (
	"time"

	"github.com/deploycoord/deploycoord/task"
)

// TaskSearch selects tasks across plans (GET /v1/tasks), newest first: the
// tasks whose status is one of Statuses, and the RUNNING tasks Match keeps
// (orphaned or hung ones: the caller's rule), narrowed by Stage, PlanID and
// Since. With no Statuses and no Match, every task.
type TaskSearch struct {
	// Statuses keeps the tasks in these statuses.
	Statuses []task.Status
	// Match, when set, keeps the RUNNING tasks it returns true for, besides
	// those Statuses keeps. It is called with the task record as read.
	Match func(t *task.Task) bool
	// MatchStartedBefore, when set, tells the store that Match keeps no
	// task whose current run started after it (a stage running for longer
	// than d started before now - d): the store need not read those.
	MatchStartedBefore time.Time
	// Stage keeps only tasks whose current (or last) stage has this name ("" = any).
	Stage string
	// PlanID keeps only the tasks of this plan ("" = every plan).
	PlanID string
	// Since keeps only tasks that entered their status at or after it.
	Since time.Time
	// Cursor continues a previous search ("" = from the newest).
	Cursor string
	Limit  int
}
