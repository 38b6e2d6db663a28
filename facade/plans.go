package facade

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/deploycoord/deploycoord/internal/parallel"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
)

// CreatePlan validates spec, stores the plan with one PENDING task per
// tenant and, unless spec.Start is false, starts it on this instance.
func (c *Coordinator) CreatePlan(ctx context.Context, spec plan.Spec, a Actor) (PlanView, error) {
	if c.closing.Load() {
		return PlanView{}, wrapf(ErrShuttingDown, "instance %s is shutting down; create the plan on another instance", c.cfg.Instance)
	}
	if err := spec.Validate(c.cfg.MaxTenants); err != nil {
		return PlanView{}, wrapf(ErrInvalid, "%s", strings.TrimPrefix(err.Error(), "plan: invalid: "))
	}
	stages := spec.Stages
	src := stage.SourceInline
	if spec.Pipeline != "" {
		var ok bool
		if stages, ok = c.cfg.Pipelines[spec.Pipeline]; !ok {
			return PlanView{}, wrapf(ErrInvalid, "unknown pipeline %s; this server defines: %s", task.Quote(spec.Pipeline), c.pipelineNames())
		}
		src = stage.SourceOperator
	}
	compiled, err := c.cfg.Stages.CompileAll(stages, src)
	if err != nil {
		return PlanView{}, wrapf(ErrInvalid, "%v", err)
	}
	if err := c.checkParams(&spec, stages, src); err != nil {
		return PlanView{}, err
	}
	now := c.now()
	p := spec.NewPlan(plan.NewID(now), stages, now)
	names := p.StageNames()
	tasks := make([]*task.Task, len(spec.Tenants))
	for i, ts := range spec.Tenants {
		tasks[i] = task.New(task.NewID(now), p.ID, ts.TenantID, spec.TenantParams(ts), names, now)
	}
	start := spec.ShouldStart()
	if start {
		if err := p.Start(now, c.cfg.Instance); err != nil {
			return PlanView{}, translate(err, "plan")
		}
	}
	if err := c.store.CreatePlan(ctx, p, tasks); err != nil {
		return PlanView{}, translate(err, "plan")
	}
	c.log.Info().Str("plan_id", p.ID).Str("name", p.Name).Int("tasks", len(tasks)).Bool("started", start).
		Str("actor", a.Name).Str("request_id", a.RequestID).Msg("plan created")
	c.publishPlan(p, "plan.created", &a, "", map[string]any{"name": p.Name, "totalTasks": p.TotalTasks, "stages": names})
	if start {
		c.publishPlan(p, "plan.started", &a, "", nil)
	}
	view := PlanView{Plan: p.Clone(), Counts: plan.Counts{task.StatusPending: len(tasks)}}
	if start {
		items := make([]planItem, len(tasks))
		for i, t := range tasks {
			items[i] = planItem{t: t, mode: itemStart}
		}
		if c.queue != nil {
			if err := c.queueWork(ctx, p, compiled, items); err != nil {
				c.log.Error().Err(err).Str("plan_id", p.ID).Msg("plan created RUNNING but its tasks could not be queued; repair its counts to queue them")
				return PlanView{}, translate(err, "queue of plan "+p.ID)
			}
			return view, nil
		}
		c.startPlanRun(p, compiled, items)
	}
	return view, nil
}

// checkParams refuses a plan whose stage templates name a Params key that a
// tenant's params (with the plan's defaults) do not provide: every such
// tenant would fail at that stage at run time.
func (c *Coordinator) checkParams(spec *plan.Spec, stages []task.StageSpec, src stage.Source) error {
	required, err := c.cfg.Stages.RequiredParams(stages, src)
	if err != nil {
		return wrapf(ErrInvalid, "%v", err)
	}
	for i, keys := range required {
		for _, key := range keys {
			if _, ok := spec.Params[key]; ok {
				continue
			}
			missing, first := 0, ""
			for _, ts := range spec.Tenants {
				if _, ok := ts.Params[key]; !ok {
					if missing == 0 {
						first = ts.TenantID
					}
					missing++
				}
			}
			if missing > 0 {
				others := ""
				if missing > 1 {
					others = fmt.Sprintf(" (and %d other tenants)", missing-1)
				}
				return wrapf(ErrInvalid, "stage %s uses .Params.%s, but tenant %s%s has no param %s and the plan's params "+
					"give no default: add it to the plan's params or to each tenant's", task.Quote(stages[i].Name), key, first, others, task.Quote(key))
			}
		}
	}
	return nil
}

