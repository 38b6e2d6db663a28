package facade

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// itemMode says how a plan run enters one of its tasks.
type itemMode int

const (
	itemStart    itemMode = iota // a PENDING task
	itemResume                   // a PAUSED task, from its checkpoint
	itemTakeover                 // an orphaned RUNNING task, from its checkpoint
)

type planItem struct {
	t    *task.Task
	mode itemMode
}

// planRun starts a plan's tasks on this instance, at most MaxConcurrency at
// a time. It feeds while the plan is RUNNING, waits while it is PAUSED and
// stops when the plan is cancelled, another instance takes it over or this
// instance shuts down. Finished tasks leave memory as they finish.
type planRun struct {
	c      *Coordinator
	p      *plan.Plan
	stages []stage.Runnable
	log    zerolog.Logger

	mu      sync.Mutex
	status  plan.Status
	reason  string
	stopped bool
	// ended is set, under mu, when the run has decided to end: nothing
	// enqueued from then on would run (enqueue refuses; callers start a
	// new run).
	ended   bool
	queue   []planItem
	next    int
	running map[string]*taskRun
	// leftBehind is set when a task was left PENDING without being queued
	// again; the run then looks for such tasks before it ends.
	leftBehind atomic.Bool
	// waiters counts the workers waiting for the plan to be resumed; cond
	// (on mu) wakes them.
	waiters int
	cond    *sync.Cond

	// Shared mode (Config.SharedPlans): tasks come from the plan's queue in
	// Redis, one permit each. inflight counts the claimed entries whose
	// task has not ended here; held are their entries by task id (their
	// permits are renewed); release the entries whose permits the next
	// claim frees; wake wakes the claiming loop; entries waits for the
	// claimed entries' goroutines.
	shared   bool
	inflight int
	// freeing: endShared is freeing the permits left in release; the run
	// is not idle until it did (Idle). An entry ending after that frees its
	// own, counted in Coordinator.claimedEntries.
	freeing bool
	held    map[string]plan.QueueEntry
	release []plan.QueueEntry
	wake    chan struct{}
	entries sync.WaitGroup

	done chan struct{}
}

// startPlanRun registers and starts a plan run over items; it returns the
// existing run if the plan already runs here.
func (c *Coordinator) startPlanRun(p *plan.Plan, stages []stage.Runnable, items []planItem) *planRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pr, ok := c.plans[p.ID]; ok && pr.enqueue(items) {
		if pr.shared {
			pr.wakeUp()
		}
		return pr
	}
	pr := &planRun{
		c: c, p: p, stages: stages, status: plan.StatusRunning, queue: items,
		running: map[string]*taskRun{}, done: make(chan struct{}),
		log: c.log.With().Str("component", "plan_runner").Str("plan_id", p.ID).Logger(),
	}
	if c.queue != nil {
		// Shared mode: the items are on the plan's queue in Redis.
		pr.shared, pr.queue = true, nil
		pr.held, pr.wake = map[string]plan.QueueEntry{}, make(chan struct{}, 1)
	}
	pr.cond = sync.NewCond(&pr.mu)
	c.plans[p.ID] = pr
	go pr.loop()
	return pr
}

// enqueue adds items to the run's queue (those not queued or running
// already); it returns false, adding nothing, when the run has ended.
func (pr *planRun) enqueue(items []planItem) bool {
	pr.mu.Lock()
	if pr.ended {
		pr.mu.Unlock()
		return false
	}
	queued := make(map[string]bool, len(pr.queue)-pr.next)
	for _, it := range pr.queue[pr.next:] {
		queued[it.t.ID] = true
	}
	for _, it := range items {
		if _, running := pr.running[it.t.ID]; !running && !queued[it.t.ID] {
			pr.queue = append(pr.queue, it)
		}
	}
	pr.cond.Broadcast()
	pr.mu.Unlock()
	return true
}

