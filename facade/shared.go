package facade

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
)

// WorkQueue is a plan's work shared by every live instance (docs/architecture.md, "Shared plan work"): a
// queue of the plan's tasks to start in Redis, and permits on the plan's
// maxConcurrency, one limit across all instances. The Redis and Dual
// stores implement it; Config.SharedPlans needs it.
type WorkQueue interface {
	// PushQueue appends entries to a plan's queue (at its head when front)
	// and marks the plan active.
	PushQueue(ctx context.Context, planID string, es []plan.QueueEntry, front bool) error
	// ClaimTasks frees the permits of release, then takes up to want of
	// the plan's next entries, each with a permit leased for lease, if the
	// plan is RUNNING, as many as fewer than maxConcurrency permits held
	// allow. Permits whose lease passed are freed and their entries queued
	// again first. One round trip.
	ClaimTasks(ctx context.Context, planID string, release []plan.QueueEntry, lease time.Duration, want int) (plan.Claim, error)
	// RenewPermits extends the leases of permits still held.
	RenewPermits(ctx context.Context, planID string, es []plan.QueueEntry, lease time.Duration) (int, error)
	// ReleasePermits frees permits.
	ReleasePermits(ctx context.Context, planID string, es []plan.QueueEntry) error
	// DropQueue deletes a plan's queue and makes it inactive.
	DropQueue(ctx context.Context, planID string) error
	// QueueEntries returns a plan's queued entries and held permits.
	QueueEntries(ctx context.Context, planID string) (queued, held []plan.QueueEntry, err error)
	// ActiveQueues returns the state of every active plan.
	ActiveQueues(ctx context.Context) ([]plan.QueueState, error)
	// QueuedTask reads the task of an entry (one round trip).
	QueuedTask(ctx context.Context, e plan.QueueEntry) (*task.Task, error)
}

// claimPoll is how often a plan run asks for a permit again while every
// permit is held (by any instance): a quarter of PlanPoll, 10ms..250ms.
func (c *Coordinator) claimPoll() time.Duration {
	return min(max(c.cfg.PlanPoll/4, 10*time.Millisecond), 250*time.Millisecond)
}

// share is how many of a plan's maxConcurrency tasks this instance runs at
// most: an equal part for every live instance, the remainder to the first
// ones by sorted instance id — so that one fast instance does not starve
// the others —, and at least one (with more live instances than
// maxConcurrency the permits still bound the total; an instance listed
// alive that takes no work, say one that just died, then stalls nobody).
// All of it while the live instances are unknown.
func (c *Coordinator) share(maxConcurrency int) int {
	maxConcurrency = max(maxConcurrency, 1)
	live := c.liveOwners() // sorted, with this instance
	if len(live) == 0 {
		return maxConcurrency
	}
	rank := slices.Index(live, c.cfg.Instance)
	if rank < 0 {
		rank, live = len(live), append(live, c.cfg.Instance)
	}
	n := maxConcurrency / len(live)
	if rank < maxConcurrency%len(live) {
		n++
	}
	return max(n, 1)
}

// queueEntries are the entries of items.
func queueEntries(items []planItem) []plan.QueueEntry {
	es := make([]plan.QueueEntry, 0, len(items))
	for _, it := range items {
		kind := plan.QueueStart
		switch it.mode {
		case itemResume:
			kind = plan.QueueResume
		case itemTakeover:
			kind = plan.QueueTakeover
		}
		es = append(es, plan.QueueEntry{Kind: kind, TenantID: it.t.TenantID, TaskID: it.t.ID})
	}
	return es
}

// queueWork puts items on the plan's shared queue and makes sure a run of
// the plan claims work here too.
func (c *Coordinator) queueWork(ctx context.Context, p *plan.Plan, stages []stage.Runnable, items []planItem) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.WriteTimeout)
	defer cancel()
	if err := c.queue.PushQueue(ctx, p.ID, queueEntries(items), false); err != nil {
		return err
	}
	c.startPlanRun(p, stages, nil)
	return nil
}