func (c *Coordinator) pipelineNames() string {
	names := make([]string, 0, len(c.cfg.Pipelines))
	for n := range c.cfg.Pipelines {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}

// Plan returns a plan with its task counts — seed 002's queryPlanStatus.
func (c *Coordinator) Plan(ctx context.Context, planID string) (PlanView, error) {
	if !plan.ValidID(planID) {
		return PlanView{}, wrapf(ErrInvalid, "plan id %s is not a plan id", task.Quote(planID))
	}
	ctx, cancel := c.queryCtx(ctx)
	defer cancel()
	p, counts, err := c.store.Plan(ctx, planID)
	if err != nil {
		return PlanView{}, translate(err, "plan "+planID)
	}
	orphaned := c.orphanedCount(ctx, p, counts)
	return PlanView{Plan: p, Counts: counts, Orphaned: orphaned, Degraded: c.degradedOf(ctx)}, nil
}

// orphanedCount is how many of a plan's RUNNING tasks are orphaned, as the
// task list judges them; -1 when it cannot tell. The running counters of
// the live owners (one round trip, whatever the plan's size) settle it
// when no other live instance holds RUNNING tasks of the plan: RUNNING
// minus this instance's runs of it (its other RUNNING tasks are an earlier
// process's, or of a run that stopped without its last write). A task
// under another live owner may be orphaned too — a write of it that Redis
// lost in a failover, a run that stopped without its last write, an
// earlier process with its id — which only its heartbeat tells: then the
// plan's RUNNING tasks are read (its RUNNING index) and each is judged.
// Every instance gives the same answer.
func (c *Coordinator) orphanedCount(ctx context.Context, p *plan.Plan, counts plan.Counts) int {
	planID := p.ID
	running := counts[task.StatusRunning]
	if running == 0 {
		return 0
	}
	owners := c.liveOwners()
	if owners == nil {
		return -1
	}
	byOwner, err := c.store.RunningByOwner(ctx, planID, owners)
	if err != nil {
		return -1
	}
	for owner, n := range byOwner {
		if owner != c.cfg.Instance && n > 0 {
			return c.orphanedByTask(ctx, planID)
		}
	}
	return max(running-min(byOwner[c.cfg.Instance], c.localRuns(planID)), 0)
}

// orphanedByTask counts the plan's orphaned RUNNING tasks one by one, as
// the task list judges them, through the plan's RUNNING index (the
// cross-plan search's): a read of its running tasks, whatever the plan's
// size. -1 when they cannot be read.
func (c *Coordinator) orphanedByTask(ctx context.Context, planID string) int {
	n, cursor := 0, ""
	for {
		ts, next, err := c.store.SearchTasks(ctx, plan.TaskSearch{PlanID: planID, Match: c.orphaned, Cursor: cursor, Limit: plan.LimitMax})
		if err != nil {
			return -1
		}
		n += len(ts)
		if next == "" {
			return n
		}
		cursor = next
	}
}

// localRuns counts the runs of a plan's tasks on this instance, those being
// started included (Coordinator.acquiring).
func (c *Coordinator) localRuns(planID string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.tasks {
		if r.t.PlanID == planID {
			n++
		}
	}
	for id, m := range c.acquiring {
		if m.planID == planID && c.tasks[id] == nil {
			n++
		}
	}
	return n
}

// Plans lists plans, newest first, each with its task counts, and the
// cursor of the next page. Three round trips a page: the ids, the records,
// the counts (one pipelined HMGET per plan).
func (c *Coordinator) Plans(ctx context.Context, f plan.ListFilter) ([]PlanView, string, error) {
	if f.Status != "" && !f.Status.Valid() {
		return nil, "", wrapf(ErrInvalid, "status %s is not a plan status", task.Quote(string(f.Status)))
	}
	if err := checkLimit(&f.Limit); err != nil {
		return nil, "", err
	}
	ctx, cancel := c.queryCtx(ctx)
	defer cancel()
	ps, next, err := c.store.Plans(ctx, f)
	if err != nil {
		return nil, "", translate(err, "plans")
	}
	// The page's counts in one more round trip, whatever the page's size,
	// so that a listing shows each plan's progress.
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	counts, err := c.store.PlanCounts(ctx, ids)
	if err != nil {
		return nil, "", translate(err, "plan counts")
	}
	degraded := c.degradedOf(ctx)
	if err := fromMemory(degraded, len(ps), "plans"); err != nil {
		return nil, "", err
	}
	views := make([]PlanView, len(ps))
	for i, p := range ps {
		views[i] = PlanView{Plan: p, Counts: counts[p.ID], Degraded: degraded}
		if views[i].Counts == nil {
			views[i].Counts = plan.Counts{}
		}
	}
	return views, next, nil
}

// PlanTasks lists a plan's tasks in plan order, filtered by f (status,
// orphaned, tenant id prefix). Returns ErrInvalid, ErrNotFound,
// ErrUnavailable.
func (c *Coordinator) PlanTasks(ctx context.Context, planID string, f plan.TaskFilter) ([]TaskView, string, error) {
	if !plan.ValidID(planID) {
		return nil, "", wrapf(ErrInvalid, "plan id %s is not a plan id", task.Quote(planID))
	}
	if f.Status != "" && !f.Status.Valid() {
		return nil, "", wrapf(ErrInvalid, "status %s is not a task status", task.Quote(string(f.Status)))
	}
	if f.TenantPrefix != "" && !task.ValidTenantID(f.TenantPrefix) {
		return nil, "", wrapf(ErrInvalid, "tenant prefix %s is not the start of a tenant id", task.Quote(f.TenantPrefix))
	}
	if err := checkLimit(&f.Limit); err != nil {
		return nil, "", err
	}
	if f.Orphaned {
		// The store can only filter by the task's own heartbeat; an owner
		// known dead makes a task orphaned sooner. List RUNNING tasks and
		// apply the coordinator's rule.
		if f.Status != "" && f.Status != task.StatusRunning {
			return []TaskView{}, "", nil
		}
		f.Status = task.StatusRunning
	}
	orphanedOnly := f.Orphaned
	f.Orphaned = false
	ctx, cancel := c.queryCtx(ctx)
	defer cancel()
	ts, next, err := c.store.PlanTasks(ctx, planID, f)
	if err != nil {
		return nil, "", translate(err, "plan "+planID)
	}
	degraded := c.degradedOf(ctx)
	views := make([]TaskView, 0, len(ts))
	for _, t := range ts {
		v := c.taskView(t, nil, degraded)
		if orphanedOnly && !v.Orphaned {
			continue
		}
		views = append(views, v)
	}
	if err := fromMemory(degraded, len(views), "the tasks of plan "+planID); err != nil {
		return nil, "", err
	}
	return views, next, nil
}

func checkLimit(limit *int) error {
	switch {
	case *limit == 0:
		*limit = plan.LimitDefault
	case *limit < 0 || *limit > plan.LimitMax:
		return wrapf(ErrInvalid, "limit %d out of range 1..%d", *limit, plan.LimitMax)
	}
	return nil
}

// StartPlan starts a CREATED plan on this instance.
func (c *Coordinator) StartPlan(ctx context.Context, planID, reason string, a Actor) (PlanView, error) {
	p, items, stages, err := c.planForRun(ctx, planID, reason, plan.StatusCreated)
	if err != nil {
		return PlanView{}, err
	}
	if err := p.Start(c.now(), c.cfg.Instance); err != nil {
		return PlanView{}, c.planConflict(err, p)
	}
	if err := c.store.UpdatePlan(ctx, p, plan.StatusCreated); err != nil {
		return PlanView{}, c.planConflict(err, p)
	}
	c.logPlanAction(p, "plan started", reason, a)
	c.publishPlan(p, "plan.started", &a, reason, nil)
	if c.queue != nil {
		if err := c.queueWork(ctx, p, stages, items); err != nil {
			return PlanView{}, translate(err, "queue of plan "+planID)
		}
		return c.Plan(ctx, planID)
	}
	c.startPlanRun(p, stages, items)
	return c.Plan(ctx, planID)
}

// ResumeOptions say what a plan resume takes on.
type ResumeOptions struct {
	Reason string
	// IncludeOrphaned also takes over the plan's orphaned RUNNING tasks
	// (their owner died) and resumes every PAUSED task, whoever paused it.
	IncludeOrphaned bool
}

// ResumePlan resumes a plan. With shared plans (Config.SharedPlans) the
// plan's PAUSED tasks the plan pause or a shutdown paused (with
// IncludeOrphaned: its orphans and every PAUSED task) are queued for every
// instance to run under maxConcurrency, and a RUNNING plan may be resumed
// whoever owns it. Otherwise it resumes on this instance, which becomes its
// owner:
//
//   - a PAUSED plan: its PENDING tasks start and the tasks the plan pause or
//     an instance shutdown paused resume from their checkpoints;
//   - a RUNNING plan whose owner instance is dead (a takeover): its PENDING
//     tasks start.
//
// With IncludeOrphaned, orphaned RUNNING tasks are taken over and every
// PAUSED task resumes as well. A RUNNING plan whose owner is alive is
// refused with ErrInvalidState.
func (c *Coordinator) ResumePlan(ctx context.Context, planID string, o ResumeOptions, a Actor) (PlanView, error) {
	if c.closing.Load() {
		return PlanView{}, wrapf(ErrShuttingDown, "instance %s is shutting down", c.cfg.Instance)
	}
	p, pending, stages, err := c.planForRun(ctx, planID, o.Reason, plan.StatusPaused, plan.StatusRunning)
	if err != nil {
		return PlanView{}, err
	}
	local := c.localPlan(planID)
	from, prevOwner := p.Status, p.Owner
	if from == plan.StatusRunning && local == nil && prevOwner != c.cfg.Instance && c.queue == nil {
		if alive, known := c.ownerAlive(prevOwner); alive || !known {
			return PlanView{}, wrapf(ErrInvalidState, "plan %s is running on instance %s, which is alive (or this instance cannot tell yet); pause it first, or resume it once %s is gone", planID, prevOwner, prevOwner)
		}
	}
	if err := p.Resume(c.now(), c.cfg.Instance); err != nil {
		return PlanView{}, c.planConflict(err, p)
	}
	if err := c.store.UpdatePlan(ctx, p, from); err != nil {
		return PlanView{}, c.planConflict(err, p)
	}
	items := pending
	if from == plan.StatusPaused || o.IncludeOrphaned || c.queue != nil {
		paused, err := c.loadItems(ctx, planID, task.StatusPaused, itemResume)
		if err != nil {
			return PlanView{}, translate(err, "plan "+planID)
		}
		for _, it := range paused {
			if o.IncludeOrphaned || it.t.Reason == ReasonPlanPaused || it.t.Reason == ReasonShutdown {
				items = append(items, it)
			}
		}
	}
	if o.IncludeOrphaned {
		orphans, err := c.loadItems(ctx, planID, task.StatusRunning, itemTakeover)
		if err != nil {
			return PlanView{}, translate(err, "plan "+planID)
		}
		items = append(items, orphans...)
	}
	c.logPlanAction(p, "plan resumed", o.Reason, a)
	data := map[string]any{"tasks": len(items), "includeOrphaned": o.IncludeOrphaned}
	if prevOwner != c.cfg.Instance {
		data["previousOwner"] = prevOwner
	}
	c.publishPlan(p, "plan.resumed", &a, o.Reason, data)
	if c.queue != nil {
		if local != nil {
			local.apply(plan.StatusRunning, "")
		}
		// Shared mode: the PENDING tasks are queued already (those that are
		// not, after a lost queue, are queued again); paused and orphaned
		// ones join them.
		if err := c.requeueMissing(ctx, p, stages, pending, items[len(pending):]); err != nil {
			return PlanView{}, translate(err, "queue of plan "+planID)
		}
		return c.Plan(ctx, planID)
	}
	if local != nil && local.enqueue(items) {
		local.apply(plan.StatusRunning, "")
	} else {
		// No run here, or it ended since it was looked up.
		c.startPlanRun(p, stages, items)
	}
	return c.Plan(ctx, planID)
}

// PausePlan pauses a RUNNING plan: no new task starts and running tasks
// pause between two stages (on whichever instance runs them).
func (c *Coordinator) PausePlan(ctx context.Context, planID, reason string, a Actor) (PlanView, error) {
	if err := checkReason(reason); err != nil {
		return PlanView{}, err
	}
	p, err := c.loadPlan(ctx, planID)
	if err != nil {
		return PlanView{}, err
	}
	if err := p.Pause(c.now(), reason); err != nil {
		return PlanView{}, c.planConflict(err, p)
	}
	if err := c.store.UpdatePlan(ctx, p, plan.StatusRunning); err != nil {
		return PlanView{}, c.planConflict(err, p)
	}
	c.logPlanAction(p, "plan paused", reason, a)
	c.publishPlan(p, "plan.paused", &a, reason, nil)
	if pr := c.localPlan(planID); pr != nil {
		pr.apply(plan.StatusPaused, reason)
	}
	return c.Plan(ctx, planID)
}

// CancelPlan cancels a plan: PENDING and PAUSED tasks are cancelled at once,
// running ones between two stages.
func (c *Coordinator) CancelPlan(ctx context.Context, planID, reason string, a Actor) (PlanView, error) {
	if err := checkReason(reason); err != nil {
		return PlanView{}, err
	}
	p, err := c.loadPlan(ctx, planID)
	if err != nil {
		return PlanView{}, err
	}
	from := p.Status
	if err := p.Cancel(c.now(), reason); err != nil {
		return PlanView{}, c.planConflict(err, p)
	}
	if err := c.store.UpdatePlan(ctx, p, from); err != nil {
		return PlanView{}, c.planConflict(err, p)
	}
	c.logPlanAction(p, "plan cancelled", reason, a)
	c.publishPlan(p, "plan.cancelled", &a, reason, nil)
	if pr := c.localPlan(planID); pr != nil {
		pr.apply(plan.StatusCancelled, reason)
	}
	if c.queue != nil {
		// Nothing queued starts any more (claims stop at a plan that is not
		// RUNNING anyway); the queued tasks are cancelled below.
		if err := c.queue.DropQueue(ctx, planID); err != nil {
			c.log.Warn().Err(err).Str("plan_id", planID).Msg("could not drop the queue of a cancelled plan; it expires with the plan")
		}
	}
	// Cancel what no instance is running. Running tasks get a request; their
	// owner honours it between two stages. Each write applies only if the
	// task is unchanged, so this is safe against the owner starting tasks.
	// The tasks are written bulkWorkers at a time: each write is its own
	// (fenced, sequence-checked) write as before, and the store's group
	// commit sends the concurrent ones in shared pipelines — one round
	// trip per task, one after the other, took 9.5 s for 50 000 tasks.
	why := "plan cancelled: " + reason
	for _, s := range []task.Status{task.StatusPending, task.StatusPaused, task.StatusRunning} {
		items, err := c.loadItems(ctx, planID, s, itemStart)
		if err != nil {
			return PlanView{}, translate(err, "plan "+planID)
		}
		err = parallel.ForEach(len(items), bulkWorkers, func(i int) error {
			it := items[i]
			ev := a.event(task.EventCancelRequested, c.now(), why)
			ev.Instance = c.cfg.Instance
			if s == task.StatusRunning {
				if r := c.localRun(it.t.ID); r != nil {
					r.requestCancel(why)
				}
				if _, err := c.store.RequestTask(ctx, it.t.TenantID, it.t.ID, task.RequestCancel, ev); err != nil {
					return translate(err, "task "+it.t.ID)
				}
				return nil
			}
			return c.cancelIdle(ctx, it.t, why, ev)
		})
		if err != nil {
			return PlanView{}, err
		}
	}
	return c.Plan(ctx, planID)
}

func (c *Coordinator) localPlan(planID string) *planRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.plans[planID]
}

