package facade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// RetryRequest is a manual retry of a tenant's current task (docs/api.md
// POST /v1/tenants/{tenantId}/retry). At most one mode is set: the default
// resumes from the checkpoint; FromCheckpoint=false starts over with the
// checkpoint reset; FromStage re-runs from a stage the checkpoint covers;
// SkipStage marks the stage after the checkpoint skipped with Outputs and
// goes on.
type RetryRequest struct {
	FromCheckpoint *bool          `json:"fromCheckpoint,omitempty"`
	FromStage      string         `json:"fromStage,omitempty"`
	SkipStage      bool           `json:"skipStage,omitempty"`
	Outputs        map[string]any `json:"outputs,omitempty"`
	// DryRun answers which stages would run and changes nothing.
	DryRun bool `json:"dryRun,omitempty"`
	// ExpectedAttempt, when set, must equal the task's attempt (guards
	// against two people retrying the same failure).
	ExpectedAttempt int `json:"expectedAttempt,omitempty"`
	// Reason is required: it goes into the timeline and the audit trail.
	Reason string `json:"reason"`
}

// RetryResult is the answer to a retry: the task now RUNNING (nil for a dry
// run) and the stages that run (or would run).
type RetryResult struct {
	Task     *TaskView
	WouldRun []string
	DryRun   bool
}

func (r RetryRequest) validate() error {
	if err := checkReason(r.Reason); err != nil {
		return err
	}
	fromStart := r.FromCheckpoint != nil && !*r.FromCheckpoint
	modes := 0
	for _, set := range []bool{fromStart, r.FromStage != "", r.SkipStage} {
		if set {
			modes++
		}
	}
	switch {
	case modes > 1:
		return wrapf(ErrInvalid, "choose one of fromCheckpoint:false, fromStage and skipStage")
	case r.FromStage != "" && !task.ValidStageName(r.FromStage):
		return wrapf(ErrInvalid, "fromStage %s is not a valid stage name", task.Quote(r.FromStage))
	case len(r.Outputs) > 0 && !r.SkipStage:
		return wrapf(ErrInvalid, "outputs are only accepted with skipStage")
	case r.ExpectedAttempt < 0:
		return wrapf(ErrInvalid, "expectedAttempt must be positive")
	}
	return nil
}

// Retry re-runs the tenant's current task from its checkpoint (or as the
// request says) on this instance. It is refused with ErrTaskRunning while the
// task runs on a live instance, ErrTaskCompleted when it completed,
// ErrTaskPending when it never started, ErrAttemptMismatch when
// ExpectedAttempt is stale, and ErrTenantLocked when another task holds the
// tenant. Of two people retrying at once exactly one wins.
func (c *Coordinator) Retry(ctx context.Context, tenantID string, req RetryRequest, a Actor) (RetryResult, error) {
	return c.retryTask(ctx, tenantID, "", req, a, nil)
}

// retryTask is Retry of the tenant's current task; when taskID is set, that
// task must be the tenant's current one (ErrInvalidState otherwise: a newer
// task of the tenant would be undone by re-running an older one). planOK,
// when set, checks the task's plan as read for this retry (a bulk retry
// stops when the plan was cancelled after it began).
func (c *Coordinator) retryTask(ctx context.Context, tenantID, taskID string, req RetryRequest, a Actor, planOK func(*plan.Plan) error) (RetryResult, error) {
	if err := checkTenant(tenantID); err != nil {
		return RetryResult{}, err
	}
	if err := req.validate(); err != nil {
		return RetryResult{}, err
	}
	t, ck, err := c.store.TaskByTenant(ctx, tenantID)
	if err != nil {
		return RetryResult{}, translate(err, "task of tenant "+tenantID)
	}
	if taskID != "" && t.ID != taskID {
		return RetryResult{}, wrapf(ErrInvalidState, "task %s is no longer the current task of tenant %s: task %s of plan %s is; retry that one instead",
			taskID, tenantID, t.ID, t.PlanID)
	}
	if err := c.retriable(t, req.ExpectedAttempt); err != nil {
		return RetryResult{}, err
	}
	p, stages, err := c.planStages(ctx, t.PlanID)
	if err != nil {
		return RetryResult{}, err
	}
	if planOK != nil {
		if err := planOK(p); err != nil {
			return RetryResult{}, err
		}
	}
	rs, err := retryPlan(req, p, ck)
	if err != nil {
		return RetryResult{}, err
	}
	names := p.StageNames()
	res := RetryResult{WouldRun: append([]string{}, names[rs.from:]...), DryRun: req.DryRun}
	if req.DryRun {
		return res, nil
	}
	if c.closing.Load() {
		return RetryResult{}, wrapf(ErrShuttingDown, "instance %s is shutting down; retry on another instance", c.cfg.Instance)
	}
	mode := c.retryEvent(&rs, t, req, a, res.WouldRun)
	if c.queuesReruns() && !rs.orphaned {
		queued, ck, err := c.queueRerun(ctx, t, p, stages, rs)
		if err != nil {
			return RetryResult{}, err
		}
		view := c.taskView(queued, ck, c.degradedOf(ctx))
		c.log.Info().Str("task_id", t.ID).Str("tenant_id", t.TenantID).Str("actor", rs.event.Actor).Str("reason", req.Reason).
			Str("mode", mode).Int("from", rs.from).Msg("task retried; queued on the plan's work queue")
		res.Task = &view
		return res, nil
	}
	r, from, err := c.rerun(ctx, t, p, stages, rs, nil)
	if err != nil {
		return RetryResult{}, err
	}
	view := c.taskView(r.t.Clone(), ckptRef(r.ckpt), c.degradedOf(ctx))
	view.Orphaned = false
	c.launch(r, from)
	r.log.Info().Str("actor", rs.event.Actor).Str("reason", req.Reason).Str("mode", mode).Int("from", from).Msg("task retried")
	res.Task = &view
	return res, nil
}

