package repository

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/internal/readmark"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Defaults of DualConfig.
const (
	// ProbeIntervalDefault is how often the write-behind flusher pings Redis
	// while writes are queued.
	ProbeIntervalDefault = 500 * time.Millisecond
	// ReplayTimeoutDefault bounds each write-back call to Redis.
	ReplayTimeoutDefault = 5 * time.Second
)

// DualConfig configures the Dual store. Zero fields mean the default.
type DualConfig struct {
	// SingleInstance selects the single-instance outage mode (docs/architecture.md, "When Redis is unreachable or restarts"):
	// a write Redis cannot take is applied to memory and queued, the call
	// succeeds, and the flusher (Start) writes the queue back in order when
	// Redis answers. Without it (several instances), such a write fails and
	// is mirrored into memory as pending, for the caller to retry.
	SingleInstance bool
	// SharedWork: other instances run the tasks of the plans this one
	// created (shared plans, several instances). Memory then knows a plan's
	// progress only from this instance's own writes: a plan created here
	// is not mirrored (CreatePlan), and while Redis is unreachable, reads
	// of plans (a plan, the plan list, counts) are not answered from
	// memory, and reads of tasks (a task, its timeline, a plan's tasks, a
	// tenant's history, the search) only with the tasks this instance runs
	// (written RUNNING here) — the others get the Redis error, as on an
	// instance that never held them, rather than a stale answer.
	SharedWork bool
	// Lease, with SharedWork, is the tenant lock's lease: a task this
	// instance runs is answered from memory only if its heartbeat there was
	// younger than a lease when Redis became unreachable — otherwise its
	// lease had lapsed while Redis still answered the others (this process
	// was frozen, say), and another instance may have taken it over. During
	// the outage itself nobody else can move it. 0: no such check.
	Lease time.Duration
	// Clock is the time of that check (default time.Now).
	Clock func() time.Time
	// ProbeInterval is how often the flusher pings Redis while writes are
	// queued (default ProbeIntervalDefault).
	ProbeInterval time.Duration
	// ReplayTimeout bounds each write-back call (default ReplayTimeoutDefault).
	ReplayTimeout time.Duration
	// OnReplayError is called with each queued operation Redis refused when
	// it was written back (a fenced write refused, a plan transition no
	// longer allowed, a record gone after Redis lost its data); the
	// operation is dropped. Log it. Default: ignored.
	OnReplayError func(error)
}

