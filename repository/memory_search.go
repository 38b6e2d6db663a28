package repository

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// memSearchScore is a task's place in the memory store's search order:
// when it was last written (Unix microseconds); a PENDING task never
// written, its plan's creation plus its position, as in Redis.
func memSearchScore(t *task.Task, pos int) int64 {
	if t.Status == task.StatusPending && t.Seq == 0 {
		return micros(t.CreatedAt) + int64(pos)
	}
	return micros(t.UpdatedAt)
}

// SearchTasks returns the tasks f selects across the plans in memory,
// newest first (by their last write), and the cursor of the next page (""
// at the end). It examines every task in memory: the memory store holds
// the unfinished tasks of one process (the Dual store's fallback).
func (m *Memory) SearchTasks(_ context.Context, f plan.TaskSearch) ([]*task.Task, string, error) {
	q, err := checkSearch(f)
	if err != nil {
		return nil, "", fmt.Errorf("search tasks: %w", err)
	}
	type hit struct {
		pos searchPos
		t   *task.Task
		si  int
	}
	var hits []hit
	m.mu.Lock()
	for id, mp := range m.plans {
		if f.PlanID != "" && id != f.PlanID {
			continue
		}
		fs := m.fresh[id]
		for i, tid := range mp.taskIDs {
			var t *task.Task
			if mt := m.tasks[tid]; mt != nil {
				t = mt.t
			} else if fs != nil && i < len(fs.items) && !fs.items[i].gone && fs.items[i].id == tid {
				t = fs.record(i)
			}
			si := -1
			if t != nil {
				si = statusIndex(t.Status)
			}
			if si < 0 || !q.candidate(t, si) {
				continue
			}
			p := searchPos{score: memSearchScore(t, i), id: t.ID}
			if p.score < q.since || (q.hasCur && !q.cur.before(p)) {
				continue
			}
			hits = append(hits, hit{pos: p, t: copyTaskOut(t), si: si})
		}
	}
	// Tasks whose plan memory does not hold (the Dual store's mirror of
	// the tasks this instance runs of shared plans).
	for _, mt := range m.tasks {
		t := mt.t
		if m.plans[t.PlanID] != nil || (f.PlanID != "" && t.PlanID != f.PlanID) {
			continue
		}
		si := statusIndex(t.Status)
		if si < 0 || !q.candidate(t, si) {
			continue
		}
		p := searchPos{score: memSearchScore(t, 0), id: t.ID}
		if p.score < q.since || (q.hasCur && !q.cur.before(p)) {
			continue
		}
		hits = append(hits, hit{pos: p, t: copyTaskOut(t), si: si})
	}
	m.mu.Unlock()
	// Match is the caller's: called without the store's lock.
	hits = slices.DeleteFunc(hits, func(h hit) bool { return !q.want[h.si] && !q.f.Match(h.t) })
	slices.SortFunc(hits, func(a, b hit) int {
		if a.pos.before(b.pos) {
			return -1
		}
		if b.pos.before(a.pos) {
			return 1
		}
		return 0
	})
	out := make([]*task.Task, 0, min(q.limit, len(hits)))
	for _, h := range hits[:min(q.limit, len(hits))] {
		out = append(out, h.t)
	}
	if len(hits) > q.limit {
		return out, hits[q.limit-1].pos.String(), nil
	}
	return out, "", nil
}

// HeldTasks returns copies of the task records memory holds of plan planID
// that f's status and tenant prefix keep, in task id order, at most f's
// limit (its cursor is not used: one page). The Dual store's fallback with
// shared work, whose memory holds the tasks it runs and not their plans.
func (m *Memory) HeldTasks(planID string, f plan.TaskFilter) ([]*task.Task, error) {
	_, want, err := taskFilter(f)
	if err != nil {
		return nil, fmt.Errorf("list tasks of plan %s: %w", planID, err)
	}
	m.mu.Lock()
	var out []*task.Task
	for _, mt := range m.tasks {
		if mt.t.PlanID == planID && keepTask(mt.t, want, f) {
			out = append(out, copyTaskOut(mt.t))
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b *task.Task) int { return strings.Compare(a.ID, b.ID) })
	return out[:min(len(out), pageLimit(f.Limit))], nil
}

// SearchTasks reads Redis, or memory (see Dual).
func (d *Dual) SearchTasks(ctx context.Context, f plan.TaskSearch) ([]*task.Task, string, error) {
	v, err := read(ctx, d, func() (page[*task.Task], error) {
		ts, next, err := d.r.SearchTasks(ctx, f)
		return page[*task.Task]{ts, next}, err
	}, func() (page[*task.Task], error) {
		var next string
		ts, err := memTasks(d, func() (ts []*task.Task, err error) {
			ts, next, err = d.mem.SearchTasks(ctx, f)
			return ts, err
		})()
		return page[*task.Task]{ts, next}, err
	})
	return v.items, v.next, err
}