func (c *Coordinator) loadPlan(ctx context.Context, planID string) (*plan.Plan, error) {
	if !plan.ValidID(planID) {
		return nil, wrapf(ErrInvalid, "plan id %s is not a plan id", task.Quote(planID))
	}
	p, _, err := c.store.Plan(ctx, planID)
	if err != nil {
		return nil, translate(err, "plan "+planID)
	}
	return p, nil
}

// planForRun loads a plan that must be in one of the statuses from, its
// compiled stages and its PENDING tasks as start items.
func (c *Coordinator) planForRun(ctx context.Context, planID, reason string, from ...plan.Status) (*plan.Plan, []planItem, []stage.Runnable, error) {
	if err := checkReason(reason); err != nil {
		return nil, nil, nil, err
	}
	p, err := c.loadPlan(ctx, planID)
	if err != nil {
		return nil, nil, nil, err
	}
	if !slices.Contains(from, p.Status) {
		return nil, nil, nil, c.planConflict(&plan.TransitionError{PlanID: p.ID, From: p.Status, To: plan.StatusRunning}, p)
	}
	stages, err := c.compile(p)
	if err != nil {
		return nil, nil, nil, err
	}
	items, err := c.loadItems(ctx, planID, task.StatusPending, itemStart)
	if err != nil {
		return nil, nil, nil, translate(err, "plan "+planID)
	}
	return p, items, stages, nil
}