// Dual is the double-writing store (docs/architecture.md, "The storage layout"). Writes go to Redis first,
// which decides (the fenced scripts); a write Redis accepted is mirrored into
// the memory store, which should keep only unfinished aggregates
// (MemoryConfig.DropFinished) to stay bounded.
//
// Reads go to Redis. When Redis is unreachable they are answered from memory
// and Degraded reports true until a Redis call succeeds again; an answer
// memory does not have (not found) returns the Redis error instead, since
// Redis may well hold it. The event feed is Redis' only.
//
// A write Redis cannot take (an *UnavailableError) depends on the mode:
//
//   - several instances (the default): the write fails — the caller keeps
//     it and retries it through the fenced scripts when Redis is back — but
//     memory takes it as pending, so degraded reads show the newest state
//     this instance knows. The same write, accepted later, replaces the
//     pending copy (its timeline entries are not added twice).
//   - single instance (DualConfig.SingleInstance): the write is applied to
//     memory with the memory store's checks (fence and seq; the lock check
//     is skipped, leases being in-process) and queued; the call succeeds.
//     While writes are queued every later write is queued behind them, reads
//     come from memory (then Redis for what memory lacks), Degraded is true
//     and the aggregates stay in memory. The flusher started by Start
//     writes the queue back in order as soon as Redis answers a PING; a
//     write-back Redis refuses is reported to DualConfig.OnReplayError and
//     dropped.
type Dual struct {
	mem *Memory
	r   *Redis
	cfg DualConfig
	// downSince is when Redis was first seen unreachable after it last
	// answered (Unix ns; 0 while it answers: Degraded), lastDown when it was last
	// seen so: a failure more than a lease after the last one starts a new
	// outage — an instance Redis does not answer fails a call every second
	// (its run-id check) and every heartbeat, so such a gap is a process
	// that made no call (frozen) while Redis may have come back; and only a
	// freeze longer than a lease lets a lease lapse.
	downSince, lastDown atomic.Int64

	// mu guards the queue; it is held while an operation is applied to
	// memory and queued, so the two orders agree.
	mu    sync.Mutex
	queue []*queuedOp
	// landed holds, by write id, the result of a task write that reached
	// Redis while its counts move came back unavailable (single-instance
	// mode; guarded by mu): memory has it already, so the run's sending of
	// it again during the outage is queued for its move without being
	// applied to memory twice (memory would refuse it by seq).
	landed map[string]task.WriteResult
	// wake tells the flusher that the queue grew.
	wake chan struct{}
	// drainMu keeps the flusher and Close from writing back at once.
	drainMu sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewDual returns the store writing to r and mirroring into mem, configured
// by cfg (at most one; none means the defaults: several instances).
func NewDual(mem *Memory, r *Redis, cfg ...DualConfig) *Dual {
	var c DualConfig
	if len(cfg) > 0 {
		c = cfg[0]
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = ProbeIntervalDefault
	}
	if c.ReplayTimeout <= 0 {
		c.ReplayTimeout = ReplayTimeoutDefault
	}
	if c.OnReplayError == nil {
		c.OnReplayError = func(error) {}
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return &Dual{mem: mem, r: r, cfg: c, wake: make(chan struct{}, 1)}
}

// Degraded reports whether answers may come from memory: the last Redis
// call found it unreachable and none has succeeded since, or (single
// instance) writes wait to be written back.
func (d *Dual) Degraded() bool { return d.downSince.Load() != 0 || d.Pending() > 0 }

// Pending returns how many operations wait to be written back to Redis
// (single-instance mode; always 0 otherwise).
func (d *Dual) Pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queue)
}

// Redis returns the Redis half.
func (d *Dual) Redis() *Redis { return d.r }

// BlindStarts reports whether the store takes blind starts
// (task.Write.Blind): with shared Redis, not in single-instance mode.
func (d *Dual) BlindStarts() bool { return !d.cfg.SingleInstance }

// LockKeys is Redis.LockKeys: a start with task.Write.TakeLock goes to
// Redis only.
func (d *Dual) LockKeys(tenantID string) (lockKey, fenceKey string, err error) {
	return d.r.LockKeys(tenantID)
}

// Memory returns the memory half.
func (d *Dual) Memory() *Memory { return d.mem }

// observe records what a Redis call said about Redis' reachability. Errors
// raised before Redis was asked (invalid input) or by the caller's
// cancellation say nothing.
func (d *Dual) observe(err error) {
	switch {
	case err == nil:
		d.downSince.Store(0)
	case IsUnavailable(err):
		now := d.cfg.Clock().UnixNano()
		if last := d.lastDown.Swap(now); d.cfg.Lease > 0 && now-last > int64(d.cfg.Lease) {
			d.downSince.Store(now)
		} else {
			d.downSince.CompareAndSwap(0, now)
		}
	case errors.Is(err, task.ErrInvalid), errors.Is(err, plan.ErrInvalid), errors.Is(err, context.Canceled):
	default:
		// Redis answered (with a refusal, say).
		d.downSince.Store(0)
	}
}

func isNotFound(err error) bool {
	return errors.Is(err, task.ErrNotFound) || errors.Is(err, plan.ErrNotFound) || errors.Is(err, checkpoint.ErrNotFound)
}

// missing reports whether memory could not take an operation because it
// does not hold the aggregate.
func missing(err error) bool {
	var re *task.RefusedError
	return isNotFound(err) || (errors.As(err, &re) && re.Reason == task.RefusedMissing)
}