// sharedLoop is a plan run in shared mode: it claims the plan's queued
// tasks, one permit each, while the plan is RUNNING and this instance runs
// fewer than its share, and ends when nothing is queued and none of its
// tasks runs here (discovery starts it again when work is queued).
func (pr *planRun) sharedLoop() {
	c := pr.c
	go pr.renewPermits()
	// Claimed entries run on workers kept for the loop's life (entryWorker).
	work, quit := make(chan plan.QueueEntry), make(chan struct{})
	defer close(quit)
	idle := time.NewTimer(0)
	defer idle.Stop()
	wait := func(d time.Duration) {
		idle.Reset(d)
		select {
		case <-idle.C:
		case <-pr.wake:
			idle.Stop() // (Go ≥ 1.23: no stale tick is delivered after Stop)
		case <-c.hardStop.Done():
		}
	}
	<-idle.C
	for {
		if pr.halted() || c.hardStop.Err() != nil {
			return
		}
		pr.mu.Lock()
		status, inflight := pr.status, pr.inflight
		pr.mu.Unlock()
		if status != plan.StatusRunning {
			if inflight == 0 || status.Finished() {
				return
			}
			wait(c.cfg.PlanPoll)
			continue
		}
		// The share is computed without pr.mu: liveOwners takes c.mu.
		share := c.share(pr.p.MaxConcurrency)
		if inflight >= share {
			wait(c.claimPoll())
			continue
		}
		c.waitSuspect()
		pr.mu.Lock()
		release := pr.release
		pr.release = nil
		pr.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.WriteTimeout)
		// The whole free share in one claim: the tasks' starts then reach
		// Redis together (reads, locks and first writes share pipelines).
		claim, err := c.queue.ClaimTasks(ctx, pr.p.ID, release, c.cfg.Lease, share-inflight)
		cancel()
		if err != nil {
			if !errors.Is(err, task.ErrInvalid) {
				pr.mu.Lock()
				pr.release = append(pr.release, release...)
				pr.mu.Unlock()
			}
			pr.log.Warn().Err(err).Msg("could not claim a task")
			wait(c.cfg.LockWaitPoll)
			continue
		}
		switch claim.Outcome {
		case plan.ClaimGranted:
			pr.mu.Lock()
			pr.inflight += len(claim.Entries)
			for _, e := range claim.Entries {
				pr.held[e.TaskID] = e
			}
			pr.mu.Unlock()
			pr.entries.Add(len(claim.Entries))
			c.claimedEntries.Add(int64(len(claim.Entries)))
			for _, e := range claim.Entries {
				select {
				case work <- e: // an idle worker takes it
				default:
					go pr.entryWorker(e, work, quit)
				}
			}
		case plan.ClaimFull:
			wait(c.claimPoll())
		case plan.ClaimEmpty:
			if inflight == 0 {
				return
			}
			wait(c.claimPoll())
		case plan.ClaimNotRunning:
			pr.observe(claim.Status)
		case plan.ClaimNoPlan:
			if inflight == 0 {
				return
			}
			wait(c.cfg.PlanPoll)
		}
	}
}

// endShared ends a shared run: it frees the permits of tasks that ended
// and tells startPlanRun to start a new run from now on.
func (pr *planRun) endShared() {
	pr.mu.Lock()
	pr.ended = true
	release := pr.release
	pr.release = nil
	pr.freeing = len(release) > 0
	pr.mu.Unlock()
	pr.freePermits(release)
	pr.mu.Lock()
	pr.freeing = false
	pr.mu.Unlock()
}

// freePermits frees the permits of es (none for no entries).
func (pr *planRun) freePermits(es []plan.QueueEntry) {
	if len(es) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), pr.c.cfg.WriteTimeout)
	defer cancel()
	if err := pr.c.queue.ReleasePermits(ctx, pr.p.ID, es); err != nil {
		pr.log.Warn().Err(err).Int("permits", len(es)).Msg("could not free permits; they free when their lease ends")
	}
}

// wakeUp wakes the claiming loop.
func (pr *planRun) wakeUp() {
	select {
	case pr.wake <- struct{}{}:
	default:
	}
}

// entryWorker runs claimed entries — e, then those the claim loop hands it
// while it is idle — until the loop ends (quit). A worker kept between
// entries keeps its grown stack: a goroutine per entry grew a fresh stack
// in every task's first write (runtime.newstack, 7 % of the Go CPU of a
// noop plan in BenchmarkPlanNoop). The instance-owned mode runs its
// tasks on a fixed pool for the same reason (work).
func (pr *planRun) entryWorker(e plan.QueueEntry, work <-chan plan.QueueEntry, quit <-chan struct{}) {
	for {
		pr.runEntry(e)
		select {
		case e = <-work:
		case <-quit:
			return
		}
	}
}

