package repository

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/task"
)

// ---- tasks -----------------------------------------------------------------

func (m *Memory) refuse(t *task.Task, reason task.RefuseReason) *task.RefusedError {
	return &task.RefusedError{TaskID: t.ID, Reason: reason, Status: t.Status, Seq: t.Seq, Fence: t.Fence, Owner: t.Owner}
}

// WriteTask applies w atomically with the checks of the Redis store: missing
// record, lock value (through MemoryConfig.LockValue), fence, seq. Returns a
// *task.RefusedError when a check fails; nothing is written then.
func (m *Memory) WriteTask(_ context.Context, w task.Write) (task.WriteResult, error) {
	return m.write(w, false)
}

// write applies w; queued marks a write-behind write of the Dual store
// (single-instance mode): the lock check is skipped (its leases are
// in-process) and the task stays in memory until ReleaseQueued.
func (m *Memory) write(w task.Write, queued bool) (task.WriteResult, error) {
	if err := checkWrite(w); err != nil {
		return task.WriteResult{}, err
	}
	if w.TakeLock > 0 {
		return task.WriteResult{}, fmt.Errorf("%w: write task %s: the memory store does not take tenant locks (task.Write.TakeLock)", task.ErrInvalid, w.Task.ID)
	}
	nt, err := copyTaskIn(w.Task)
	if err != nil {
		return task.WriteResult{}, fmt.Errorf("%w: %v", task.ErrInvalid, err)
	}
	ckpt, events, err := encodeWrite(w)
	if err != nil {
		return task.WriteResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mt := m.taskLocked(nt.ID, nt.PlanID)
	if mt == nil || mt.t.TenantID != nt.TenantID {
		return task.WriteResult{}, &task.RefusedError{TaskID: nt.ID, Reason: task.RefusedMissing}
	}
	old := mt.t
	switch {
	case !queued && w.Guard.LockValue != "" && m.cfg.LockValue != nil && m.cfg.LockValue(nt.TenantID) != w.Guard.LockValue:
		return task.WriteResult{}, m.refuse(old, task.RefusedLock)
	case old.Fence > w.Guard.Fence:
		return task.WriteResult{}, m.refuse(old, task.RefusedFence)
	case old.Seq != w.ExpectSeq:
		return task.WriteResult{}, m.refuse(old, task.RefusedSeq)
	case w.Current && newerThan(m.byTenantLocked(nt.TenantID), mt):
		// As write_task.lua's check h, as far as memory knows the tenant's
		// tasks (one it does not know refuses nothing).
		return task.WriteResult{}, m.refuse(old, task.RefusedCurrent)
	}
	if queued {
		mt.queued++
	}
	res := m.applyLocked(mt, nt, w, ckpt, events, w.ExpectSeq+1, old.Status)
	if !queued && w.ReleaseLock && w.Guard.LockValue != "" && m.cfg.ReleaseLock != nil {
		m.cfg.ReleaseLock(nt.TenantID, w.Guard.LockValue)
	}
	return res, nil
}

// applyLocked stores nt as the record of mt with seq, moving the plan's
// counts from status old, and returns the write's result.
func (m *Memory) applyLocked(mt *memTask, nt *task.Task, w task.Write, ckpt string, events []string, seq int64, old task.Status) task.WriteResult {
	nt.Seq = seq
	nt.Fence = w.Guard.Fence
	nt.PauseRequested, nt.CancelRequested = mt.t.PauseRequested, mt.t.CancelRequested
	if w.ClearRequests {
		nt.PauseRequested, nt.CancelRequested = false, false
	}
	mt.t = nt
	switch ckpt {
	case "":
	case "-":
		mt.ckpt = ""
	default:
		mt.ckpt = ckpt
	}
	mt.timeline = append(mt.timeline, events...)
	if over := len(mt.timeline) - m.cfg.TimelineMax; over > 0 {
		mt.timeline = slices.Clone(mt.timeline[over:])
	}
	res := task.WriteResult{Seq: seq, PauseRequested: nt.PauseRequested, CancelRequested: nt.CancelRequested}
	// As in Redis, the counts move from the status stored before the write
	// (the ledger's), and whatever moved them is derived, when the writer
	// sent the write to the counts (movesCounts) or the stored status moved.
	if mp := m.plans[nt.PlanID]; mp != nil && (old != nt.Status || movesCounts(w)) {
		if old != nt.Status {
			if old != "" {
				mp.counts[old]--
			}
			mp.counts[nt.Status]++
		}
		before := mp.p.Status
		m.derive(mp, old, nt.Status)
		res.PlanStatus = string(mp.p.Status)
		res.PlanStatusChanged = mp.p.Status != before
		m.dropPlanIfFinished(mp)
	}
	m.dropTaskIfFinished(nt)
	return res
}

func (m *Memory) dropTaskIfFinished(t *task.Task) {
	if !m.cfg.DropFinished || t.Status.Active() {
		return
	}
	if mt := m.tasks[t.ID]; mt != nil && mt.held() {
		return
	}
	m.removeTaskLocked(t)
}

// removeTaskLocked drops t's record, its tenant's index entry (if it names
// t) and its history entry.
func (m *Memory) removeTaskLocked(t *task.Task) {
	delete(m.tasks, t.ID)
	if m.index[t.TenantID] == t.ID {
		delete(m.index, t.TenantID)
	}
	if h := m.history[t.TenantID]; h != nil {
		delete(h, t.ID)
		if len(h) == 0 {
			delete(m.history, t.TenantID)
		}
	}
	m.shrinkLocked()
}

func (m *Memory) lookup(tenantID, taskID string) (*memTask, error) {
	if err := checkTenantTask(tenantID, taskID); err != nil {
		return nil, err
	}
	mt := m.taskLocked(taskID, "")
	if mt == nil || mt.t.TenantID != tenantID {
		return nil, fmt.Errorf("task %s of tenant %s: %w", taskID, tenantID, task.ErrNotFound)
	}
	return mt, nil
}

// RequestTask stores a cooperative request on a task as the Redis store does
// (pause and cancel only on RUNNING tasks; clear_pause on any), appends ev
// when the request was stored, and returns the task. Returns task.ErrNotFound.
func (m *Memory) RequestTask(_ context.Context, tenantID, taskID string, req task.Request, ev task.Event) (*task.Task, error) {
	t, _, err := m.requestTask(tenantID, taskID, req, ev)
	return t, err
}

func (m *Memory) requestTask(tenantID, taskID string, req task.Request, ev task.Event) (*task.Task, bool, error) {
	if err := checkRequest(req); err != nil {
		return nil, false, err
	}
	e, err := encodeEvent(ev)
	if err != nil {
		return nil, false, fmt.Errorf("%w: request task %s: event: %v", task.ErrInvalid, taskID, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mt, err := m.lookup(tenantID, taskID)
	if err != nil {
		return nil, false, fmt.Errorf("request task: %w", err)
	}
	applied := m.requestLocked(mt, req)
	if applied && ev.Type != "" {
		m.appendLocked(mt, e)
	}
	return copyTaskOut(mt.t), applied, nil
}

func (m *Memory) requestLocked(mt *memTask, req task.Request) bool {
	t := mt.t
	switch {
	case req == task.RequestPause && t.Status == task.StatusRunning:
		t.PauseRequested = true
	case req == task.RequestCancel && t.Status == task.StatusRunning:
		t.CancelRequested = true
	case req == task.RequestClearPause && t.PauseRequested:
		t.PauseRequested = false
	case req == task.RequestNote:
	default:
		return false
	}
	return true
}

func (m *Memory) appendLocked(mt *memTask, ev string) {
	mt.timeline = append(mt.timeline, ev)
	if over := len(mt.timeline) - m.cfg.TimelineMax; over > 0 {
		mt.timeline = slices.Clone(mt.timeline[over:])
	}
}

// Beat refreshes a task's heartbeat if g holds its tenant lock (checked
// through MemoryConfig.LockValue when set and g has a lock value) and no
// newer fence has written it. Returns a *task.RefusedError otherwise.
func (m *Memory) Beat(_ context.Context, tenantID, taskID string, g task.Guard, now time.Time) error {
	return m.beat(tenantID, taskID, g, now, false)
}

// beat refreshes a heartbeat; queued marks a write-behind heartbeat of the
// Dual store (no lock check; the task stays until ReleaseQueued).
func (m *Memory) beat(tenantID, taskID string, g task.Guard, now time.Time, queued bool) error {
	if err := checkTenantTask(tenantID, taskID); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mt := m.taskLocked(taskID, "")
	if mt == nil || mt.t.TenantID != tenantID {
		return &task.RefusedError{TaskID: taskID, Reason: task.RefusedMissing}
	}
	switch {
	case !queued && g.LockValue != "" && m.cfg.LockValue != nil && m.cfg.LockValue(tenantID) != g.LockValue:
		return m.refuse(mt.t, task.RefusedLock)
	case mt.t.Fence > g.Fence:
		return m.refuse(mt.t, task.RefusedFence)
	}
	if queued {
		mt.queued++
	}
	mt.t.HeartbeatAt = utc(now)
	return nil
}

// TaskByTenant returns the tenant's newest task and its checkpoint (nil if
// none). Returns task.ErrNotFound.
func (m *Memory) TaskByTenant(_ context.Context, tenantID string) (*task.Task, *checkpoint.Checkpoint, error) {
	if err := task.CheckTenantID(tenantID); err != nil {
		return nil, nil, fmt.Errorf("get task of tenant: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mt := m.byTenantLocked(tenantID)
	if mt == nil {
		return nil, nil, fmt.Errorf("get task of tenant %s: %w", tenantID, task.ErrNotFound)
	}
	return m.taskOut(mt)
}

// Task returns a task by id and its checkpoint (nil if none). Returns
// task.ErrNotFound.
func (m *Memory) Task(_ context.Context, taskID string) (*task.Task, *checkpoint.Checkpoint, error) {
	if err := checkTaskID(taskID); err != nil {
		return nil, nil, fmt.Errorf("get task: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mt := m.viewLocked(taskID)
	if mt == nil {
		return nil, nil, fmt.Errorf("get task %s: %w", taskID, task.ErrNotFound)
	}
	return m.taskOut(mt)
}

// byTenantLocked returns the tenant's newest task in memory (nil if none).
// newerThan reports whether cur, the tenant's current task as memory knows
// it, is another task than mt (nil: memory knows none).
func newerThan(cur, mt *memTask) bool { return cur != nil && cur.t.ID != mt.t.ID }

func (m *Memory) byTenantLocked(tenantID string) *memTask {
	id, ok := m.index[tenantID]
	if !ok {
		return nil
	}
	return m.viewLocked(id)
}

func (m *Memory) taskOut(mt *memTask) (*task.Task, *checkpoint.Checkpoint, error) {
	t := copyTaskOut(mt.t)
	if mt.ckpt == "" {
		return t, nil, nil
	}
	c, err := unmarshalCheckpoint([]byte(mt.ckpt))
	if err != nil {
		return nil, nil, fmt.Errorf("task %s: %w", t.ID, err)
	}
	return t, &c, nil
}

// TenantHistory returns up to limit of the tenant's tasks, newest first.
func (m *Memory) TenantHistory(_ context.Context, tenantID string, limit int) ([]*task.Task, error) {
	if err := task.CheckTenantID(tenantID); err != nil {
		return nil, fmt.Errorf("tenant history: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	type entry struct {
		id    string
		score int64
	}
	var all []entry
	for id, s := range m.history[tenantID] {
		all = append(all, entry{id, s})
	}
	fresh := map[string]*task.Task{}
	m.freshOfTenant(tenantID, func(t *task.Task, score int64) {
		all = append(all, entry{t.ID, score})
		fresh[t.ID] = t
	})
	// Newest first; ties in reverse id order, as ZREVRANGE.
	slices.SortFunc(all, func(a, b entry) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(b.id, a.id)
	})
	out := []*task.Task{}
	for _, e := range all[:min(pageLimit(limit), len(all))] {
		if mt := m.tasks[e.id]; mt != nil {
			out = append(out, copyTaskOut(mt.t))
		} else if t := fresh[e.id]; t != nil {
			out = append(out, copyTaskOut(t))
		}
	}
	return out, nil
}

// Timeline returns up to limit of the newest timeline entries of a task,
// oldest first. Returns task.ErrNotFound.
func (m *Memory) Timeline(_ context.Context, tenantID, taskID string, limit int) ([]task.Event, error) {
	if err := checkTenantTask(tenantID, taskID); err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mt := m.viewLocked(taskID)
	if mt == nil || mt.t.TenantID != tenantID {
		return nil, fmt.Errorf("timeline: task %s of tenant %s: %w", taskID, tenantID, task.ErrNotFound)
	}
	if limit <= 0 || limit > m.cfg.TimelineMax {
		limit = m.cfg.TimelineMax
	}
	all := mt.events()
	tl := all[max(0, len(all)-limit):]
	out := make([]task.Event, len(tl))
	for i, ev := range tl {
		out[i] = decodeEvent(ev)
	}
	return out, nil
}