// retryEvent fills in rs the timeline entry and the expectations of a
// retry of t that runs the stages wouldRun, and returns the retry's mode.
func (c *Coordinator) retryEvent(rs *rerunSpec, t *task.Task, req RetryRequest, a Actor, wouldRun []string) string {
	mode := "fromCheckpoint"
	switch {
	case req.FromStage != "":
		mode = "fromStage"
	case req.SkipStage:
		mode = "skipStage"
	case req.FromCheckpoint != nil && !*req.FromCheckpoint:
		mode = "fromStart"
	}
	rs.event = a.event(task.EventRetryRequested, c.now(), req.Reason)
	rs.event.Instance = c.cfg.Instance
	if rs.event.Data == nil {
		rs.event.Data = map[string]any{}
	}
	rs.event.Data["mode"], rs.event.Data["previousStatus"], rs.event.Data["wouldRun"] = mode, string(t.Status), wouldRun
	if req.FromStage != "" {
		rs.event.Data["fromStage"] = req.FromStage
	}
	rs.expectSeq = t.Seq
	rs.mode = task.RetryNew
	rs.orphaned = c.orphaned(t)
	if rs.orphaned {
		rs.event.Data["takeover"] = true
		rs.event.Data["previousOwner"] = t.Owner
	}
	return mode
}

// retriable checks that t may be retried by hand.
func (c *Coordinator) retriable(t *task.Task, expectedAttempt int) error {
	if expectedAttempt != 0 && t.Attempt != expectedAttempt {
		return wrapf(ErrAttemptMismatch, "task %s of tenant %s is at attempt %d, not %d", t.ID, t.TenantID, t.Attempt, expectedAttempt)
	}
	switch {
	case t.Status == task.StatusCompleted:
		return wrapf(ErrTaskCompleted, "task %s of tenant %s is completed: a completed task is not run again; "+
			"to deploy to this tenant again, create a new plan for it (POST /v1/plans with tenants [%s])", t.ID, t.TenantID, t.TenantID)
	case t.Status == task.StatusPending && t.Attempt > 0:
		// Queued again by a retry or a resume (perhaps someone else's, just
		// now): it runs when an instance has room in its plan.
		return wrapf(ErrTaskPending, "task %s of tenant %s is queued to run again (attempt %d, by a retry or resume): "+
			"it starts when an instance has room under plan %s's maxConcurrency; there is nothing to retry", t.ID, t.TenantID, t.Attempt, t.PlanID)
	case t.Status == task.StatusPending:
		return wrapf(ErrTaskPending, "task %s of tenant %s has not started; start or resume plan %s", t.ID, t.TenantID, t.PlanID)
	case t.Status == task.StatusRunning && !c.orphaned(t):
		return wrapf(ErrTaskRunning, "task %s of tenant %s is running on instance %s (heartbeat %s ago)",
			t.ID, t.TenantID, t.Owner, c.now().Sub(t.HeartbeatAt).Round(time.Second))
	}
	return nil
}

// planStages loads a plan and compiles its stages.
func (c *Coordinator) planStages(ctx context.Context, planID string) (*plan.Plan, []stage.Runnable, error) {
	p, _, err := c.store.Plan(ctx, planID)
	if err != nil {
		return nil, nil, translate(err, "plan "+planID)
	}
	stages, err := c.compile(p)
	if err != nil {
		return nil, nil, err
	}
	return p, stages, nil
}