// runEntry runs the task of a claimed entry if it is still what the entry
// was queued for, then gives its permit back (with the loop's next claim,
// or at once if the run has ended). An entry whose task did not start is
// queued again before its permit goes: behind the others while the run
// goes on, at the head when the instance shuts down (the other instances
// take it). Were it dropped, its task would stay PENDING with nobody to
// claim it.
func (pr *planRun) runEntry(e plan.QueueEntry) {
	defer func() {
		pr.c.claimedEntries.Add(-1)
		pr.entries.Done()
	}()
	again := pr.runClaimed(e)
	closing := pr.c.closing.Load() || pr.c.hardStop.Err() != nil
	keep := false // the permit is kept to lapse: its entry goes back then
	if again && closing {
		keep = !pr.requeue(e, true)
	}
	pr.mu.Lock()
	pr.inflight--
	delete(pr.held, e.TaskID)
	ended := pr.ended
	if !ended && !keep {
		pr.release = append(pr.release, e)
	}
	pr.mu.Unlock()
	if ended && !keep {
		pr.freePermits([]plan.QueueEntry{e})
	}
	if again && !closing && !pr.halted() {
		// The start did not land (Redis unreachable, lease lapsed): queue it
		// again behind the others.
		pr.c.sleep(pr.c.cfg.LockWaitPoll)
		pr.requeue(e, false)
	}
	pr.wakeUp()
}

// requeue puts e back on the plan's queue (at its head when front) and
// reports whether it is there.
func (pr *planRun) requeue(e plan.QueueEntry, front bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), pr.c.cfg.WriteTimeout)
	defer cancel()
	if err := pr.c.queue.PushQueue(ctx, pr.p.ID, []plan.QueueEntry{e}, front); err != nil {
		if front {
			pr.log.Error().Err(err).Str("task_id", e.TaskID).Msg("could not queue a task again; its permit goes back to the queue when its lease ends")
		} else {
			pr.log.Error().Err(err).Str("task_id", e.TaskID).Msg("could not queue a task again; a repair of the plan's counts queues it")
		}
		return false
	}
	return true
}

// runClaimed reads the entry's task and runs it as its kind says, if its
// status still fits; it reports whether it should be queued again.
func (pr *planRun) runClaimed(e plan.QueueEntry) (again bool) {
	c := pr.c
	if bt := pr.blindTask(e); bt != nil {
		if again, done := c.startBlind(pr, bt); done {
			return again
		}
		// Not settled without the task as stored: read it.
	}
	t, err := c.readQueued(e)
	if err != nil {
		if IsUnavailable(err) {
			return true
		}
		if IsMalformed(err) {
			pr.log.Error().Err(err).Str("task_id", e.TaskID).Str("tenant_id", e.TenantID).
				Msg("queued task dropped: its stored record is malformed; fix the field named, then repair the plan's counts, which queues it again")
			return false
		}
		pr.log.Warn().Err(err).Str("task_id", e.TaskID).Msg("queued task unreadable; dropped")
		return false
	}
	if t.PlanID != pr.p.ID {
		pr.log.Warn().Str("task_id", e.TaskID).Str("task_plan", t.PlanID).Msg("queued task of another plan; dropped")
		return false
	}
	switch {
	case e.Kind == plan.QueueStart && t.Status == task.StatusPending:
		return pr.c.startTask(pr, t)
	case e.Kind == plan.QueueResume && t.Status == task.StatusPaused:
		return pr.runItem(planItem{t: t, mode: itemResume})
	case e.Kind == plan.QueueTakeover && t.Status == task.StatusRunning && c.orphaned(t):
		return pr.runItem(planItem{t: t, mode: itemTakeover})
	}
	// Anything else was started, finished or changed by someone since it
	// was queued (a dead instance's RUNNING task, say: never restarted).
	return false
}

// readQueued reads the task of a claimed entry from the store.
func (c *Coordinator) readQueued(e plan.QueueEntry) (*task.Task, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.WriteTimeout)
	defer cancel()
	return c.queue.QueuedTask(ctx, e)
}

// blindStore is a Store that takes blind starts (task.Write.Blind):
// repository.Redis, and Dual with shared Redis.
type blindStore interface {
	BlindStarts() bool
}

// blindTask is the task of a claimed start entry as its creation left it
// (PENDING at seq 0, at the plan's first stage), for a blind start: the
// start's write checks that the record is still so and answers with the
// fields only the record has (params, total stages, creation time). nil
// when starts are not blind here: the store or the locker cannot (starts
// take the lock the usual way), or the entry is not a start.
func (pr *planRun) blindTask(e plan.QueueEntry) *task.Task {
	c := pr.c
	if !c.blindStarts || e.Kind != plan.QueueStart || e.Check() != nil {
		return nil
	}
	// Created at or after its plan: the plan's creation stands for it until
	// the answer (a TTL is given again sooner, never later; see
	// repository.Redis.WriteEncoded).
	return task.New(e.TaskID, pr.p.ID, e.TenantID, nil, pr.p.StageNames(), pr.p.CreatedAt)
}