// signal wakes the workers waiting for the plan to be resumed.
func (pr *planRun) signal() {
	pr.mu.Lock()
	pr.cond.Broadcast()
	pr.mu.Unlock()
	if pr.shared {
		pr.wakeUp()
	}
}

func (pr *planRun) loop() {
	defer func() {
		pr.c.mu.Lock()
		if pr.c.plans[pr.p.ID] == pr {
			delete(pr.c.plans, pr.p.ID)
		}
		pr.c.mu.Unlock()
		close(pr.done)
	}()
	go pr.poll()
	if pr.shared {
		pr.log.Info().Int("max_concurrency", pr.p.MaxConcurrency).Msg("plan run started (shared queue)")
		pr.sharedLoop()
		pr.endShared()
		pr.log.Info().Msg("plan run ended")
		return
	}
	pr.log.Info().Int("tasks", len(pr.queue)).Int("max_concurrency", pr.p.MaxConcurrency).Msg("plan run started")

	for {
		pr.work()
		// Before ending, make sure no PENDING task was left behind (a start
		// that failed for good, say): the plan would stay RUNNING with no
		// instance starting its tasks.
		if pr.leftovers() {
			continue
		}
		// Items enqueued after the workers left (a resume racing the
		// run's last task) run in this run; otherwise it ends, and from
		// now on enqueue refuses, so the caller starts a new run.
		pr.mu.Lock()
		more := pr.next < len(pr.queue) && pr.status == plan.StatusRunning && !pr.stopped && !pr.c.closing.Load()
		pr.ended = !more
		pr.mu.Unlock()
		if !more {
			break
		}
	}
	pr.mu.Lock()
	cancelled := pr.status == plan.StatusCancelled
	pr.mu.Unlock()
	if cancelled {
		pr.cancelQueued()
	}
	pr.log.Info().Msg("plan run ended")
}

// work runs the queue with a fixed pool of MaxConcurrency workers, each
// taking the next item when it is done with one (no goroutine per task),
// until the queue is empty or the run must stop feeding.
func (pr *planRun) work() {
	var wg sync.WaitGroup
	for range max(pr.p.MaxConcurrency, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				item, ok := pr.take()
				if !ok {
					return
				}
				pr.runItem(item)
			}
		}()
	}
	wg.Wait()
}

// leftovers queues the plan's PENDING tasks again if the plan is still
// RUNNING and ours with some left; it reports whether it queued any.
func (pr *planRun) leftovers() bool {
	if !pr.leftBehind.Swap(false) || pr.halted() || pr.c.hardStop.Err() != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), pr.c.cfg.WriteTimeout)
	defer cancel()
	p, counts, err := pr.c.store.Plan(ctx, pr.p.ID)
	if err != nil || p.Status != plan.StatusRunning || p.Owner != pr.c.cfg.Instance || counts[task.StatusPending] == 0 {
		return false
	}
	items, err := pr.c.loadItems(ctx, pr.p.ID, task.StatusPending, itemStart)
	if err != nil || len(items) == 0 {
		return false
	}
	pr.log.Warn().Int("tasks", len(items)).Msg("pending tasks left behind; starting them again")
	if !pr.c.sleep(pr.c.cfg.LockWaitPoll) {
		return false
	}
	// Added to what is queued: a resume may have queued items since the
	// workers left (the run has not ended, so enqueue takes them).
	return pr.enqueue(items)
}

// take returns the next item to run, waiting while the plan is paused; ok is
// false when the run must stop feeding.
func (pr *planRun) take() (planItem, bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for {
		switch {
		case pr.stopped || pr.status == plan.StatusCancelled || pr.c.closing.Load():
			return planItem{}, false
		case pr.status.Finished():
			// No task is active (the store derived it): nothing left to run.
			pr.queue, pr.next = nil, 0
			return planItem{}, false
		case pr.status == plan.StatusRunning:
			if pr.next >= len(pr.queue) {
				pr.queue, pr.next = nil, 0
				return planItem{}, false
			}
			it := pr.queue[pr.next]
			pr.queue[pr.next] = planItem{} // let finished tasks leave memory
			pr.next++
			return it, true
		}
		pr.waiters++
		pr.cond.Wait()
		pr.waiters--
	}
}

