package plan

import "github.com/deploycoord/deploycoord/task"

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
	// Orphaned asks for RUNNING tasks without a live owner. Whether an
	// owner is alive is the coordinator's knowledge (instance heartbeats),
	// not a store's: a store lists the RUNNING tasks (refusing another
	// status) and the coordinator keeps the orphaned ones.
	Orphaned bool
	// TenantPrefix keeps only tasks whose tenant id starts with it ("" =
	// all). Like a status, it makes a page examine up to the store's scan
	// bound of entries.
	TenantPrefix string
	// Cursor continues a previous listing ("" = from the first task).
	Cursor string
	Limit  int
}
