package repository

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// MemoryConfig configures the memory store. Zero fields mean the default.
type MemoryConfig struct {
	// TimelineMax is how many entries a task's timeline keeps (default
	// task.MaxTimeline).
	TimelineMax int
	// Clock gives the time written by the store itself (plan status times);
	// default time.Now.
	Clock func() time.Time
	// LockValue, when set, returns the value of a tenant's lock ("" when
	// nobody holds it): locked writes and heartbeats are checked against it.
	// Without it the lock check is skipped (fence and seq are always checked).
	// It is called with the store locked: it must not call the store.
	LockValue func(tenantID string) string
	// ReleaseLock, when set, is called after a successful write that asked to
	// release the lock (task.Write.ReleaseLock), with the lock value it held,
	// with the store locked.
	ReleaseLock func(tenantID, value string)
	// DropFinished keeps only unfinished aggregates: a task leaves memory
	// once it is no longer PENDING, RUNNING or PAUSED, a plan once it is
	// finished. The Dual store's memory half uses it to stay bounded; the
	// Dual store's writes that Redis has not taken yet keep their
	// aggregates in memory until it has.
	DropFinished bool
	// EventsMax is how many entries the event feed keeps (default
	// EventsMaxDefault); the oldest are dropped.
	EventsMax int
}

// Memory is the store in process memory, with the semantics of the Redis
// store: the same guard, fence and seq checks on writes (the lock check
// through MemoryConfig.LockValue), counts that move with the status and the
// plan status derived by plan.Derive, the same paging. Values are deep-copied
// in and out (params and timeline data as their JSON form, like Redis), so
// callers cannot alias stored data; timelines and checkpoints are kept as
// the JSON Redis stores. A new plan's tasks are kept compact until first
// written (see memfresh.go), and the maps shrink when they empty. There are
// no TTLs. Safe for concurrent use.
type Memory struct {
	cfg MemoryConfig
	// scanMax bounds filtered listings (ScanMax; tests lower it).
	scanMax int

	mu    sync.Mutex
	plans map[string]*memPlan
	// tasks holds the tasks written (or otherwise touched) since their
	// creation; fresh the never-written ones, by plan id.
	tasks     map[string]*memTask
	fresh     map[string]*freshSet
	index     map[string]string           // tenant → newest task id
	history   map[string]map[string]int64 // tenant → task id → creation ms (tasks only)
	instances map[string]*memInstance
	// Largest sizes of the maps since they were last reallocated.
	peakTasks, peakIndex, peakHistory, peakPlans int

	// feedMu guards feed, apart from mu: blocked readers poll it.
	feedMu sync.Mutex
	feed   memFeed
}

type memPlan struct {
	p       *plan.Plan
	taskIDs []string
	counts  plan.Counts
	score   int64
	// pending is set while an UpdatePlan of the Dual store waits for Redis
	// (multi-instance outage); queued counts its write-behind operations
	// (single-instance mode). Either keeps the plan in memory.
	pending bool
	queued  int
}

type memTask struct {
	t *task.Task
	// ckpt is the checkpoint's JSON ("" for none); timeline holds the
	// entries' JSON.
	ckpt     string
	timeline []string
	// pending are the Dual store's writes and requests Redis has not
	// confirmed (multi-instance outage), oldest first. Their timeline
	// entries follow the confirmed ones; a pending write keeps the task in
	// memory.
	pending []pendingOp
	// queued counts the Dual store's write-behind operations on the task
	// not yet written back to Redis (single-instance mode).
	queued int
}

// pendingOp is a write or request mirrored before Redis confirmed it.
type pendingOp struct {
	// write is true for a task write (seq: its expected seq); else req
	// names the request.
	write  bool
	seq    int64
	req    task.Request
	events []string
}

// held reports whether the task must stay in memory whatever its status.
func (mt *memTask) held() bool {
	return mt.queued > 0 || slices.ContainsFunc(mt.pending, func(p pendingOp) bool { return p.write })
}

