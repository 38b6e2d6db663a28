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
// the plan until ReleaseQueued.
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
	mp.p.CancelledAt = utc(p.CancelledAt)
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
// and derives the plan's status again; changed reports that the status
// changed. Returns plan.ErrNotFound.
func (m *Memory) RepairCounts(_ context.Context, planID string) (_ plan.Counts, changed bool, _ error) {
	if err := checkPlanID(planID); err != nil {
		return nil, false, fmt.Errorf("repair counts: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mp := m.plans[planID]
	if mp == nil {
		return nil, false, fmt.Errorf("repair counts of plan %s: %w", planID, plan.ErrNotFound)
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
	before := mp.p.Status
	m.derive(mp, "", "")
	return copyCounts(counts), mp.p.Status != before, nil
}

// derive applies plan.Derive to mp after the task move from → to ("" and ""
// for a recount).
func (m *Memory) derive(mp *memPlan, from, to task.Status) {
	status, reason := plan.Derive(mp.p.Status, mp.counts, mp.p.TotalTasks, mp.p.MaxFailed, from, to)
	mp.p.Apply(m.cfg.Clock(), status, reason)
}
