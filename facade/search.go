package facade

import (
	"context"
	"time"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// MaxRunningLongerThan bounds TaskQuery.RunningLongerThan (the longest
// stage timeout).
const MaxRunningLongerThan = task.MaxTimeout

// TaskQuery selects tasks across plans (GET /v1/tasks). Statuses, Orphaned
// and RunningLongerThan are a union: a task matches when its status is one
// of Statuses, or it is orphaned (Orphaned), or its current stage has run
// on a live instance for longer than RunningLongerThan (a hung stage: its
// owner is alive, so it is not orphaned). None of them: every task. Stage,
// PlanID and Since narrow.
type TaskQuery struct {
	Statuses          []task.Status
	Orphaned          bool
	RunningLongerThan time.Duration
	Stage             string
	PlanID            string
	Since             time.Time
	Cursor            string
	Limit             int
}

// TaskPage is a page of a task search: the tasks newest first (by when
// they entered their status), the cursor of the next page ("" at the end;
// a page may be short and still have one) and whether the answer came
// from memory because Redis was unreachable.
type TaskPage struct {
	Tasks      []TaskView
	NextCursor string
	Degraded   bool
}

// SearchTasks returns the tasks q selects across plans, newest first.
// Returns ErrInvalid, ErrUnavailable.
func (c *Coordinator) SearchTasks(ctx context.Context, q TaskQuery) (TaskPage, error) {
	for _, s := range q.Statuses {
		if !s.Valid() {
			return TaskPage{}, wrapf(ErrInvalid, "status %s is not a task status (%v)", task.Quote(string(s)), task.Statuses)
		}
	}
	if q.PlanID != "" && !plan.ValidID(q.PlanID) {
		return TaskPage{}, wrapf(ErrInvalid, "plan id %s is not a plan id", task.Quote(q.PlanID))
	}
	if q.Stage != "" && !task.ValidStageName(q.Stage) {
		return TaskPage{}, wrapf(ErrInvalid, "stage %s is not a stage name", task.Quote(q.Stage))
	}
	if q.RunningLongerThan < 0 || q.RunningLongerThan > MaxRunningLongerThan {
		return TaskPage{}, wrapf(ErrInvalid, "runningLongerThan %s out of range 0..%s", q.RunningLongerThan, MaxRunningLongerThan)
	}
	if err := checkLimit(&q.Limit); err != nil {
		return TaskPage{}, err
	}
	now := c.now()
	f := plan.TaskSearch{
		Statuses: q.Statuses, Stage: q.Stage, PlanID: q.PlanID, Since: q.Since,
		Cursor: q.Cursor, Limit: q.Limit,
	}
	if q.Orphaned || q.RunningLongerThan > 0 {
		f.Match = func(t *task.Task) bool {
			if c.orphaned(t) {
				return q.Orphaned
			}
			return q.RunningLongerThan > 0 && c.stageRunningLonger(t, now, q.RunningLongerThan)
		}
		if !q.Orphaned {
			f.MatchStartedBefore = now.Add(-q.RunningLongerThan)
		}
	}
	ctx, cancel := c.queryCtx(ctx)
	defer cancel()
	ts, next, err := c.store.SearchTasks(ctx, f)
	if err != nil {
		return TaskPage{}, translate(err, "tasks")
	}
	page := TaskPage{Tasks: make([]TaskView, 0, len(ts)), NextCursor: next, Degraded: c.degradedOf(ctx)}
	for _, t := range ts {
		page.Tasks = append(page.Tasks, c.taskView(t, nil, page.Degraded))
	}
	if err := fromMemory(page.Degraded, len(page.Tasks), "the tasks asked for"); err != nil {
		return TaskPage{}, err
	}
	return page, nil
}

// stageRunningLonger reports whether t, RUNNING, has been in its current
// stage for longer than d at now.
func (c *Coordinator) stageRunningLonger(t *task.Task, now time.Time, d time.Duration) bool {
	return t.Status == task.StatusRunning && !t.StageStartedAt.IsZero() && now.Sub(t.StageStartedAt) > d
}

// stageMark is a stage being run on this instance: when it started and its
// timeout.
type stageMark struct {
	started time.Time
	timeout time.Duration
}

// LongStages returns how many stages running on this instance have run
// for longer than half their timeout (retries of a stage included): the
// gauge deploycoord_long_stages. Each instance counts its own runs, without
// a Redis read; a stage on an instance that died is orphaned, not counted
// here.
func (c *Coordinator) LongStages() int {
	now := c.now()
	c.mu.Lock()
	marks := make([]*stageMark, 0, len(c.tasks))
	for _, r := range c.tasks {
		if m := r.mark.Load(); m != nil {
			marks = append(marks, m)
		}
	}
	c.mu.Unlock()
	n := 0
	for _, m := range marks {
		if now.Sub(m.started) > m.timeout/2 {
			n++
		}
	}
	return n
}