// runItem runs one task to its end (or until it stops) in this goroutine.
// It reports whether the task could not be entered for want of Redis and
// should be tried again (a shared run queues it again).
func (pr *planRun) runItem(it planItem) (again bool) {
	c := pr.c
	switch it.mode {
	case itemStart:
		if c.startTask(pr, it.t) {
			pr.leftBehind.Store(true)
			return true
		}
	default:
		mode := task.RetryResume
		if it.mode == itemTakeover {
			mode = task.RetryNew
		}
		// The item may be stale: rerun reads the task again under the lock
		// and enters it from its own checkpoint. The lock of an orphan's
		// dead owner lives until its lease ends: a takeover waits for it
		// (a lease and a half at most) instead of dropping the task.
		giveUp := c.now().Add(c.cfg.Lease + c.cfg.Lease/2)
		for {
			r, from, err := c.rerun(c.hardStop, it.t, pr.p, pr.stages, rerunSpec{mode: mode, expectSeq: -1, from: -1,
				event: task.Event{Type: task.EventResumed, Reason: "plan resumed", Instance: c.cfg.Instance}}, pr)
			if err == nil {
				r.run(from)
				return false
			}
			if it.mode == itemTakeover && errors.Is(err, ErrTaskRunning) && c.now().Before(giveUp) && !c.closing.Load() && c.sleep(c.cfg.LockWaitPoll) {
				continue
			}
			pr.log.Warn().Err(err).Str("task_id", it.t.ID).Str("tenant_id", it.t.TenantID).Msg("could not resume task")
			return IsUnavailable(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrShuttingDown)
		}
	}
	return false
}

// startTask takes the tenant lock for a PENDING task, marks it RUNNING and
// runs it. A locked tenant fails the task with TENANT_LOCKED (or waits, if
// the plan says so). It reports whether the task was left PENDING and
// should be started again.
func (c *Coordinator) startTask(pr *planRun, t *task.Task) (again bool) {
	log := pr.log.With().Str("task_id", t.ID).Str("tenant_id", t.TenantID).Logger()
	c.waitSuspect()
	acquired := c.beginAcquire(t)
	defer acquired()
	if c.claims != nil {
		if again, done := c.startClaimed(pr, t, acquired, log, false); done {
			return again
		}
	}
	lease, err := c.acquire(pr, t)
	if err != nil {
		var locked *tenantlock.LockedError
		switch {
		case errors.As(err, &locked) && locked.Holder.TaskID == t.ID:
			// The task was PENDING when read: its holder is either about to
			// mark it RUNNING or an attempt whose answer was lost (another
			// instance's, with shared plans: its timed-out SET NX landed,
			// and it queued the entry again, which this instance claimed).
			// Try again later: a start that lands makes the retry a no-op
			// (the task is no longer PENDING), a stale lock lapses. Skipped
			// for good, the task would stay PENDING with nobody to start it.
			log.Warn().Str("holder", locked.Holder.Instance).Msg("task already runs elsewhere; tried again unless it started")
			return true
		case errors.As(err, &locked):
			c.obs.LockConflict()
			c.refuseStart(t, "TENANT_LOCKED: "+locked.Error(), log)
		default:
			log.Error().Err(err).Msg("could not take tenant lock; task left PENDING")
			return true
		}
		return false
	}
	// A task queued again by a retry or resume (it has an attempt) starts
	// from its checkpoint, which the retry wrote.
	ck, from, err := c.queuedCheckpoint(t, len(pr.stages))
	if err != nil {
		log.Error().Err(err).Msg("could not read the checkpoint of a retried task; task left PENDING")
		c.releaseQuietly(lease)
		return true
	}
	prev := t.Status
	if err := t.Start(c.now(), c.cfg.Instance, lease.Fence()); err != nil {
		log.Error().Err(err).Msg("start task")
		c.releaseQuietly(lease)
		return false
	}
	r := c.newRun(t, pr.p, pr.stages, ck, lease, pr)
	registered := c.register(r)
	acquired()
	if !registered {
		// The instance is shutting down: the task is still PENDING and its
		// queue entry is ours alone; a shared run puts it back.
		r.abandon()
		c.releaseQuietly(lease)
		return true
	}
	pr.add(r)
	r.addEvent(task.Event{Type: task.EventStarted, Instance: c.cfg.Instance, Fence: lease.Fence()})
	if err := r.write(prev, nil, false); err != nil {
		r.finish()
		var refused *task.RefusedError
		if errors.As(err, &refused) && refused.Status != task.StatusPending {
			return false // someone else started or cancelled it meanwhile
		}
		// The start never landed (our lock lapsed during an outage and the
		// tenant may be someone else's now, or the write failed): the task
		// is still PENDING. It is not stranded: before the run ends,
		// leftovers reads the plan's PENDING tasks again (fresh records,
		// after a pause) and starts them through the lock and the plan's
		// onTenantLocked policy again.
		c.forget(t.ID, lease.Fence())
		logStartNotLanded(log, err, t.Seq, lease.Fence())
		return true
	}
	c.obs.TaskStarted()
	r.run(from)
	// A start that a failover rolled back leaves the task PENDING with its
	// queue entry gone: start it again (a plan run of the owner mode finds
	// it among the leftovers).
	return r.rolledBack
}