// fallback returns the memory answer when Redis was unreachable, unless
// memory does not know the answer either; a memory answer marks ctx
// (readmark.FromMemory: the caller's Degraded for this very read).
func fallback[T any](ctx context.Context, d *Dual, v T, err error, mem func() (T, error)) (T, error) {
	d.observe(err)
	if !IsUnavailable(err) {
		return v, err
	}
	mv, merr := mem()
	if merr != nil && isNotFound(merr) {
		return v, err
	}
	readmark.FromMemory(ctx)
	return mv, merr
}

// errNotHeld answers a degraded read that memory may not answer with
// SharedWork (a not-found error: the caller returns the Redis error).
var errNotHeld = fmt.Errorf("%w: not held in memory with shared work", task.ErrNotFound)

// memPlans returns fromMem, or a function answering errNotHeld with
// SharedWork (see DualConfig.SharedWork).
func memPlans[T any](d *Dual, fromMem func() (T, error)) func() (T, error) {
	if !d.cfg.SharedWork {
		return fromMem
	}
	return func() (T, error) {
		var zero T
		return zero, errNotHeld
	}
}

// writtenHere reports whether memory's copy of t may answer a degraded
// read: always, but with SharedWork only a task this instance runs — one it
// wrote RUNNING (seq > 0: a created copy has seq 0) whose heartbeat was
// within a lease when Redis went away (DualConfig.Lease). A PENDING or
// PAUSED task it wrote (a queued retry, a paused task) is any instance's to
// start next, and one whose lease had lapsed may have been taken over:
// either may have moved on elsewhere.
func (d *Dual) writtenHere(t *task.Task) bool {
	if !d.cfg.SharedWork {
		return true
	}
	if t.Seq == 0 || t.Status != task.StatusRunning {
		return false
	}
	since := d.downSince.Load()
	return d.cfg.Lease <= 0 || since == 0 || time.Unix(0, since).Sub(t.HeartbeatAt) <= d.cfg.Lease
}

// memTasks returns fromMem keeping only the tasks writtenHere; errNotHeld
// when none is left (a degraded list is partial, never empty: see Dual —
// with SharedWork memory never knows that a list is empty in Redis).
func memTasks(d *Dual, fromMem func() ([]*task.Task, error)) func() ([]*task.Task, error) {
	if !d.cfg.SharedWork {
		return fromMem
	}
	return func() ([]*task.Task, error) {
		ts, err := fromMem()
		if err != nil {
			return ts, err
		}
		kept := ts[:0:0]
		for _, t := range ts {
			if d.writtenHere(t) {
				kept = append(kept, t)
			}
		}
		if len(kept) == 0 {
			return nil, errNotHeld
		}
		return kept, nil
	}
}

// queued reports whether writes wait to be written back: memory holds the
// newest state.
func (d *Dual) queued() bool { return d.cfg.SingleInstance && d.Pending() > 0 }

// read answers from memory while writes are queued (from Redis for what
// memory does not hold), else from Redis with the memory fallback.
func read[T any](ctx context.Context, d *Dual, fromRedis, fromMem func() (T, error)) (T, error) {
	if d.queued() {
		v, err := fromMem()
		if err == nil || !isNotFound(err) {
			readmark.FromMemory(ctx)
			return v, err
		}
	}
	v, err := fromRedis()
	return fallback(ctx, d, v, err, fromMem)
}

// ---- plans -----------------------------------------------------------------

