package repository

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/deploycoord/deploycoord/task"
)

// The keys of the cross-plan task search (see search.go).

// PlanStatusIndex returns {p}plan:{planId}:status:<S>, the plan's tasks in
// status S scored by when they entered it, in Unix microseconds (ZSET, in
// the plan's slot, with the plan's TTL).
func (k Keys) PlanStatusIndex(planID string, s task.Status) (string, error) {
	if err := checkPlanID(planID); err != nil {
		return "", err
	}
	if !s.Valid() {
		return "", fmt.Errorf("%w: status %s", task.ErrInvalid, task.Quote(string(s)))
	}
	return k.plan(planID) + ":status:" + string(s), nil
}

// PlansByStatus returns {p}plans:status:<S>, the plans that have (or had
// lately) tasks in status S, scored by the latest time, in Unix
// milliseconds, a task of the plan entered S (ZSET, no TTL; an entry whose
// plan index is empty is removed by the search that finds it so).
func (k Keys) PlansByStatus(s task.Status) (string, error) {
	if !s.Valid() {
		return "", fmt.Errorf("%w: status %s", task.ErrInvalid, task.Quote(string(s)))
	}
	return k.prefix + "plans:status:" + string(s), nil
}

// statusKeys returns the plan's six per-status task indexes in the order
// of task.Statuses, in one allocation (the plan id is checked by the caller).
func (k Keys) statusKeys(planID string) [6]string {
	base := len(k.prefix) + len("plan:{}:status:") + len(planID)
	n := 6 * base
	for _, s := range task.Statuses {
		n += len(s)
	}
	b := make([]byte, 0, n)
	var ends [6]int
	for i, s := range task.Statuses {
		b = append(append(append(append(append(b, k.prefix...), "plan:{"...), planID...), "}:status:"...), s...)
		ends[i] = len(b)
	}
	all := unsafe.String(unsafe.SliceData(b), len(b))
	var out [6]string
	start := 0
	for i, e := range ends {
		out[i] = all[start:e]
		start = e
	}
	return out
}

// statusIndex is the position of s in task.Statuses (and statusKeys), -1
// for an unknown status.
func statusIndex(s task.Status) int {
	for i, st := range task.Statuses {
		if st == s {
			return i
		}
	}
	return -1
}

// micros returns t in Unix microseconds, the score of the per-plan indexes.
func micros(t time.Time) int64 { return t.UnixMicro() }