// planConflict turns a refused plan move into ErrPlanFinished or
// ErrInvalidState with a useful detail.
func (c *Coordinator) planConflict(err error, p *plan.Plan) error {
	var te *plan.TransitionError
	if errors.As(err, &te) {
		if te.From.Finished() {
			return wrapf(ErrPlanFinished, "plan %s is %s", p.ID, te.From)
		}
		return wrapf(ErrInvalidState, "plan %s is %s: cannot move it to %s", p.ID, te.From, te.To)
	}
	return translate(err, fmt.Sprintf("plan %s", p.ID))
}

func (c *Coordinator) logPlanAction(p *plan.Plan, msg, reason string, a Actor) {
	c.log.Info().Str("plan_id", p.ID).Str("status", string(p.Status)).Str("actor", a.Name).Str("role", a.Role).
		Str("request_id", a.RequestID).Str("reason", reason).Msg(msg)
}

// BeginShutdown is Shutdown's first step, at once: the instance takes no new
// work — no claim, no task start, no plan created, retried or resumed here
// (ErrShuttingDown) — while running stages go on. cmd/deploycoord calls it
// on SIGTERM before it drains its HTTP connections, then Shutdown. Safe to
// call more than once.
func (c *Coordinator) BeginShutdown() { c.beginShutdown() }