// CreatePlan stores the plan in Redis, then in memory (not with
// SharedWork). In single-instance mode a plan Redis cannot take is created
// in memory and queued.
func (d *Dual) CreatePlan(ctx context.Context, p *plan.Plan, tasks []*task.Task) error {
	apply := func() (*queuedOp, error) {
		cp, err := copyPlanIn(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", plan.ErrInvalid, err)
		}
		cts, err := copyTasksIn(tasks)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", task.ErrInvalid, err)
		}
		if err := d.mem.CreateQueued(p, tasks); err != nil {
			return nil, err
		}
		return &queuedOp{kind: opCreatePlan, plan: cp, tasks: cts, holdPlan: p.ID}, nil
	}
	if err := checkNewPlan(p, tasks); err != nil {
		return err
	}
	if ok, err := d.behind("create plan "+p.ID, apply); ok {
		return err
	}
	err := d.r.CreatePlan(ctx, p, tasks)
	d.observe(err)
	switch {
	case err == nil && !d.cfg.SharedWork:
		d.mem.MirrorCreate(p, tasks)
	case IsUnavailable(err) && d.cfg.SingleInstance:
		return d.enqueue(err, apply)
	}
	// With SharedWork the plan is not mirrored: memory would learn its
	// progress only from this instance's writes, never answers a plan read
	// in that mode, and would hold the plan and its tasks as they were
	// created for good (the other instances finish them). This instance
	// starts the plan's tasks blind, as the others do.
	return err
}

// UpdatePlan updates the plan in Redis, then in memory (see Dual for a
// plan Redis cannot take).
func (d *Dual) UpdatePlan(ctx context.Context, p *plan.Plan, from ...plan.Status) error {
	if p == nil {
		return fmt.Errorf("%w: update plan: nil plan", plan.ErrInvalid)
	}
	apply := func() (*queuedOp, error) {
		cp, err := copyPlanIn(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", plan.ErrInvalid, err)
		}
		if err := d.mem.UpdatePlanQueued(p, from); err != nil {
			return nil, err
		}
		return &queuedOp{kind: opUpdatePlan, plan: cp, from: slices.Clone(from), holdPlan: p.ID}, nil
	}
	if ok, err := d.behind("update plan "+p.ID, apply); ok {
		return err
	}
	err := d.r.UpdatePlan(ctx, p, from...)
	d.observe(err)
	var te *plan.TransitionError
	switch {
	case err == nil:
		d.mem.MirrorPlan(p)
	case IsUnavailable(err) && d.cfg.SingleInstance:
		return d.enqueue(err, apply)
	case IsUnavailable(err):
		d.mem.MirrorPendingPlan(p, from)
	case errors.Is(err, plan.ErrNotFound), errors.As(err, &te):
		d.mem.ResolvePendingPlan(p.ID)
	}
	return err
}

type planAndCounts struct {
	p *plan.Plan
	c plan.Counts
}

// Plan reads Redis, or memory (see Dual).
func (d *Dual) Plan(ctx context.Context, planID string) (*plan.Plan, plan.Counts, error) {
	v, err := read(ctx, d, func() (planAndCounts, error) {
		p, c, err := d.r.Plan(ctx, planID)
		return planAndCounts{p, c}, err
	}, memPlans(d, func() (planAndCounts, error) {
		p, c, err := d.mem.Plan(ctx, planID)
		return planAndCounts{p, c}, err
	}))
	return v.p, v.c, err
}

type page[T any] struct {
	items []T
	next  string
}

// Plans reads Redis, or memory (see Dual).
func (d *Dual) Plans(ctx context.Context, f plan.ListFilter) ([]*plan.Plan, string, error) {
	v, err := read(ctx, d, func() (page[*plan.Plan], error) {
		ps, next, err := d.r.Plans(ctx, f)
		return page[*plan.Plan]{ps, next}, err
	}, memPlans(d, func() (page[*plan.Plan], error) {
		ps, next, err := d.mem.Plans(ctx, f)
		return page[*plan.Plan]{ps, next}, err
	}))
	return v.items, v.next, err
}

