package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TaskSearchList is a page of GET /v1/tasks: tasks across plans, newest
// first; degraded when the answer came from memory (Redis unreachable).
type TaskSearchList struct {
	Tasks      []Task `json:"tasks"`
	NextCursor string `json:"nextCursor"`
	Degraded   bool   `json:"degraded"`
}

// maxStatuses bounds the status parameter (a list of distinct statuses).
var maxStatuses = len(task.Statuses)

// GET /v1/tasks?status=&orphaned=&stage=&runningLongerThan=&planId=&since=&limit=&cursor=
func (a *api) searchTasks(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r, "status", "orphaned", "stage", "runningLongerThan", "planId", "since", "limit", "cursor")
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	tq, err := taskQuery(q)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	page, err := a.plans.SearchTasks(r.Context(), tq)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	degraded := page.Degraded || anyDegraded(page.Tasks)
	a.writeJSON(w, r, http.StatusOK, TaskSearchList{Tasks: tasksJSON(page.Tasks), NextCursor: page.NextCursor, Degraded: degraded}, degraded)
}

// taskQuery reads the query of GET /v1/tasks.
func taskQuery(q query) (facade.TaskQuery, error) {
	var tq facade.TaskQuery
	if s, ok := q.lookup("status"); ok {
		// status=FAILED,CANCELLED: a comma-separated list.
		parts := strings.Split(s, ",")
		if len(parts) > maxStatuses {
			return tq, badRequest(fmt.Sprintf("status lists at most %d statuses", maxStatuses))
		}
		for _, p := range parts {
			st := task.Status(p)
			if !st.Valid() {
				return tq, badRequest(fmt.Sprintf("status %s is not a task status (%v)", task.Quote(p), task.Statuses))
			}
			for _, seen := range tq.Statuses {
				if seen == st {
					return tq, badRequest(fmt.Sprintf("status %s is listed twice", st))
				}
			}
			tq.Statuses = append(tq.Statuses, st)
		}
	}
	var err error
	if tq.Orphaned, err = q.boolean("orphaned"); err != nil {
		return tq, err
	}
	if s, ok := q.lookup("stage"); ok {
		if !task.ValidStageName(s) {
			return tq, badRequest(fmt.Sprintf("stage %s is not a stage name", task.Quote(s)))
		}
		tq.Stage = s
	}
	if s, ok := q.lookup("runningLongerThan"); ok {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 || d > facade.MaxRunningLongerThan || len(s) > 32 {
			return tq, badRequest(fmt.Sprintf("runningLongerThan %s must be a Go duration in (0, %s], like 10m", task.Quote(s), facade.MaxRunningLongerThan))
		}
		tq.RunningLongerThan = d
	}
	if s, ok := q.lookup("planId"); ok {
		if !plan.ValidID(s) {
			return tq, badRequest(fmt.Sprintf("planId %s is not a plan id", task.Quote(s)))
		}
		tq.PlanID = s
	}
	if s, ok := q.lookup("since"); ok {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || len(s) > 64 {
			return tq, badRequest(fmt.Sprintf("since %s must be an RFC 3339 time, like 2026-11-25T01:00:00Z", task.Quote(s)))
		}
		tq.Since = t
	}
	if tq.Limit, err = q.limit(plan.LimitMax); err != nil {
		return tq, err
	}
	if tq.Cursor, err = q.cursor(); err != nil {
		return tq, err
	}
	return tq, nil
}