// beginShutdown is BeginShutdown; it returns every plan run it stopped,
// this time or an earlier one: a run that ended since (its plan finished,
// or it halted) has left c.plans, and Shutdown must still wait for it and,
// in the plan-owner mode, pause its plan.
func (c *Coordinator) beginShutdown() []*planRun {
	c.mu.Lock()
	c.closing.Store(true)
	for _, pr := range c.plans {
		if !slices.Contains(c.stopped, pr) {
			c.stopped = append(c.stopped, pr)
		}
	}
	plans := slices.Clone(c.stopped)
	c.mu.Unlock()
	for _, pr := range plans {
		pr.stop()
	}
	return plans
}

// Shutdown stops taking work and lets running stages finish until ctx ends
// (the grace period). Tasks then still running are interrupted and left
// PAUSED with reason "instance shutdown", their locks released, and plans
// this instance was running are paused, so a person can resume them on any
// instance. Nothing restarts by itself.
func (c *Coordinator) Shutdown(ctx context.Context) error {
	plans := c.beginShutdown()
	done := make(chan struct{})
	go func() { c.runs.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("facade: shutdown grace period over; interrupting running stages: %w", ctx.Err())
		c.cancelHardStop()
		c.mu.Lock()
		for _, r := range c.tasks {
			r.stopRun()
		}
		c.mu.Unlock()
		<-done
	}
	c.cancelHardStop()
	for _, pr := range plans {
		<-pr.done
		if pr.shared {
			// The plan goes on on the other instances; this one's permits
			// are freed as its tasks end.
			pr.entries.Wait()
			continue
		}
		c.pauseOnShutdown(pr.p.ID)
	}
	c.stopBackground()
	c.log.Info().Msg("coordinator stopped")
	return err
}