// PlanTasks reads Redis, or memory (see Dual).
func (d *Dual) PlanTasks(ctx context.Context, planID string, f plan.TaskFilter) ([]*task.Task, string, error) {
	v, err := read(ctx, d, func() (page[*task.Task], error) {
		ts, next, err := d.r.PlanTasks(ctx, planID, f)
		return page[*task.Task]{ts, next}, err
	}, func() (page[*task.Task], error) {
		var next string
		ts, err := memTasks(d, func() (ts []*task.Task, err error) {
			if d.cfg.SharedWork {
				// Memory holds no shared plan, only the tasks run here: one
				// page of them, which a cursor (a later page of Redis'
				// listing) cannot continue.
				if f.Cursor != "" {
					return nil, errNotHeld
				}
				return d.mem.HeldTasks(planID, f)
			}
			ts, next, err = d.mem.PlanTasks(ctx, planID, f)
			return ts, err
		})()
		return page[*task.Task]{ts, next}, err
	})
	return v.items, v.next, err
}

// RepairCounts repairs the counts in Redis and copies them into memory. It
// fails as unavailable while writes are queued (Redis' records are behind).
func (d *Dual) RepairCounts(ctx context.Context, planID string) (plan.Counts, bool, error) {
	if d.queued() {
		return nil, false, &UnavailableError{Op: "repair counts of plan " + planID, msg: "writes to redis are queued (single-instance mode)"}
	}
	c, changed, err := d.r.RepairCounts(ctx, planID)
	d.observe(err)
	if err == nil {
		d.mem.MirrorCounts(planID, c)
	}
	return c, changed, err
}

// RunningByOwner reads Redis, or memory (see Dual).
func (d *Dual) RunningByOwner(ctx context.Context, planID string, owners []string) (map[string]int, error) {
	return read(ctx, d, func() (map[string]int, error) {
		return d.r.RunningByOwner(ctx, planID, owners)
	}, memPlans(d, func() (map[string]int, error) {
		return d.mem.RunningByOwner(ctx, planID, owners)
	}))
}

// ---- tasks -----------------------------------------------------------------

// WriteTask writes to Redis (the fenced script decides) and mirrors an
// accepted write into memory (see Dual for a write Redis cannot take).
func (d *Dual) WriteTask(ctx context.Context, w task.Write) (task.WriteResult, error) {
	if err := checkWrite(w); err != nil {
		return task.WriteResult{}, err
	}
	if w.TakeLock > 0 && d.cfg.SingleInstance {
		// Its locks are in process (and its writes may be queued): a start
		// that takes a Redis lock has no place here.
		return task.WriteResult{}, fmt.Errorf("%w: write task %s: single-instance mode does not take tenant locks in Redis (task.Write.TakeLock)", task.ErrInvalid, w.Task.ID)
	}
	// The write's id goes with it everywhere (queue, Redis, replays): a
	// write that reached Redis is not applied twice.
	w.ID = writeIDOf(w)
	var memRes task.WriteResult
	apply := func() (*queuedOp, error) { // called with d.mu held
		cw, err := copyWrite(w)
		if err != nil {
			return nil, fmt.Errorf("%w: write task %s: %v", task.ErrInvalid, w.Task.ID, err)
		}
		if res, ok := d.landed[w.ID]; ok {
			// Landed before, its move not: memory holds it; the replay,
			// answered as written by its id, moves the counts.
			memRes = res
			d.mem.HoldQueued(w.Task.ID)
			return &queuedOp{kind: opWriteTask, write: cw, holdTask: w.Task.ID}, nil
		}
		if memRes, err = d.mem.WriteQueued(w); err != nil {
			return nil, err
		}
		return &queuedOp{kind: opWriteTask, write: cw, holdTask: w.Task.ID}, nil
	}
	if ok, err := d.behind("write task "+w.Task.ID, apply); ok {
		return memRes, err
	}
	// Encoded once, for Redis and for the mirror.
	tw, err := EncodeWrite(w)
	if err != nil {
		return task.WriteResult{}, err
	}
	res, err := d.r.WriteEncoded(ctx, tw)
	d.observe(err)
	if res.Seq > 0 {
		// Also when the counts update failed after the record was written.
		d.mem.MirrorWrite(tw, res)
		if d.cfg.SingleInstance {
			d.noteLanded(w.ID, res, IsUnavailable(err))
		}
		if d.cfg.SharedWork && w.Task.Status != task.StatusRunning {
			// Paused, queued again: any instance's to run next. Memory
			// answers only the tasks running here (writtenHere) and would
			// hold this one for good once another instance finished it.
			d.Forget(w.Task.ID, w.Guard.Fence)
		}
		return res, err
	}
	var re *task.RefusedError
	switch {
	case IsUnavailable(err) && d.cfg.SingleInstance:
		if err := d.enqueue(err, apply); err != nil {
			return task.WriteResult{}, err
		}
		return memRes, nil
	case IsUnavailable(err) && !w.Blind:
		// (A blind start's task is not known well enough to keep: its fixed
		// fields come with the answer.)
		d.mem.MirrorPendingWrite(tw)
	case errors.As(err, &re):
		// A retry refused because its first attempt landed after all: the
		// record holds this writer's next seq, fence and owner.
		landed := re.Reason == task.RefusedSeq && re.Seq == w.ExpectSeq+1 &&
			re.Fence == w.Guard.Fence && re.Owner == w.Task.Owner
		d.mem.ResolvePendingWrite(w.Task.ID, w.ExpectSeq, landed)
		if !landed {
			// Redis holds a state of the task this writer does not know.
			d.Forget(w.Task.ID, w.Guard.Fence)
		}
	}
	return res, err
}

