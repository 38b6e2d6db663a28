package repository

import (
	"fmt"
	"slices"
	"time"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// ---- mirroring (the Dual store's memory half) ------------------------------
//
// Confirmed mirrors copy what Redis accepted. Pending mirrors (multi-instance
// mode) copy a write Redis could not be asked: the record is overwritten —
// memory shows the newest state the instance knows — and the write's
// timeline entries are kept apart (pendingOp) so that the same write,
// confirmed later, replaces them instead of adding them twice. Queued
// operations (single-instance mode) are applied with the store's own checks
// and counted on the aggregate until the Dual store wrote them back.

// MirrorCreate stores a plan Redis has created, replacing any copy.
func (m *Memory) MirrorCreate(p *plan.Plan, tasks []*task.Task) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_ = m.createLocked(p, tasks)
}

// MirrorPlan copies the state Redis stored for p.
func (m *Memory) MirrorPlan(p *plan.Plan) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mp := m.plans[p.ID]; mp != nil {
		mp.pending = false
		m.setPlanState(mp, p)
	}
}

// MirrorPendingPlan applies an UpdatePlan Redis could not be asked, if the
// plan's status in memory is one of from, and keeps the plan until
// ResolvePendingPlan or a confirmed mirror.
func (m *Memory) MirrorPendingPlan(p *plan.Plan, from []plan.Status) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mp := m.plans[p.ID]
	if mp == nil || (len(from) > 0 && !slices.Contains(from, mp.p.Status)) {
		return
	}
	mp.pending = true
	m.setPlanState(mp, p)
}

// ResolvePendingPlan forgets that an UpdatePlan was pending (Redis refused
// its retry).
func (m *Memory) ResolvePendingPlan(planID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mp := m.plans[planID]; mp != nil && mp.pending {
		mp.pending = false
		m.dropPlanIfFinished(mp)
	}
}

// mirrorTaskLocked returns the task's entry for a mirrored write, creating
// it when the task had left memory, and the status its counts move from.
func (m *Memory) mirrorTaskLocked(w task.Write, nt *task.Task) (*memTask, task.Status) {
	if mt := m.taskLocked(nt.ID, nt.PlanID); mt != nil {
		return mt, mt.t.Status
	}
	mt := &memTask{t: nt}
	m.tasks[nt.ID] = mt
	m.noteSize(&m.peakTasks, len(m.tasks))
	m.index[nt.TenantID] = nt.ID
	m.noteSize(&m.peakIndex, len(m.index))
	h := m.history[nt.TenantID]
	if h == nil {
		h = map[string]int64{}
		m.history[nt.TenantID] = h
		m.noteSize(&m.peakHistory, len(m.history))
	}
	h[nt.ID] = scoreOf(nt.CreatedAt, m.cfg.Clock())
	return mt, w.PrevStatus
}

// MirrorWrite copies a write Redis accepted: the record with Redis' seq and
// requests, the checkpoint, the timeline, the counts (from the status in
// memory, or w.PrevStatus when the task had left memory) and the plan status
// Redis derived. It overwrites whatever memory holds (no checks): pending
// writes before it are settled (their entries join the timeline), a pending
// copy of the same write is replaced.
//
// ckpt and events are the write's encoded checkpoint and events (as
// encodeWrite returns them; the Dual store encoded them once for Redis).
func (m *Memory) MirrorWrite(ew *EncodedWrite, res task.WriteResult) {
	w, ckpt, events := ew.w, ew.ckpt, ew.events
	nt, err := copyTaskIn(w.Task)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mt, old := m.mirrorTaskLocked(w, nt)
	m.settleLocked(mt, w.ExpectSeq, true)
	m.applyLocked(mt, nt, w, ckpt, events, res.Seq, old)
	nt.PauseRequested, nt.CancelRequested = res.PauseRequested, res.CancelRequested
	if mp := m.plans[nt.PlanID]; mp != nil && res.PlanStatus != "" {
		// Redis' status of the plan supersedes a pending update of it (one
		// nobody will send again: an operator's request answered 503).
		mp.pending = false
		if plan.Status(res.PlanStatus) != mp.p.Status {
			mp.p.Apply(m.cfg.Clock(), plan.Status(res.PlanStatus), "")
		}
		m.dropPlanIfFinished(mp)
	}
}