// rerunSpec says how rerun re-enters a task.
type rerunSpec struct {
	mode     task.RetryMode
	orphaned bool
	// expectSeq, when >= 0, is the Seq the task must still have once the
	// lock is held (it was read to decide the retry).
	expectSeq int64
	// from is the stage index to run from; -1 means after the checkpoint.
	from int
	// ckpt, when set, replaces the checkpoint; deleteCkpt removes it.
	ckpt       *checkpoint.Checkpoint
	deleteCkpt bool
	event      task.Event
}

// retryPlan turns a retry request into where to start and what checkpoint
// to write.
func retryPlan(req RetryRequest, p *plan.Plan, ck *checkpoint.Checkpoint) (rerunSpec, error) {
	base := checkpoint.Empty()
	if ck != nil {
		base = *ck
	}
	names := p.StageNames()
	rs := rerunSpec{from: min(base.NextStageIndex(), len(names))}
	switch {
	case req.FromCheckpoint != nil && !*req.FromCheckpoint:
		empty := checkpoint.Empty()
		rs.from, rs.ckpt, rs.deleteCkpt = 0, &empty, true
	case req.FromStage != "":
		idx := p.StageIndex(req.FromStage)
		if idx < 0 {
			return rs, wrapf(ErrInvalid, "plan %s has no stage %s; its stages are %s", p.ID, req.FromStage, strings.Join(names, ", "))
		}
		if idx > base.NextStageIndex() {
			return rs, wrapf(ErrInvalid, "stage %s is not covered by the checkpoint: the next stage to run is %s",
				req.FromStage, names[base.NextStageIndex()])
		}
		next, err := base.TruncateBefore(idx, names)
		if err != nil {
			return rs, wrapf(ErrInvalid, "%v", err)
		}
		rs.from, rs.ckpt = idx, &next
	case req.SkipStage:
		idx := base.NextStageIndex()
		if idx >= len(names) {
			return rs, wrapf(ErrInvalid, "no stage left to skip: every stage is done")
		}
		outputs := req.Outputs
		if outputs == nil {
			outputs = map[string]any{}
		}
		next, err := base.Skip(idx, names[idx], outputs)
		if err != nil {
			return rs, wrapf(ErrInvalid, "%v", err)
		}
		rs.from, rs.ckpt = idx+1, &next
	}
	return rs, nil
}

// stageAt names stage i, "" past the last one.
func stageAt(names []string, i int) string {
	if i >= len(names) {
		return ""
	}
	return names[i]
}

// rerun takes the tenant lock for t, moves the task back to RUNNING (one
// fenced write carrying the new checkpoint and the timeline entry) and
// returns the registered run and the stage index to run from. The caller
// runs it.
func (c *Coordinator) rerun(ctx context.Context, t *task.Task, p *plan.Plan, stages []stage.Runnable, rs rerunSpec, pr *planRun) (*taskRun, int, error) {
	holder := tenantlock.Holder{PlanID: t.PlanID, TaskID: t.ID, Instance: c.cfg.Instance}
	defer c.beginAcquire(t)() // until the run is registered (or not)
	lease, err := c.locks.Acquire(ctx, t.TenantID, holder)
	var stale *tenantlock.LockedError
	if errors.As(err, &stale) && c.freeOwnStaleLock(t, stale) {
		lease, err = c.locks.Acquire(ctx, t.TenantID, holder)
	}
	if err != nil {
		return nil, 0, c.lockRefusal(t, err)
	}
	fail := func(err error) (*taskRun, int, error) {
		c.releaseQuietly(lease)
		return nil, 0, err
	}
	// With the lock held nobody else can start the task: read it again and
	// make sure it is still what the decision was based on.
	fresh, ck, err := c.store.Task(ctx, t.ID)
	if err != nil {
		return fail(translate(err, "task "+t.ID))
	}
	if err := c.checkFresh(t, fresh, rs); err != nil {
		return fail(err)
	}
	if rs.expectSeq < 0 {
		rs.orphaned = fresh.Status == task.StatusRunning && c.orphanedBut(fresh, 1)
	}
	base := checkpoint.Empty()
	if ck != nil {
		base = *ck
	}
	from := rs.from
	if from < 0 {
		from = min(base.NextStageIndex(), len(stages))
	}
	if rs.ckpt != nil {
		base = *rs.ckpt
	}
	prev := fresh.Status
	now := c.now()
	if err := fresh.Rerun(now, c.cfg.Instance, lease.Fence(), from, stageAt(p.StageNames(), from), rs.mode, rs.orphaned); err != nil {
		return fail(translate(err, "task"))
	}
	var write *checkpoint.Checkpoint
	if rs.ckpt != nil && !rs.deleteCkpt {
		stamped := rs.ckpt.Stamp(now, fresh.Attempt, lease.Fence())
		write, base = &stamped, stamped
	}
	r := c.newRun(fresh, p, stages, base, lease, pr)
	if !c.register(r) {
		r.abandon()
		return fail(wrapf(ErrShuttingDown, "instance %s is shutting down", c.cfg.Instance))
	}
	if pr != nil {
		pr.add(r)
	}
	ev := rs.event
	ev.Fence = lease.Fence()
	r.addEvent(ev)
	if rs.mode == task.RetryNew {
		// A new attempt starts here, as a queued one starts where it is
		// claimed: the timeline and the feed say so the same way.
		r.addEvent(task.Event{Type: task.EventStarted, Instance: c.cfg.Instance, Fence: lease.Fence()})
	}
	if err := r.commit(task.Write{PrevStatus: prev, Checkpoint: write, DeleteCheckpoint: rs.deleteCkpt, ClearRequests: true}); err != nil {
		r.finish()
		if errors.Is(err, errStoreRefused) {
			return nil, 0, wrapf(ErrTaskRunning, "task %s of tenant %s was taken by someone else meanwhile", t.ID, t.TenantID)
		}
		return nil, 0, translate(err, "task")
	}
	c.obs.TaskStarted()
	return r, from, nil
}