// RequestTask stores the request in Redis and mirrors it into memory (see
// Dual for a request Redis cannot take).
func (d *Dual) RequestTask(ctx context.Context, tenantID, taskID string, r task.Request, ev task.Event) (*task.Task, error) {
	var memTask *task.Task
	apply := func() (*queuedOp, error) {
		e, err := normalize(ev)
		if err != nil {
			return nil, fmt.Errorf("%w: request task %s: event: %v", task.ErrInvalid, taskID, err)
		}
		t, applied, err := d.mem.RequestQueued(tenantID, taskID, r, ev)
		if err != nil {
			return nil, err
		}
		memTask = t
		if !applied {
			return nil, nil
		}
		return &queuedOp{kind: opRequestTask, tenantID: tenantID, taskID: taskID, req: r, ev: e, holdTask: taskID}, nil
	}
	if ok, err := d.behind("request task "+taskID, apply); ok {
		return memTask, err
	}
	t, applied, err := d.r.RequestTaskApplied(ctx, tenantID, taskID, r, ev)
	d.observe(err)
	switch {
	case err == nil:
		d.mem.MirrorRequest(t, r, applied, ev)
	case IsUnavailable(err) && d.cfg.SingleInstance:
		if err := d.enqueue(err, apply); err != nil {
			return nil, err
		}
		return memTask, nil
	case IsUnavailable(err):
		d.mem.MirrorPendingRequest(tenantID, taskID, r, ev)
	}
	return t, err
}

// Forget drops the task from memory (Memory.Forget: its copy of the run
// with fence), for a run that stopped without its last write: its lease was
// lost, or it gave up a write Redis could not take. Memory would otherwise
// hold the task, RUNNING under this instance, for good — and answer it so
// while Redis is unreachable, though another instance took it over. Not in
// single-instance mode (memory holds the newest state there).
func (d *Dual) Forget(taskID string, fence int64) {
	if !d.cfg.SingleInstance {
		d.mem.Forget(taskID, fence)
	}
}

// Beat refreshes the heartbeat in Redis and mirrors it into memory. In
// single-instance mode a heartbeat Redis cannot take is applied to memory
// and queued; otherwise it fails.
func (d *Dual) Beat(ctx context.Context, tenantID, taskID string, g task.Guard, now time.Time) error {
	apply := func() (*queuedOp, error) {
		if err := d.mem.BeatQueued(tenantID, taskID, g, now); err != nil {
			return nil, err
		}
		return &queuedOp{kind: opBeat, tenantID: tenantID, taskID: taskID, guard: g, at: now, holdTask: taskID}, nil
	}
	if ok, err := d.behind("heartbeat of task "+taskID, apply); ok {
		return err
	}
	err := d.r.Beat(ctx, tenantID, taskID, g, now)
	d.observe(err)
	switch {
	case err == nil:
		d.mem.MirrorBeat(taskID, now)
	case IsUnavailable(err) && d.cfg.SingleInstance:
		return d.enqueue(err, apply)
	}
	return err
}