// settleLocked removes the pending copies of writes a write with expected
// seq seq supersedes: the one at seq (this write's earlier attempt) is
// dropped; when confirmed (Redis took this write), the ones before it join
// the timeline — a later write of the same writer landed, so they did.
func (m *Memory) settleLocked(mt *memTask, seq int64, confirmed bool) {
	if len(mt.pending) == 0 {
		return
	}
	kept := make([]pendingOp, 0, len(mt.pending))
	for _, p := range mt.pending {
		switch {
		case !p.write || p.seq > seq || (p.seq < seq && !confirmed):
			kept = append(kept, p)
		case p.seq < seq:
			mt.timeline = append(mt.timeline, p.events...)
		}
	}
	mt.pending = kept
	if over := len(mt.timeline) - m.cfg.TimelineMax; over > 0 {
		mt.timeline = slices.Clone(mt.timeline[over:])
	}
}

// MirrorPendingWrite applies a write Redis could not be asked: the record
// (seq w.ExpectSeq+1), checkpoint and counts are overwritten without checks,
// its timeline entries are kept pending (replacing an earlier attempt of
// the same write), and the task stays in memory until the write is
// confirmed or resolved.
//
// ckpt and events are the write's encoded checkpoint and events.
func (m *Memory) MirrorPendingWrite(ew *EncodedWrite) {
	w, ckpt, events := ew.w, ew.ckpt, ew.events
	nt, err := copyTaskIn(w.Task)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mt, old := m.mirrorTaskLocked(w, nt)
	m.settleLocked(mt, w.ExpectSeq, false)
	mt.pending = append(mt.pending, pendingOp{write: true, seq: w.ExpectSeq, events: events})
	m.applyLocked(mt, nt, w, ckpt, nil, w.ExpectSeq+1, old)
}

// ResolvePendingWrite settles the pending write of the task with expected
// seq seq after Redis refused its retry: landed says the first attempt had
// been written after all (its entries join the timeline), else it is
// dropped. The record keeps the newest state memory knows.
func (m *Memory) ResolvePendingWrite(taskID string, seq int64, landed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mt := m.tasks[taskID]
	if mt == nil {
		return
	}
	kept := mt.pending[:0:0]
	for _, p := range mt.pending {
		switch {
		case !p.write || p.seq != seq:
			kept = append(kept, p)
		case landed:
			mt.timeline = append(mt.timeline, p.events...)
		}
	}
	mt.pending = kept
	if over := len(mt.timeline) - m.cfg.TimelineMax; over > 0 {
		mt.timeline = slices.Clone(mt.timeline[over:])
	}
	m.releaseLocked(mt)
}

// Forget drops task id from memory with its pending copies, when memory's
// copy is the one a run with fence wrote: that run no longer knows the
// task's state — it lost the lease or gave up a write, or Redis refused a
// write of it — and another instance may move it on, so memory must
// neither answer it nor keep it. A copy of another fence (a newer run of
// the task on this instance) stays, and so does a task with queued
// operations (single-instance mode) or whose plan memory holds: the plan's
// counts moved with the copy's writes, and the copy's next write moves them
// from its status (without it, from the write's previous status: twice).
func (m *Memory) Forget(taskID string, fence int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mt := m.tasks[taskID]
	if mt == nil || mt.queued > 0 || mt.t.Fence != fence || m.plans[mt.t.PlanID] != nil {
		return
	}
	m.removeTaskLocked(mt.t)
}

// releaseLocked drops a task no longer held, and its plan, if finished.
func (m *Memory) releaseLocked(mt *memTask) {
	if mt.held() {
		return
	}
	m.dropTaskIfFinished(mt.t)
	if mp := m.plans[mt.t.PlanID]; mp != nil {
		m.dropPlanIfFinished(mp)
	}
}

// MirrorRequest copies a request Redis stored (applied) or answered
// (not applied), replacing a pending copy of it.
func (m *Memory) MirrorRequest(t *task.Task, req task.Request, applied bool, ev task.Event) {
	e, err := encodeEvent(ev)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mt := m.taskLocked(t.ID, t.PlanID)
	if mt == nil {
		return
	}
	mt.pending = slices.DeleteFunc(mt.pending, func(p pendingOp) bool { return !p.write && p.req == req })
	if !applied {
		return
	}
	mt.t.PauseRequested, mt.t.CancelRequested = t.PauseRequested, t.CancelRequested
	if ev.Type != "" {
		m.appendLocked(mt, e)
	}
}

