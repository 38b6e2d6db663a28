package repository

import (
	"fmt"
	"time"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// checkNewPlan validates what CreatePlan stores: ids that reach keys, the
// plan's status and task count, and tasks that are PENDING, of this plan and
// listed once. Both stores apply it, so they refuse the same input.
func checkNewPlan(p *plan.Plan, tasks []*task.Task) error {
	if p == nil {
		return fmt.Errorf("%w: create plan: nil plan", plan.ErrInvalid)
	}
	if err := checkPlanID(p.ID); err != nil {
		return fmt.Errorf("create plan: %w", err)
	}
	op := "create plan " + p.ID
	if !p.Status.Valid() {
		return fmt.Errorf("%w: %s: status %s", plan.ErrInvalid, op, task.Quote(string(p.Status)))
	}
	if p.TotalTasks != len(tasks) {
		return fmt.Errorf("%w: %s: totalTasks is %d but %d tasks are given", plan.ErrInvalid, op, p.TotalTasks, len(tasks))
	}
	seen := make(map[string]bool, len(tasks))
	for i, t := range tasks {
		if t == nil {
			return fmt.Errorf("%w: %s: task %d is nil", task.ErrInvalid, op, i)
		}
		if err := checkTenantTask(t.TenantID, t.ID); err != nil {
			return fmt.Errorf("%s: task %d: %w", op, i, err)
		}
		switch {
		case t.PlanID != p.ID:
			return fmt.Errorf("%w: %s: task %s belongs to plan %s", task.ErrInvalid, op, t.ID, task.Quote(t.PlanID))
		case t.Status != task.StatusPending:
			return fmt.Errorf("%w: %s: task %s is %s, not PENDING", task.ErrInvalid, op, t.ID, t.Status)
		case seen[t.ID]:
			return fmt.Errorf("%w: %s: task %s is listed twice", task.ErrInvalid, op, t.ID)
		}
		seen[t.ID] = true
	}
	return nil
}

// checkWrite validates a task write before it reaches a store.
func checkWrite(w task.Write) error {
	if w.Task == nil {
		return fmt.Errorf("%w: write task: no task", task.ErrInvalid)
	}
	t := w.Task
	if err := checkTenantTask(t.TenantID, t.ID); err != nil {
		return fmt.Errorf("write task: %w", err)
	}
	op := "write task " + t.ID
	if !t.Status.Valid() {
		return fmt.Errorf("%w: %s: status %s", task.ErrInvalid, op, task.Quote(string(t.Status)))
	}
	if w.ExpectSeq < 0 {
		return fmt.Errorf("%w: %s: expected seq %d", task.ErrInvalid, op, w.ExpectSeq)
	}
	if w.ID != "" && !task.ValidWriteID(w.ID) {
		return fmt.Errorf("%w: %s: write id %s", task.ErrInvalid, op, task.Quote(w.ID))
	}
	if w.TakeLock != 0 {
		switch {
		case w.TakeLock < time.Millisecond:
			return fmt.Errorf("%w: %s: lock lease %s (at least 1ms)", task.ErrInvalid, op, w.TakeLock)
		case w.PrevStatus != task.StatusPending || t.Status != task.StatusRunning:
			return fmt.Errorf("%w: %s: only a start (PENDING → RUNNING) takes the lock, not %s → %s", task.ErrInvalid, op, w.PrevStatus, t.Status)
		case w.Guard.LockValue == "" || w.Guard.Fence < 1:
			return fmt.Errorf("%w: %s: a start that takes the lock needs a lock value and a fence", task.ErrInvalid, op)
		case w.ReleaseLock:
			return fmt.Errorf("%w: %s: a start that takes the lock cannot release it", task.ErrInvalid, op)
		}
	}
	if w.Blind && (w.TakeLock == 0 || w.ExpectSeq != 0) {
		return fmt.Errorf("%w: %s: a blind write is a start that takes the lock (TakeLock) at seq 0, not expected seq %d", task.ErrInvalid, op, w.ExpectSeq)
	}
	if movesCounts(w) {
		if err := checkPlanID(t.PlanID); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	return nil
}

// movesCounts reports whether a write goes to its plan's counts (the ledger,
// move_plan_counts.lua in the Redis store): when its status changes, and on
// a takeover or re-run of a RUNNING task (RUNNING → RUNNING with
// ClearRequests, as the coordinator writes every re-run), so that the
// RUNNING@<owner> counters follow the new owner and a finished plan reopens.
func movesCounts(w task.Write) bool {
	t := w.Task
	return t.Status != w.PrevStatus ||
		(w.PrevStatus == task.StatusRunning && t.Status == task.StatusRunning && w.ClearRequests)
}
