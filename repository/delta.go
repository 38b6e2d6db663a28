package repository

import (
	"sync"

	"github.com/deploycoord/deploycoord/task"
)

// Delta writes. A task's writes during one run change few of the record's
// mutable fields (a stage write: the stage index and name and the times), so
// the store remembers, per task, the fields of its last write Redis
// acknowledged, and the next write of the same run sends only the fields
// that differ (heartbeatAt always: beat_task.lua writes it too) with the
// pseudo-field "?prevWrite" = that write's id. write_task.lua applies the
// delta only when the record still carries that write id — then the stored
// fields are the ones remembered, since only write_task.lua writes the
// mutable fields (and sets writeId) — and otherwise answers "send them",
// like a changed fixed field: the store sends the whole write again (one
// more round trip). So a stale memory costs a round trip, never a wrong
// record.
//
// Only writes of a RUNNING task (PrevStatus RUNNING, no ClearRequests: not a
// start, re-run or takeover) are sent as deltas, and only when the fixed
// fields' digest is the remembered one. A task's entry is dropped when its
// write is refused, fails or finishes the task; the memory holds at most
// deltaMax tasks, a few hundred bytes each (it is cleared when full: the
// next writes are whole).
const (
	deltaMax = 1 << 14
	// checkPrevWrite is the pseudo-field a delta write sends the id of the
	// write it is relative to under.
	checkPrevWrite = "?prevWrite"
)

// ackWrite is what the store remembers of a task's last acknowledged write.
type ackWrite struct {
	id       string
	vals     [len(mutableFields)]string
	fixedSum string
}

type lastWrites struct {
	mu sync.Mutex
	m  map[string]*ackWrite
}

func newLastWrites() *lastWrites { return &lastWrites{m: map[string]*ackWrite{}} }

// base returns the write tw may be sent relative to, or nil.
func (l *lastWrites) base(tw *EncodedWrite) *ackWrite {
	w := tw.w
	if l == nil || w.PrevStatus != task.StatusRunning || w.ClearRequests {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.m[w.Task.ID]
	if a == nil || a.fixedSum != tw.fixed.sum {
		return nil
	}
	return a
}

// acked remembers tw, which Redis applied (forgets the task once finished).
func (l *lastWrites) acked(tw *EncodedWrite) {
	if l == nil {
		return
	}
	t := tw.w.Task
	var a *ackWrite
	if t.Status.Active() {
		a = &ackWrite{id: tw.id, vals: tw.vals, fixedSum: tw.fixed.sum} // allocated outside the lock
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if a == nil {
		delete(l.m, t.ID)
		return
	}
	if len(l.m) >= deltaMax {
		clear(l.m)
	}
	l.m[t.ID] = a
}

// forget drops what is remembered of a task (its write failed or was
// refused: the stored record is unknown).
func (l *lastWrites) forget(taskID string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, taskID)
}

// len returns how many tasks are remembered (tests).
func (l *lastWrites) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