// MirrorPendingRequest applies a request Redis could not be asked, with the
// store's rules; its timeline entry stays pending until the request is
// confirmed (a pending request does not keep the task in memory).
func (m *Memory) MirrorPendingRequest(tenantID, taskID string, req task.Request, ev task.Event) {
	e, err := encodeEvent(ev)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mt, err := m.lookup(tenantID, taskID)
	if err != nil || !m.requestLocked(mt, req) {
		return
	}
	mt.pending = slices.DeleteFunc(mt.pending, func(p pendingOp) bool { return !p.write && p.req == req })
	op := pendingOp{req: req}
	if ev.Type != "" {
		op.events = []string{e}
	}
	mt.pending = append(mt.pending, op)
}

// MirrorBeat copies a heartbeat Redis accepted.
func (m *Memory) MirrorBeat(taskID string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mt := m.taskLocked(taskID, ""); mt != nil {
		mt.t.HeartbeatAt = utc(now)
	}
}

// MirrorCounts copies counts Redis recomputed.
func (m *Memory) MirrorCounts(planID string, c plan.Counts) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mp := m.plans[planID]; mp != nil {
		mp.counts = copyCounts(c)
	}
}

// ---- write-behind (the Dual store's single-instance mode) ------------------

// CreateQueued stores a plan created while Redis is unreachable and keeps
// it until ReleaseQueued. Returns ErrPlanExists.
func (m *Memory) CreateQueued(p *plan.Plan, tasks []*task.Task) error {
	if err := checkNewPlan(p, tasks); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.plans[p.ID]; ok {
		return fmt.Errorf("create plan %s: %w", p.ID, ErrPlanExists)
	}
	if err := m.createLocked(p, tasks); err != nil {
		return err
	}
	m.plans[p.ID].queued++
	return nil
}

// UpdatePlanQueued is UpdatePlan for a write-behind update: the plan stays
// until ReleaseQueued.
func (m *Memory) UpdatePlanQueued(p *plan.Plan, from []plan.Status) error {
	return m.updatePlan(p, from, true)
}

// RequestQueued is RequestTask for a write-behind request; it reports
// whether the request was stored (and the task is kept until ReleaseQueued).
func (m *Memory) RequestQueued(tenantID, taskID string, req task.Request, ev task.Event) (*task.Task, bool, error) {
	t, applied, err := m.requestTask(tenantID, taskID, req, ev)
	if err != nil || !applied {
		return t, applied, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if mt := m.tasks[taskID]; mt != nil {
		mt.queued++
	}
	return t, true, nil
}

// ReleaseQueued is called once per write-behind operation written back (or
// given up): the task and plan it kept may leave memory.
func (m *Memory) ReleaseQueued(taskID, planID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mp := m.plans[planID]; mp != nil && mp.queued > 0 {
		mp.queued--
		m.dropPlanIfFinished(mp)
	}
	if mt := m.tasks[taskID]; mt != nil && mt.queued > 0 {
		mt.queued--
		m.releaseLocked(mt)
	}
}

// HoldQueued keeps task taskID in memory for one more write-behind
// operation that memory already applied (a write that reached Redis before
// its counts move could), until its ReleaseQueued.
func (m *Memory) HoldQueued(taskID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mt := m.tasks[taskID]; mt != nil {
		mt.queued++
	}
}

// WriteQueued applies w as a write-behind write of the Dual store
// (single-instance mode): the checks of WriteTask but the lock's (its
// leases are in-process); the task stays in memory until ReleaseQueued.
func (m *Memory) WriteQueued(w task.Write) (task.WriteResult, error) { return m.write(w, true) }

// BeatQueued applies a write-behind heartbeat of the Dual store (fence
// check only); the task stays in memory until ReleaseQueued.
func (m *Memory) BeatQueued(tenantID, taskID string, g task.Guard, now time.Time) error {
	return m.beat(tenantID, taskID, g, now, true)
}