// acquire takes the tenant lock for t under the plan's onTenantLocked
// policy. While Redis is unreachable it keeps trying (no task starts).
func (c *Coordinator) acquire(pr *planRun, t *task.Task) (Lease, error) {
	holder := tenantlock.Holder{PlanID: t.PlanID, TaskID: t.ID, Instance: c.cfg.Instance}
	var waitUntil time.Time
	if pr.p.OnTenantLocked == plan.LockWait {
		waitUntil = c.now().Add(pr.p.LockWait)
	}
	for {
		ctx, cancel := context.WithTimeout(c.hardStop, c.cfg.WriteTimeout)
		lease, err := c.locks.Acquire(ctx, t.TenantID, holder)
		cancel()
		if err == nil {
			return lease, nil
		}
		var locked *tenantlock.LockedError
		switch {
		case errors.As(err, &locked) && c.freeOwnStaleLock(t, locked):
			continue
		case errors.As(err, &locked) && locked.Holder.TaskID != t.ID && c.now().Before(waitUntil):
		case IsUnavailable(err):
		default:
			return nil, err
		}
		if pr.halted() {
			return nil, err
		}
		select {
		case <-time.After(c.cfg.LockWaitPoll):
		case <-c.hardStop.Done():
			return nil, err
		}
	}
}

// refuseStart fails a PENDING task that could not start (tenant locked),
// without the lock: the write only applies if nobody touched the task.
func (c *Coordinator) refuseStart(t *task.Task, reason string, log zerolog.Logger) {
	prev := t.Status
	now := c.now()
	if err := t.Fail(now, reason); err != nil {
		log.Error().Err(err).Msg("fail task")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.WriteTimeout)
	defer cancel()
	res, err := c.writeTask(ctx, task.Write{
		Task: t, PrevStatus: prev, ExpectSeq: t.Seq, Guard: task.Guard{Fence: t.Fence},
		Events: []task.Event{{At: now.UTC(), Type: task.EventFailed, Reason: reason, Attempt: t.Attempt, Instance: c.cfg.Instance}},
	})
	if err != nil {
		c.forget(t.ID, t.Fence)
		log.Warn().Err(err).Msg("could not record TENANT_LOCKED failure")
		return
	}
	c.publishTask(t, task.Event{At: now.UTC(), Type: task.EventFailed, Reason: reason, Instance: c.cfg.Instance})
	c.planStatusChanged(t.PlanID, res) // the plan's last task: it finished, or a failure paused it
	log.Warn().Str("reason", reason).Msg("task failed: tenant locked")
}