type taskAndCheckpoint struct {
	t *task.Task
	c *checkpoint.Checkpoint
}

// TaskByTenant reads Redis, or memory (see Dual).
func (d *Dual) TaskByTenant(ctx context.Context, tenantID string) (*task.Task, *checkpoint.Checkpoint, error) {
	v, err := read(ctx, d, func() (taskAndCheckpoint, error) {
		t, c, err := d.r.TaskByTenant(ctx, tenantID)
		return taskAndCheckpoint{t, c}, err
	}, func() (taskAndCheckpoint, error) {
		t, c, err := d.mem.TaskByTenant(ctx, tenantID)
		if err == nil && !d.writtenHere(t) {
			return taskAndCheckpoint{}, errNotHeld
		}
		return taskAndCheckpoint{t, c}, err
	})
	return v.t, v.c, err
}

// Task reads Redis, or memory (see Dual).
func (d *Dual) Task(ctx context.Context, taskID string) (*task.Task, *checkpoint.Checkpoint, error) {
	v, err := read(ctx, d, func() (taskAndCheckpoint, error) {
		t, c, err := d.r.Task(ctx, taskID)
		return taskAndCheckpoint{t, c}, err
	}, func() (taskAndCheckpoint, error) {
		t, c, err := d.mem.Task(ctx, taskID)
		if err == nil && !d.writtenHere(t) {
			return taskAndCheckpoint{}, errNotHeld
		}
		return taskAndCheckpoint{t, c}, err
	})
	return v.t, v.c, err
}

// TasksByTenant reads Redis, or memory when Redis is unreachable — an
// *UnavailableError then when memory lacks one of the tenants. While writes
// are queued, memory's tasks (the newest state) replace Redis' ones.
func (d *Dual) TasksByTenant(ctx context.Context, tenantIDs []string) (map[string]*task.Task, map[string]*checkpoint.Checkpoint, error) {
	var mts map[string]*task.Task
	var mcs map[string]*checkpoint.Checkpoint
	if d.queued() {
		var err error
		if mts, mcs, err = d.mem.TasksByTenant(ctx, tenantIDs); err != nil {
			return nil, nil, err
		}
		readmark.FromMemory(ctx)
	}
	ts, cs, err := d.r.TasksByTenant(ctx, tenantIDs)
	d.observe(err)
	switch {
	case IsUnavailable(err):
		if mts == nil {
			if mts, mcs, err = d.mem.TasksByTenant(ctx, tenantIDs); err != nil {
				return nil, nil, err
			}
		}
		for tenant, t := range mts {
			if !d.writtenHere(t) {
				delete(mts, tenant)
			}
		}
		// Memory holds only this instance's unfinished work: a tenant it
		// lacks may well have a task in Redis, so "none" would be a lie.
		if missing := missingTenants(mts, tenantIDs); missing > 0 {
			return nil, nil, &UnavailableError{Op: "tasks by tenant", msg: fmt.Sprintf(
				"memory holds only this instance's unfinished work, not the tasks of %d of the %d tenants", missing, len(tenantIDs))}
		}
		readmark.FromMemory(ctx)
		return mts, mcs, nil
	case err != nil:
		return nil, nil, err
	}
	for tenant, t := range mts {
		ts[tenant] = t
		delete(cs, tenant)
		if c := mcs[tenant]; c != nil {
			cs[tenant] = c
		}
	}
	return ts, cs, nil
}

// missingTenants counts the distinct tenants of ids that ts lacks.
func missingTenants(ts map[string]*task.Task, ids []string) int {
	missing := map[string]bool{}
	for _, id := range ids {
		if ts[id] == nil {
			missing[id] = true
		}
	}
	return len(missing)
}