// events returns the timeline with the pending entries after the confirmed ones.
func (mt *memTask) events() []string {
	if len(mt.pending) == 0 {
		return mt.timeline
	}
	out := slices.Clone(mt.timeline)
	for _, p := range mt.pending {
		out = append(out, p.events...)
	}
	return out
}

// NewMemory returns an empty memory store.
func NewMemory(cfg MemoryConfig) *Memory {
	cfg.TimelineMax = cmp.Or(cfg.TimelineMax, task.MaxTimeline)
	if cfg.TimelineMax < 0 {
		cfg.TimelineMax = task.MaxTimeline
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.EventsMax <= 0 {
		cfg.EventsMax = EventsMaxDefault
	}
	return &Memory{
		cfg:       cfg,
		scanMax:   ScanMax,
		plans:     map[string]*memPlan{},
		tasks:     map[string]*memTask{},
		fresh:     map[string]*freshSet{},
		index:     map[string]string{},
		history:   map[string]map[string]int64{},
		instances: map[string]*memInstance{},
	}
}

// ---- copies ----------------------------------------------------------------

// normalize returns v as it comes back from its JSON form (what Redis
// stores), so both stores hand out the same values.
func normalize[T any](v T) (T, error) {
	var out T
	b, err := json.Marshal(v)
	if err != nil {
		return out, err
	}
	err = json.Unmarshal(b, &out)
	return out, err
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Round(0)
}

func copyTaskIn(t *task.Task) (*task.Task, error) {
	c := *t
	if t.Params != nil {
		p, err := copyParams(t.Params)
		if err != nil {
			return nil, fmt.Errorf("task %s: encode params: %w", t.ID, err)
		}
		c.Params = p
	}
	c.HeartbeatAt, c.CreatedAt, c.StartedAt = utc(t.HeartbeatAt), utc(t.CreatedAt), utc(t.StartedAt)
	c.FinishedAt, c.UpdatedAt = utc(t.FinishedAt), utc(t.UpdatedAt)
	return &c, nil
}

func copyTaskOut(t *task.Task) *task.Task {
	c := *t
	if t.Params != nil {
		c.Params, _ = copyParams(t.Params)
	}
	return &c
}

func copyPlanIn(p *plan.Plan) (*plan.Plan, error) {
	c := *p
	if p.Params != nil {
		params, err := normalize(p.Params)
		if err != nil {
			return nil, fmt.Errorf("plan %s: encode params: %w", p.ID, err)
		}
		c.Params = params
	}
	if p.Stages != nil {
		stages, err := normalize(p.Stages)
		if err != nil {
			return nil, fmt.Errorf("plan %s: encode stages: %w", p.ID, err)
		}
		c.Stages = stages
	}
	c.CreatedAt, c.StartedAt, c.FinishedAt, c.UpdatedAt = utc(p.CreatedAt), utc(p.StartedAt), utc(p.FinishedAt), utc(p.UpdatedAt)
	return &c, nil
}

func copyPlanOut(p *plan.Plan) *plan.Plan {
	c := *p
	if p.Params != nil {
		c.Params, _ = normalize(p.Params)
	}
	if p.Stages != nil {
		c.Stages, _ = normalize(p.Stages)
	}
	return &c
}

func copyCounts(c plan.Counts) plan.Counts {
	out := newCounts()
	for _, s := range task.Statuses {
		out[s] = c[s]
	}
	return out
}

// ---- plans -----------------------------------------------------------------

// CreatePlan stores a new plan and its PENDING tasks. Returns ErrPlanExists
// when the plan id is taken.
func (m *Memory) CreatePlan(_ context.Context, p *plan.Plan, tasks []*task.Task) error {
	if err := checkNewPlan(p, tasks); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.plans[p.ID]; ok {
		return fmt.Errorf("create plan %s: %w", p.ID, ErrPlanExists)
	}
	return m.createLocked(p, tasks)
}

func (m *Memory) createLocked(p *plan.Plan, tasks []*task.Task) error {
	cp, err := copyPlanIn(p)
	if err != nil {
		return fmt.Errorf("%w: %v", plan.ErrInvalid, err)
	}
	now := m.cfg.Clock()
	score := scoreOf(cp.CreatedAt, now)
	fs, err := newFreshSet(p.ID, tasks, now.UnixMilli())
	if err != nil {
		return fmt.Errorf("%w: %v", task.ErrInvalid, err)
	}
	mp := &memPlan{p: cp, taskIDs: make([]string, len(tasks)), counts: newCounts(), score: score}
	mp.counts[task.StatusPending] = len(tasks)
	for i, t := range tasks {
		mp.taskIDs[i] = t.ID
		if mt := m.tasks[t.ID]; mt != nil {
			// A copy of the same task (a plan created again): replaced.
			delete(m.tasks, t.ID)
			if h := m.history[mt.t.TenantID]; h != nil {
				delete(h, t.ID)
			}
		}
		m.index[t.TenantID] = t.ID
	}
	m.noteSize(&m.peakIndex, len(m.index))
	if len(tasks) > 0 {
		m.fresh[p.ID] = fs
	} else {
		delete(m.fresh, p.ID)
	}
	m.plans[p.ID] = mp
	m.noteSize(&m.peakPlans, len(m.plans))
	return nil
}

// UpdatePlan writes p's status, reason, owner and times if the stored status
// is one of from (any when from is empty). Returns plan.ErrNotFound or a
// *plan.TransitionError naming the stored status.
func (m *Memory) UpdatePlan(_ context.Context, p *plan.Plan, from ...plan.Status) error {
	if p == nil {
		return fmt.Errorf("%w: update plan: nil plan", plan.ErrInvalid)
	}
	return m.updatePlan(p, from, false)
}

// updatePlan is UpdatePlan; queued marks a write-behind update, which keeps
// the plan until releaseQueued.
func (m *Memory) updatePlan(p *plan.Plan, from []plan.Status, queued bool) error {
	if err := checkPlanID(p.ID); err != nil {
		return fmt.Errorf("update plan: %w", err)
	}
	if !p.Status.Valid() {
		return fmt.Errorf("%w: update plan %s: status %s", plan.ErrInvalid, p.ID, task.Quote(string(p.Status)))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mp := m.plans[p.ID]
	if mp == nil {
		return fmt.Errorf("update plan %s: %w", p.ID, plan.ErrNotFound)
	}
	if len(from) > 0 && !slices.Contains(from, mp.p.Status) {
		return &plan.TransitionError{PlanID: p.ID, From: mp.p.Status, To: p.Status}
	}
	if queued {
		mp.queued++
	}
	m.setPlanState(mp, p)
	return nil
}

func (m *Memory) setPlanState(mp *memPlan, p *plan.Plan) {
	mp.p.Status, mp.p.Reason, mp.p.Owner = p.Status, p.Reason, p.Owner
	mp.p.StartedAt, mp.p.FinishedAt, mp.p.UpdatedAt = utc(p.StartedAt), utc(p.FinishedAt), utc(p.UpdatedAt)
	m.dropPlanIfFinished(mp)
}

func (m *Memory) dropPlanIfFinished(mp *memPlan) {
	if m.cfg.DropFinished && mp.p.Status.Finished() && !m.planHeld(mp) {
		delete(m.plans, mp.p.ID)
		m.shrinkLocked()
	}
}

// planHeld reports whether the plan or one of its tasks waits for Redis.
func (m *Memory) planHeld(mp *memPlan) bool {
	if mp.pending || mp.queued > 0 {
		return true
	}
	for _, id := range mp.taskIDs {
		if mt := m.tasks[id]; mt != nil && mt.held() {
			return true
		}
	}
	return false
}

// Plan returns a plan and its counts. Returns plan.ErrNotFound.
func (m *Memory) Plan(_ context.Context, planID string) (*plan.Plan, plan.Counts, error) {
	if err := checkPlanID(planID); err != nil {
		return nil, nil, fmt.Errorf("get plan: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mp := m.plans[planID]
	if mp == nil {
		return nil, nil, fmt.Errorf("get plan %s: %w", planID, plan.ErrNotFound)
	}
	return copyPlanOut(mp.p), copyCounts(mp.counts), nil
}

// Plans lists plans, newest first, with the cursor format of the Redis store.
func (m *Memory) Plans(_ context.Context, f plan.ListFilter) ([]*plan.Plan, string, error) {
	if f.Status != "" && !f.Status.Valid() {
		return nil, "", fmt.Errorf("%w: list plans: status %s", plan.ErrInvalid, task.Quote(string(f.Status)))
	}
	cur, has, err := parsePlanCursor(f.Cursor)
	if err != nil {
		return nil, "", fmt.Errorf("list plans: %w", err)
	}
	limit := pageLimit(f.Limit)
	m.mu.Lock()
	defer m.mu.Unlock()
	all := make([]*memPlan, 0, len(m.plans))
	for _, mp := range m.plans {
		after := !has || mp.score < cur.score || (mp.score == cur.score && mp.p.ID < cur.id)
		if after && (f.Status == "" || mp.p.Status == f.Status) {
			all = append(all, mp)
		}
	}
	slices.SortFunc(all, func(a, b *memPlan) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(b.p.ID, a.p.ID)
	})
	out := make([]*plan.Plan, 0, min(limit, len(all)))
	for _, mp := range all[:min(limit, len(all))] {
		out = append(out, copyPlanOut(mp.p))
	}
	if len(all) > limit {
		last := all[limit-1]
		return out, planCursor{score: last.score, id: last.p.ID}.String(), nil
	}
	return out, "", nil
}

// PlanTasks lists a plan's tasks in plan order with the paging of the Redis
// store (a filtered page examines at most ScanMax entries). Returns
// plan.ErrNotFound.
func (m *Memory) PlanTasks(_ context.Context, planID string, f plan.TaskFilter) ([]*task.Task, string, error) {
	if err := checkPlanID(planID); err != nil {
		return nil, "", fmt.Errorf("list plan tasks: %w", err)
	}
	pos, want, err := taskFilter(f)
	if err != nil {
		return nil, "", fmt.Errorf("list tasks of plan %s: %w", planID, err)
	}
	limit := pageLimit(f.Limit)
	scan := limit
	if want != "" || f.TenantPrefix != "" {
		scan = m.scanMax
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mp := m.plans[planID]
	if mp == nil {
		return nil, "", fmt.Errorf("list tasks of plan %s: %w", planID, plan.ErrNotFound)
	}
	var out []*task.Task
	fs := m.fresh[planID]
	i := int(min(pos, int64(len(mp.taskIDs))))
	for examined := 0; i < len(mp.taskIDs) && examined < scan && len(out) < limit; i++ {
		examined++
		var t *task.Task
		if mt := m.tasks[mp.taskIDs[i]]; mt != nil {
			t = mt.t
		} else if fs != nil && i < len(fs.items) && !fs.items[i].gone && fs.items[i].id == mp.taskIDs[i] {
			t = fs.record(i)
		}
		if t != nil && keepTask(t, want, f) {
			out = append(out, copyTaskOut(t))
		}
	}
	if i < len(mp.taskIDs) {
		return out, strconv.Itoa(i), nil
	}
	return out, "", nil
}

// RepairCounts recomputes a plan's counts from the task records in memory
// and derives the plan's status again. Returns plan.ErrNotFound.
func (m *Memory) RepairCounts(_ context.Context, planID string) (plan.Counts, error) {
	if err := checkPlanID(planID); err != nil {
		return nil, fmt.Errorf("repair counts: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mp := m.plans[planID]
	if mp == nil {
		return nil, fmt.Errorf("repair counts of plan %s: %w", planID, plan.ErrNotFound)
	}
	counts := newCounts()
	fs := m.fresh[planID]
	for i, id := range mp.taskIDs {
		if mt := m.tasks[id]; mt != nil {
			counts[mt.t.Status]++
		} else if fs != nil && i < len(fs.items) && !fs.items[i].gone && fs.items[i].id == id {
			counts[fs.record(i).Status]++
		}
	}
	mp.counts = counts
	m.derive(mp, "", "")
	return copyCounts(counts), nil
}

// derive applies plan.Derive to mp after the task move from → to ("" and ""
// for a recount).
func (m *Memory) derive(mp *memPlan, from, to task.Status) {
	status, reason := plan.Derive(mp.p.Status, mp.counts, mp.p.TotalTasks, mp.p.MaxFailed, from, to)
	mp.p.Apply(m.cfg.Clock(), status, reason)
}

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
// in-process) and the task stays in memory until releaseQueued.
func (m *Memory) write(w task.Write, queued bool) (task.WriteResult, error) {
	if err := checkWrite(w); err != nil {
		return task.WriteResult{}, err
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

// encodeWrite returns the checkpoint ("" keeps it, "-" deletes it, else
// its JSON) and the events of w in their stored (JSON) form.
func encodeWrite(w task.Write) (string, []string, error) {
	ckpt := ""
	switch {
	case w.DeleteCheckpoint:
		ckpt = "-"
	case w.Checkpoint != nil:
		b, err := marshalCheckpoint(w.Checkpoint)
		if err != nil {
			return "", nil, fmt.Errorf("%w: write task %s: checkpoint: %v", task.ErrInvalid, w.Task.ID, err)
		}
		ckpt = b
	}
	events, err := encodeEvents(w.Events)
	if err != nil {
		return "", nil, fmt.Errorf("%w: write task %s: %v", task.ErrInvalid, w.Task.ID, err)
	}
	return ckpt, events, nil
}

// encodeEvent returns ev's stored (JSON) form.
func encodeEvent(ev task.Event) (string, error) {
	b, err := appendEvent(nil, ev)
	return string(b), err
}

// decodeEvent returns the event of a stored (JSON) form, as it comes back
// from Redis.
func decodeEvent(s string) task.Event {
	var ev task.Event
	_ = json.Unmarshal([]byte(s), &ev)
	return ev
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
		m.derive(mp, old, nt.Status)
		res.PlanStatus = string(mp.p.Status)
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
// Dual store (no lock check; the task stays until releaseQueued).
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

// ---- mirroring (the Dual store's memory half) ------------------------------
//
// Confirmed mirrors copy what Redis accepted. Pending mirrors (multi-instance
// mode) copy a write Redis could not be asked: the record is overwritten —
// memory shows the newest state the instance knows — and the write's
// timeline entries are kept apart (pendingOp) so that the same write,
// confirmed later, replaces them instead of adding them twice. Queued
// operations (single-instance mode) are applied with the store's own checks
// and counted on the aggregate until the Dual store wrote them back.

// mirrorCreate stores a plan Redis has created, replacing any copy.
func (m *Memory) mirrorCreate(p *plan.Plan, tasks []*task.Task) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_ = m.createLocked(p, tasks)
}

// mirrorPlan copies the state Redis stored for p.
func (m *Memory) mirrorPlan(p *plan.Plan) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mp := m.plans[p.ID]; mp != nil {
		mp.pending = false
		m.setPlanState(mp, p)
	}
}

// mirrorPendingPlan applies an UpdatePlan Redis could not be asked, if the
// plan's status in memory is one of from, and keeps the plan until
// resolvePendingPlan or a confirmed mirror.
func (m *Memory) mirrorPendingPlan(p *plan.Plan, from []plan.Status) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mp := m.plans[p.ID]
	if mp == nil || (len(from) > 0 && !slices.Contains(from, mp.p.Status)) {
		return
	}
	mp.pending = true
	m.setPlanState(mp, p)
}

// resolvePendingPlan forgets that an UpdatePlan was pending (Redis refused
// its retry).
func (m *Memory) resolvePendingPlan(planID string) {
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

// mirrorWrite copies a write Redis accepted: the record with Redis' seq and
// requests, the checkpoint, the timeline, the counts (from the status in
// memory, or w.PrevStatus when the task had left memory) and the plan status
// Redis derived. It overwrites whatever memory holds (no checks): pending
// writes before it are settled (their entries join the timeline), a pending
// copy of the same write is replaced.
//
// ckpt and events are the write's encoded checkpoint and events (as
// encodeWrite returns them; the Dual store encoded them once for Redis).
func (m *Memory) mirrorWrite(w task.Write, ckpt string, events []string, res task.WriteResult) {
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
	if mp := m.plans[nt.PlanID]; mp != nil && res.PlanStatus != "" && plan.Status(res.PlanStatus) != mp.p.Status {
		mp.p.Apply(m.cfg.Clock(), plan.Status(res.PlanStatus), "")
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

// mirrorPendingWrite applies a write Redis could not be asked: the record
// (seq w.ExpectSeq+1), checkpoint and counts are overwritten without checks,
// its timeline entries are kept pending (replacing an earlier attempt of
// the same write), and the task stays in memory until the write is
// confirmed or resolved.
//
// ckpt and events are the write's encoded checkpoint and events.
func (m *Memory) mirrorPendingWrite(w task.Write, ckpt string, events []string) {
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

// resolvePendingWrite settles the pending write of the task with expected
// seq seq after Redis refused its retry: landed says the first attempt had
// been written after all (its entries join the timeline), else it is
// dropped. The record keeps the newest state memory knows.
func (m *Memory) resolvePendingWrite(taskID string, seq int64, landed bool) {
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

// mirrorRequest copies a request Redis stored (applied) or answered
// (not applied), replacing a pending copy of it.
func (m *Memory) mirrorRequest(t *task.Task, req task.Request, applied bool, ev task.Event) {
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

// mirrorPendingRequest applies a request Redis could not be asked, with the
// store's rules; its timeline entry stays pending until the request is
// confirmed (a pending request does not keep the task in memory).
func (m *Memory) mirrorPendingRequest(tenantID, taskID string, req task.Request, ev task.Event) {
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

// mirrorBeat copies a heartbeat Redis accepted.
func (m *Memory) mirrorBeat(taskID string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mt := m.taskLocked(taskID, ""); mt != nil {
		mt.t.HeartbeatAt = utc(now)
	}
}

// mirrorCounts copies counts Redis recomputed.
func (m *Memory) mirrorCounts(planID string, c plan.Counts) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mp := m.plans[planID]; mp != nil {
		mp.counts = copyCounts(c)
	}
}

// ---- write-behind (the Dual store's single-instance mode) ------------------

// createQueued stores a plan created while Redis is unreachable and keeps
// it until releaseQueued. Returns ErrPlanExists.
func (m *Memory) createQueued(p *plan.Plan, tasks []*task.Task) error {
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

// updatePlanQueued is UpdatePlan for a write-behind update: the plan stays
// until releaseQueued.
func (m *Memory) updatePlanQueued(p *plan.Plan, from []plan.Status) error {
	return m.updatePlan(p, from, true)
}

// requestQueued is RequestTask for a write-behind request; it reports
// whether the request was stored (and the task is kept until releaseQueued).
func (m *Memory) requestQueued(tenantID, taskID string, req task.Request, ev task.Event) (*task.Task, bool, error) {
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

// releaseQueued is called once per write-behind operation written back (or
// given up): the task and plan it kept may leave memory.
func (m *Memory) releaseQueued(taskID, planID string) {
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