// freeOwnStaleLock frees a lock that this very instance took for task t in
// an earlier attempt whose answer was lost (Redis ran the SET NX after the
// call timed out), so t does not wait a lease for its own lock or, worse,
// get skipped as "running elsewhere". It returns true when it freed one.
//
// The caller must be inside beginAcquire for t: a lock taken by another
// call on this instance that has not registered its run yet (a retry racing
// a resume) is live, not stale.
func (c *Coordinator) freeOwnStaleLock(t *task.Task, locked *tenantlock.LockedError) bool {
	if locked.Holder.TaskID != t.ID || locked.Holder.Instance != c.cfg.Instance {
		return false
	}
	c.mu.Lock()
	m := c.acquiring[t.ID]
	live := c.tasks[t.ID] != nil || m != nil && m.calls > 1
	c.mu.Unlock()
	if live {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.WriteTimeout)
	defer cancel()
	if _, err := c.locks.ForceRelease(ctx, t.TenantID, locked.Fence); err != nil {
		return false
	}
	c.log.Warn().Str("task_id", t.ID).Str("tenant_id", t.TenantID).Int64("fence", locked.Fence).
		Msg("freed this instance's own stale lock from an attempt whose answer was lost")
	return true
}

// beginAcquire marks a call that takes the lock of task taskID and
// registers its run (see freeOwnStaleLock); done ends it (it may be called
// more than once).
func (c *Coordinator) beginAcquire(t *task.Task) (done func()) {
	c.mu.Lock()
	if c.acquiring == nil {
		c.acquiring = map[string]*acquireMark{}
	}
	m := c.acquiring[t.ID]
	if m == nil {
		m = &acquireMark{planID: t.PlanID}
		c.acquiring[t.ID] = m
	}
	m.calls++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			if m.calls--; m.calls <= 0 {
				delete(c.acquiring, t.ID)
			}
			c.mu.Unlock()
		})
	}
}

// acquireMark is a task's entry in Coordinator.acquiring.
type acquireMark struct {
	planID string
	calls  int // calls between taking the lock and registering the run
}

func (c *Coordinator) releaseQuietly(lease Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.WriteTimeout)
	defer cancel()
	if err := lease.Release(ctx); err != nil {
		c.log.Warn().Err(err).Str("tenant_id", lease.TenantID()).Msg("release tenant lock")
	}
}

func (pr *planRun) add(r *taskRun) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.running[r.t.ID] = r
	switch {
	case pr.status == plan.StatusCancelled:
		r.requestCancel(pr.reason)
	case pr.status == plan.StatusPaused && pr.reason != plan.ReasonFailureThreshold:
		r.requestPlanPause()
	}
}

// taskDone forgets the run r, unless a newer run of its task replaced it.
func (pr *planRun) taskDone(r *taskRun) {
	pr.mu.Lock()
	if pr.running[r.t.ID] == r {
		delete(pr.running, r.t.ID)
	}
	pr.mu.Unlock()
}

func (pr *planRun) halted() bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.stopped || pr.status == plan.StatusCancelled || pr.c.closing.Load()
}

// observe applies a plan status seen in a task write's answer or a claim,
// which carry no reason: the status the run knows keeps its reason (a
// cancel's, which its running tasks are told), and a new CANCELLED or
// PAUSED is read from storage for it.
func (pr *planRun) observe(status plan.Status) {
	pr.mu.Lock()
	same := status == pr.status
	pr.mu.Unlock()
	if same {
		return
	}
	if status == plan.StatusCancelled || status == plan.StatusPaused {
		ctx, cancel := context.WithTimeout(context.Background(), pr.c.cfg.WriteTimeout)
		p, _, err := pr.c.store.Plan(ctx, pr.p.ID)
		cancel()
		if err == nil && p.Status == status {
			pr.apply(p.Status, p.Reason)
			return
		}
	}
	pr.apply(status, "")
}

