package plan

import (
	"time"

	"github.com/deploycoord/deploycoord/task"
)

// Paging limits of listings.
const (
	// LimitDefault is the page size when a listing asks for none.
	LimitDefault = 100
	// LimitMax is the largest page size accepted.
	LimitMax = 1000
)

// ListFilter selects plans in a listing (newest first).
type ListFilter struct {
	// Status keeps only plans in this status ("" = all).
	Status Status
	// Cursor continues a previous listing ("" = from the newest).
	Cursor string
	Limit  int
}

// TaskFilter selects a plan's tasks in a listing (plan order).
type TaskFilter struct {
	// Status keeps only tasks in this status ("" = all).
	Status task.Status
	// Orphaned keeps only RUNNING tasks whose owner stopped heartbeating for
	// longer than OrphanAfter before Now.
	Orphaned    bool
	OrphanAfter time.Duration
	Now         time.Time
	// TenantPrefix keeps only tasks whose tenant id starts with it ("" =
	// all). Like a status, it makes a page examine up to the store's scan
	// bound of entries.
	TenantPrefix string
	// Cursor continues a previous listing ("" = from the first task).
	Cursor string
	Limit  int
}