// startBlind starts t (blindTask) with a blind start: done is false when
// the start has to go the usual way with the task as stored (see
// startClaimed).
func (c *Coordinator) startBlind(pr *planRun, t *task.Task) (again, done bool) {
	log := pr.log.With().Str("task_id", t.ID).Str("tenant_id", t.TenantID).Logger()
	c.waitSuspect()
	acquired := c.beginAcquire(t)
	defer acquired()
	return c.startClaimed(pr, t, acquired, log, true)
}

// renewPermits renews the permits of the plan's tasks running here every
// lease/3, in one round trip for all of them, until the run has ended and
// its tasks are done.
func (pr *planRun) renewPermits() {
	c := pr.c
	tick := time.NewTicker(max(c.cfg.Lease/3, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-c.hardStop.Done():
			return
		}
		pr.mu.Lock()
		es := make([]plan.QueueEntry, 0, len(pr.held))
		for _, e := range pr.held {
			es = append(es, e)
		}
		done := pr.ended && len(pr.held) == 0
		pr.mu.Unlock()
		if done {
			return
		}
		if len(es) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.WriteTimeout)
		n, err := c.queue.RenewPermits(ctx, pr.p.ID, es, c.cfg.Lease)
		cancel()
		switch {
		case err != nil:
			pr.log.Warn().Err(err).Msg("could not renew permits")
		case n < len(es):
			pr.log.Warn().Int("held", len(es)).Int("renewed", n).Msg("some permits had expired; their tasks run beyond the plan's limit until they end")
		}
	}
}

// discover starts a run here for every RUNNING plan with queued work or
// held permits that has none, every PlanPoll, until the instance stops.
func (c *Coordinator) discover() {
	tick := time.NewTicker(c.cfg.PlanPoll)
	defer tick.Stop()
	for {
		select {
		case <-c.bgStop:
			return
		case <-c.hardStop.Done():
			return
		case <-tick.C:
		}
		if c.closing.Load() {
			return
		}
		c.discoverOnce()
	}
}

func (c *Coordinator) discoverOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.QueryTimeout)
	defer cancel()
	qs, err := c.queue.ActiveQueues(ctx)
	if err != nil {
		c.log.Warn().Err(err).Msg("could not list active plans")
		return
	}
	for _, q := range qs {
		if q.Status != plan.StatusRunning || (q.Queued == 0 && q.Permits == 0) {
			continue
		}
		if pr := c.localPlan(q.PlanID); pr != nil {
			pr.wakeUp()
			continue
		}
		p, _, err := c.store.Plan(ctx, q.PlanID)
		if err != nil || p.Status != plan.StatusRunning {
			continue
		}
		stages, err := c.compile(p)
		if err != nil {
			c.log.Error().Err(err).Str("plan_id", p.ID).Msg("cannot compile the stages of a running plan; not running its tasks here")
			continue
		}
		c.startPlanRun(p, stages, nil)
	}
}

// requeueMissing queues the items of pending that are neither queued nor
// held (a queue lost, or never pushed) and every item of extra, and makes
// sure a run of the plan claims work here.
func (c *Coordinator) requeueMissing(ctx context.Context, p *plan.Plan, stages []stage.Runnable, pending, extra []planItem) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.WriteTimeout)
	defer cancel()
	queued, held, err := c.queue.QueueEntries(ctx, p.ID)
	if err != nil {
		return err
	}
	known := make(map[string]bool, len(queued)+len(held))
	for _, e := range append(queued, held...) {
		if e.Kind == plan.QueueStart {
			known[e.TaskID] = true
		}
	}
	var items []planItem
	for _, it := range pending {
		if !known[it.t.ID] {
			items = append(items, it)
		}
	}
	if n := len(items); n > 0 {
		c.log.Warn().Str("plan_id", p.ID).Int("tasks", n).Msg("pending tasks missing from the plan's queue; queued again")
	}
	// The tasks a resume takes back (paused, orphaned) were running: they
	// go first, ahead of the tasks that never started — not PAUSED until
	// the rest of the plan is done.
	if len(extra) > 0 {
		if err := c.queue.PushQueue(ctx, p.ID, queueEntries(extra), true); err != nil {
			return err
		}
	}
	if len(items) == 0 {
		c.startPlanRun(p, stages, nil)
		return nil
	}
	return c.queueWork(ctx, p, stages, items)
}