// stopBackground stops the housekeeping loop, deregisters the instance and
// flushes the event feed (once).
func (c *Coordinator) stopBackground() {
	c.stopOnce.Do(func() {
		close(c.bgStop)
		<-c.bgDone
		// Short: with Redis down, shutdown must not hang here; the record
		// expires with its TTL anyway.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := c.store.DeregisterInstance(ctx, c.cfg.Instance); err != nil {
			c.log.Warn().Err(err).Msg("deregister instance")
		}
		c.pub.close()
	})
}

// pauseOnShutdown pauses a plan this instance ran, if it is still RUNNING
// and ours, so it does not look alive without a runner.
func (c *Coordinator) pauseOnShutdown(planID string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.WriteTimeout)
	defer cancel()
	p, _, err := c.store.Plan(ctx, planID)
	if err != nil || p.Status != plan.StatusRunning || p.Owner != c.cfg.Instance {
		return
	}
	if err := p.Pause(c.now(), ReasonShutdown); err != nil {
		return
	}
	if err := c.store.UpdatePlan(ctx, p, plan.StatusRunning); err != nil {
		c.log.Warn().Err(err).Str("plan_id", planID).Msg("pause plan on shutdown")
		return
	}
	c.publishPlan(p, "plan.paused", nil, ReasonShutdown, nil)
}