// ResumeTask resumes the tenant's PAUSED task from its checkpoint on this
// instance, or withdraws a pause request the running instance has not
// honoured yet.
func (c *Coordinator) ResumeTask(ctx context.Context, tenantID, reason string, a Actor) (TaskView, error) {
	if err := checkTenant(tenantID); err != nil {
		return TaskView{}, err
	}
	if err := checkReason(reason); err != nil {
		return TaskView{}, err
	}
	t, _, err := c.store.TaskByTenant(ctx, tenantID)
	if err != nil {
		return TaskView{}, translate(err, "task of tenant "+tenantID)
	}
	ev := a.event(task.EventResumed, c.now(), reason)
	ev.Instance = c.cfg.Instance
	switch t.Status {
	case task.StatusPaused:
	case task.StatusRunning, task.StatusPending:
		if !t.PauseRequested {
			return c.viewOf(ctx, t.ID)
		}
		if r := c.localRun(t.ID); r != nil {
			r.pauseReq.Store(nil)
		}
		if _, err := c.store.RequestTask(ctx, tenantID, t.ID, task.RequestClearPause, ev); err != nil {
			return TaskView{}, translate(err, "task")
		}
		return c.viewOf(ctx, t.ID)
	default:
		return TaskView{}, wrapf(ErrInvalidState, "task %s of tenant %s is %s; only a paused task resumes (retry it instead)", t.ID, tenantID, t.Status)
	}
	if c.closing.Load() {
		return TaskView{}, wrapf(ErrShuttingDown, "instance %s is shutting down; resume on another instance", c.cfg.Instance)
	}
	p, stages, err := c.planStages(ctx, t.PlanID)
	if err != nil {
		return TaskView{}, err
	}
	rs := rerunSpec{mode: task.RetryResume, expectSeq: t.Seq, from: -1, event: ev}
	if c.queuesReruns() {
		queued, ck, err := c.queueRerun(ctx, t, p, stages, rs)
		if err != nil {
			return TaskView{}, err
		}
		return c.taskView(queued, ck, c.degradedOf(ctx)), nil
	}
	r, from, err := c.rerun(ctx, t, p, stages, rs, nil)
	if err != nil {
		return TaskView{}, err
	}
	view := c.taskView(r.t.Clone(), ckptRef(r.ckpt), c.degradedOf(ctx))
	c.launch(r, from)
	return view, nil
}

func (c *Coordinator) localRun(taskID string) *taskRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tasks[taskID]
}

func (c *Coordinator) viewOf(ctx context.Context, taskID string) (TaskView, error) {
	ctx, cancel := c.queryCtx(ctx)
	defer cancel()
	t, ck, err := c.store.Task(ctx, taskID)
	if err != nil {
		return TaskView{}, translate(err, fmt.Sprintf("task %s", taskID))
	}
	return c.taskView(t, ck, c.degradedOf(ctx)), nil
}