func (pr *planRun) apply(status plan.Status, reason string) {
	pr.mu.Lock()
	if status == pr.status && reason == pr.reason {
		pr.mu.Unlock()
		return
	}
	prev := pr.status
	pr.status, pr.reason = status, reason
	runs := make([]*taskRun, 0, len(pr.running))
	for _, r := range pr.running {
		runs = append(runs, r)
	}
	pr.mu.Unlock()
	switch status {
	case plan.StatusCancelled:
		for _, r := range runs {
			r.requestCancel("plan cancelled: " + reason)
		}
	case plan.StatusPaused:
		// A failure threshold only stops new tasks; a person's pause also
		// pauses the running ones between two stages.
		if reason != plan.ReasonFailureThreshold && reason != "" {
			for _, r := range runs {
				r.requestPlanPause()
			}
		}
	case plan.StatusRunning:
		for _, r := range runs {
			if why := r.pauseReq.Load(); why != nil && *why == ReasonPlanPaused {
				r.pauseReq.CompareAndSwap(why, nil)
			}
		}
		if prev == plan.StatusPaused && !pr.shared {
			// (Shared mode: the resume queued the paused tasks.)
			pr.resumePaused()
		}
	}
	pr.signal()
}

// resumePaused queues the plan's PAUSED tasks to be resumed.
func (pr *planRun) resumePaused() {
	items, err := pr.c.loadItems(context.Background(), pr.p.ID, task.StatusPaused, itemResume)
	if err != nil {
		pr.log.Warn().Err(err).Msg("could not list paused tasks to resume")
		return
	}
	pr.enqueue(items)
}

// stop makes the run stop feeding (shutdown, or another instance owns the plan).
func (pr *planRun) stop() {
	pr.mu.Lock()
	pr.stopped = true
	pr.mu.Unlock()
	pr.signal()
}

// poll re-reads the plan record every PlanPoll to see what other instances
// did to it: pause, resume, cancel, a takeover.
func (pr *planRun) poll() {
	tick := time.NewTicker(pr.c.cfg.PlanPoll)
	defer tick.Stop()
	for {
		select {
		case <-pr.done:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), pr.c.cfg.WriteTimeout)
		p, _, err := pr.c.store.Plan(ctx, pr.p.ID)
		cancel()
		if err != nil {
			continue
		}
		if !pr.shared && p.Owner != pr.c.cfg.Instance {
			pr.log.Warn().Str("owner", p.Owner).Msg("plan taken over by another instance; stop starting its tasks")
			pr.stop()
			continue
		}
		pr.apply(p.Status, p.Reason)
	}
}

// cancelQueued cancels the tasks still queued when the plan was cancelled.
func (pr *planRun) cancelQueued() {
	pr.mu.Lock()
	rest := pr.queue[pr.next:]
	pr.queue, pr.next = nil, 0
	reason := "plan cancelled: " + pr.reason
	pr.mu.Unlock()
	for _, it := range rest {
		if it.t != nil {
			pr.c.cancelIdle(context.Background(), it.t, reason, task.Event{})
		}
	}
}

// loadItems lists a plan's tasks in status s as plan items.
func (c *Coordinator) loadItems(ctx context.Context, planID string, s task.Status, mode itemMode) ([]planItem, error) {
	var items []planItem
	// Takeover candidates are every RUNNING task that c.orphaned calls
	// orphaned — the rule the API answers "orphaned" by (owner not alive, or
	// its heartbeat older than a lease) —, not only those the store's filter
	// keeps (heartbeat older than a lease): a resume sent as soon as a task
	// shows orphaned must take it over.
	f := plan.TaskFilter{Status: s, Limit: plan.LimitMax}
	for {
		ts, next, err := c.store.PlanTasks(ctx, planID, f)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			if mode == itemTakeover && !c.orphaned(t) {
				continue
			}
			items = append(items, planItem{t: t, mode: mode})
		}
		if next == "" {
			return items, nil
		}
		f.Cursor = next
	}
}