// RepairCounts recomputes a plan's task counts from its task records (the
// counts cannot drift by design; this is the tool for when a crash between
// a refused write and its correction, or a hand edit, made them drift) and
// derives the plan's status again. It is an operator action: reason is
// required and recorded.
func (c *Coordinator) RepairCounts(ctx context.Context, planID, reason string, a Actor) (PlanView, error) {
	if err := checkReason(reason); err != nil {
		return PlanView{}, err
	}
	p, err := c.loadPlan(ctx, planID)
	if err != nil {
		return PlanView{}, err
	}
	counts, changed, err := c.store.RepairCounts(ctx, planID)
	if err != nil {
		return PlanView{}, translate(err, "plan "+planID)
	}
	if c.queue != nil && (p.Status == plan.StatusRunning || p.Status == plan.StatusPaused) {
		// A lost queue (or an entry whose claimer died before starting it
		// and whose permit was dropped) is rebuilt from the PENDING tasks.
		pending, err := c.loadItems(ctx, planID, task.StatusPending, itemStart)
		if err != nil {
			return PlanView{}, translate(err, "plan "+planID)
		}
		stages, err := c.compile(p)
		if err != nil {
			return PlanView{}, err
		}
		if err := c.requeueMissing(ctx, p, stages, pending, nil); err != nil {
			return PlanView{}, translate(err, "queue of plan "+planID)
		}
	}
	c.logPlanAction(p, "plan counts repaired", reason, a)
	data := map[string]any{}
	for s, n := range counts {
		data[string(s)] = n
	}
	c.publishPlan(p, "plan.counts_repaired", &a, reason, map[string]any{"counts": data})
	pv, err := c.Plan(ctx, planID)
	if changed && err == nil {
		// The recount let the plan finish (drifted counts held it open):
		// that end is an event as a task write's would be. (Only the
		// repair's own derivation says so: a task write that finished the
		// plan meanwhile published it.)
		c.planStatusChanged(planID, task.WriteResult{PlanStatus: string(pv.Plan.Status), PlanStatusChanged: true})
	}
	return pv, err
}