// TenantHistory reads Redis, or memory (see Dual).
func (d *Dual) TenantHistory(ctx context.Context, tenantID string, limit int) ([]*task.Task, error) {
	return read(ctx, d, func() ([]*task.Task, error) {
		return d.r.TenantHistory(ctx, tenantID, limit)
	}, memTasks(d, func() ([]*task.Task, error) {
		return d.mem.TenantHistory(ctx, tenantID, limit)
	}))
}

// Timeline reads Redis, or memory (see Dual).
func (d *Dual) Timeline(ctx context.Context, tenantID, taskID string, limit int) ([]task.Event, error) {
	return read(ctx, d, func() ([]task.Event, error) {
		return d.r.Timeline(ctx, tenantID, taskID, limit)
	}, func() ([]task.Event, error) {
		if t, _, err := d.mem.Task(ctx, taskID); err == nil && !d.writtenHere(t) {
			return nil, errNotHeld
		}
		return d.mem.Timeline(ctx, tenantID, taskID, limit)
	})
}

// ---- instances, feed, server -----------------------------------------------

// RegisterInstance registers the instance in Redis, and in memory for the
// degraded listing.
func (d *Dual) RegisterInstance(ctx context.Context, inst task.Instance, ttl time.Duration) error {
	if err := d.mem.RegisterInstance(ctx, inst, ttl); err != nil {
		return err
	}
	err := d.r.RegisterInstance(ctx, inst, ttl)
	d.observe(err)
	return err
}

// DeregisterInstance deregisters the instance in Redis and in memory.
func (d *Dual) DeregisterInstance(ctx context.Context, id string) error {
	if err := d.mem.DeregisterInstance(ctx, id); err != nil {
		return err
	}
	err := d.r.DeregisterInstance(ctx, id)
	d.observe(err)
	return err
}

// Instances lists the instances from Redis, or those this instance
// registered when Redis is unreachable.
func (d *Dual) Instances(ctx context.Context) ([]task.Instance, error) {
	insts, err := d.r.Instances(ctx)
	return fallback(ctx, d, insts, err, func() ([]task.Instance, error) { return d.mem.Instances(ctx) })
}

// PublishEvents publishes to the Redis feed only.
func (d *Dual) PublishEvents(ctx context.Context, evs []task.FeedEvent) error {
	err := d.r.PublishEvents(ctx, evs)
	d.observe(err)
	return err
}

// ReadEvents reads the Redis feed only: with Redis unreachable it returns
// the *UnavailableError (the feed is not kept in memory).
func (d *Dual) ReadEvents(ctx context.Context, f task.FeedFilter, wait time.Duration) ([]task.FeedEvent, string, error) {
	evs, next, err := d.r.ReadEvents(ctx, f, wait)
	d.observe(err)
	return evs, next, err
}

// ServerInfo returns the Redis server's identity and config report.
func (d *Dual) ServerInfo(ctx context.Context) (ServerInfo, error) {
	info, err := d.r.ServerInfo(ctx)
	d.observe(err)
	return info, err
}

// ServerRunID returns the Redis server's run id.
func (d *Dual) ServerRunID(ctx context.Context) (string, error) {
	id, err := d.r.ServerRunID(ctx)
	d.observe(err)
	return id, err
}

// noteLanded remembers (unavailable) or forgets the result of write id, a
// task write that reached Redis (see Dual.landed). At most landedMax are
// kept: a write forgotten so is refused by seq when sent again during the
// same outage, as before.
func (d *Dual) noteLanded(id string, res task.WriteResult, unavailable bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !unavailable {
		delete(d.landed, id)
		return
	}
	if d.landed == nil || len(d.landed) >= landedMax {
		d.landed = map[string]task.WriteResult{}
	}
	d.landed[id] = res
}

// landedMax bounds Dual.landed.
const landedMax = 1024
