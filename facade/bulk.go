package facade

import (
	"context"
	"slices"
	"strings"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/internal/parallel"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
)

// MaxBulkTenants caps PlanRetryRequest.Tenants.
const MaxBulkTenants = 10000

// PlanRetryRequest retries many of a plan's tasks in one call (POST
// /v1/plans/{planId}/retry). It selects the tasks whose status is in
// Statuses, or — Orphaned — that are RUNNING without a live owner, narrowed
// to Tenants when given (at most MaxBulkTenants; an empty list is refused,
// so that a list computed empty never means "all"); each selected task is
// retried as RetryRequest would, with the same Reason, from its checkpoint
// (the default), from the start (FromCheckpoint false) or from FromStage.
type PlanRetryRequest struct {
	Statuses       []task.Status `json:"statuses,omitempty"`
	Orphaned       bool          `json:"orphaned,omitempty"`
	Tenants        []string      `json:"tenants,omitempty"`
	FromCheckpoint *bool         `json:"fromCheckpoint,omitempty"`
	FromStage      string        `json:"fromStage,omitempty"`
	Reason         string        `json:"reason"`
	DryRun         bool          `json:"dryRun,omitempty"`
}

// RetrySkip is a selected task a bulk retry did not retry, and why (an
// error matching one of the facade's errors: ErrTaskRunning, ...).
type RetrySkip struct {
	TenantID string
	TaskID   string
	Err      error
}

// PlanRetryResult answers a bulk retry: how many tasks the selection
// matched, the tenants retried (or, for a dry run, that would be) and the
// ones skipped with the reason.
type PlanRetryResult struct {
	PlanID   string
	Selected int
	Retried  []string
	Skipped  []RetrySkip
	// NotSelected are the tenants the request named (Tenants) that the
	// selection did not hold: no task of this plan, or one in another
	// status (or not orphaned). Nothing was done to them.
	NotSelected []string
	DryRun      bool
}

func (r PlanRetryRequest) validate() error {
	if err := checkReason(r.Reason); err != nil {
		return err
	}
	if len(r.Statuses) == 0 && !r.Orphaned {
		return wrapf(ErrInvalid, "select tasks with statuses (e.g. [\"FAILED\"]) and/or orphaned: true")
	}
	for i, s := range r.Statuses {
		switch {
		case slices.Contains(r.Statuses[:i], s):
			return wrapf(ErrInvalid, "status %s is named twice", task.Quote(string(s)))
		case !s.Valid():
			return wrapf(ErrInvalid, "status %s is not a task status", task.Quote(string(s)))
		case s == task.StatusCompleted || s == task.StatusPending || s == task.StatusRunning:
			return wrapf(ErrInvalid, "status %s cannot be retried: choose among FAILED, PAUSED and CANCELLED (orphaned RUNNING tasks: orphaned: true)", s)
		}
	}
	if r.Tenants != nil && len(r.Tenants) == 0 {
		// An empty list computed by a script must not mean "every tenant".
		return wrapf(ErrInvalid, "tenants is an empty list: omit it to select every tenant of the selection, or name at least one")
	}
	if len(r.Tenants) > MaxBulkTenants {
		return wrapf(ErrInvalid, "at most %d tenants, got %d", MaxBulkTenants, len(r.Tenants))
	}
	seen := make(map[string]bool, len(r.Tenants))
	for _, id := range r.Tenants {
		if err := checkTenant(id); err != nil {
			return err
		}
		if seen[id] {
			return wrapf(ErrInvalid, "tenant %s is named twice", id)
		}
		seen[id] = true
	}
	one := RetryRequest{FromCheckpoint: r.FromCheckpoint, FromStage: r.FromStage, Reason: r.Reason}
	return one.validate()
}

// RetryPlan retries the plan's tasks that req selects, each as Retry would
// (audited with req.Reason, refused per task for the same reasons), and
// answers which were retried and which skipped. Each task is retried at
// most once per call and across concurrent calls: the attempt read at
// selection is the expected attempt. A dry run changes nothing. Returns
// ErrInvalid, ErrNotFound, ErrShuttingDown, ErrUnavailable.
func (c *Coordinator) RetryPlan(ctx context.Context, planID string, req PlanRetryRequest, a Actor) (PlanRetryResult, error) {
	if !plan.ValidID(planID) {
		return PlanRetryResult{}, wrapf(ErrInvalid, "plan id %s is not a plan id", task.Quote(planID))
	}
	if err := req.validate(); err != nil {
		return PlanRetryResult{}, err
	}
	p, err := c.loadPlan(ctx, planID)
	if err != nil {
		return PlanRetryResult{}, err
	}
	if req.FromStage != "" && p.StageIndex(req.FromStage) < 0 {
		// The same for every task: refused whole, not skipped task by task.
		return PlanRetryResult{}, wrapf(ErrInvalid, "plan %s has no stage %s; its stages are %s",
			planID, req.FromStage, strings.Join(p.StageNames(), ", "))
	}
	if !req.DryRun && c.closing.Load() {
		return PlanRetryResult{}, wrapf(ErrShuttingDown, "instance %s is shutting down; retry on another instance", c.cfg.Instance)
	}
	selected, err := c.selectForRetry(ctx, planID, req)
	if err != nil {
		return PlanRetryResult{}, err
	}
	res := PlanRetryResult{PlanID: planID, Selected: len(selected), Retried: []string{}, Skipped: []RetrySkip{}, NotSelected: []string{}, DryRun: req.DryRun}
	if len(req.Tenants) > 0 {
		in := make(map[string]bool, len(selected))
		for _, t := range selected {
			in[t.TenantID] = true
		}
		for _, id := range req.Tenants {
			if !in[id] {
				res.NotSelected = append(res.NotSelected, id)
			}
		}
	}
	// A cancel of the plan while this retry goes through its tenants stops
	// it: each tenant's retry reads the plan, and once it reads a cancel
	// newer than the one the plan had when the retry began (CancelledAt,
	// which a retry that reopens the plan keeps) — or reads it CANCELLED
	// after it was open during this retry — the rest are skipped. (A tenant
	// being written at the cancel's very moment may still reopen the plan,
	// and run.)
	var cancelled error
	open := p.Status != plan.StatusCancelled
	planOK := func(cur *plan.Plan) error {
		switch {
		case !cur.CancelledAt.Equal(p.CancelledAt) || (cur.Status == plan.StatusCancelled && open):
			reason := cur.Reason
			if cur.Status != plan.StatusCancelled {
				reason = "then reopened by a tenant written at that moment"
			}
			cancelled = wrapf(ErrPlanFinished, "plan %s was cancelled after this bulk retry began (%s); this tenant and the rest were not retried", planID, task.Quote(reason))
		case cur.Status != plan.StatusCancelled:
			open = true
		}
		return cancelled
	}
	b := &bulkRetry{c: c, p: p, req: req, a: a, res: &res, planOK: planOK, cancelled: &cancelled, open: &open}
	if !req.DryRun && c.queuesReruns() {
		if b.stages, err = c.compile(p); err != nil {
			b.stages = nil // each tenant's retry says so, as before
		}
	}
	for len(selected) > 0 {
		if b.stages == nil || selected[0].Status == task.StatusRunning {
			// A dry run, a take-over of an orphan (it runs here at once),
			// or the plan-owner mode (the retry starts the task here): one
			// tenant at a time.
			b.one(ctx, selected[0])
			selected = selected[1:]
			continue
		}
		n := 1
		for n < len(selected) && n < bulkChunk && selected[n].Status != task.StatusRunning {
			n++
		}
		b.chunk(ctx, selected[:n])
		selected = selected[n:]
	}
	return res, nil
}

// bulkChunk is how many tenants a bulk retry prepares at once (bulkRetry).
const bulkChunk = 256

// bulkRetry is one RetryPlan call going through its selection.
//
// A retry of one tenant made eight round trips one after the other (the
// tenant's task in two, the plan, the lock, the task again under the lock,
// the write, the queue push): 10 000 FAILED tasks took 14.5 s. In shared
// mode a bulk retry now prepares bulkChunk tenants at once — their tasks
// read in one TasksByTenant, their locks taken bulkWorkers at a time (the
// locker sends concurrent acquisitions in shared pipelines), their tasks
// read again under the locks in one more TasksByTenant — then goes through
// them in order: for each, it reads the plan — the check that stops the
// retry once the plan was cancelled during it, as before, between one
// tenant's write and the next — and sends its write; the chunk's tasks are
// then pushed on the plan's queue in one round trip. Each write is the
// same fenced, sequence-checked write as a single retry's, under the
// tenant's lock; a prepared tenant the retry does not write (the plan was
// cancelled) has its lock released.
type bulkRetry struct {
	c         *Coordinator
	p         *plan.Plan
	stages    []stage.Runnable // nil: one tenant at a time
	req       PlanRetryRequest
	a         Actor
	res       *PlanRetryResult
	planOK    func(*plan.Plan) error
	cancelled *error
	open      *bool
}

func (b *bulkRetry) request(t *task.Task) RetryRequest {
	return RetryRequest{FromCheckpoint: b.req.FromCheckpoint, FromStage: b.req.FromStage, Reason: b.req.Reason,
		DryRun: b.req.DryRun, ExpectedAttempt: t.Attempt}
}

func (b *bulkRetry) skip(t *task.Task, err error) {
	b.res.Skipped = append(b.res.Skipped, RetrySkip{TenantID: t.TenantID, TaskID: t.ID, Err: err})
}

func (b *bulkRetry) retried(t *task.Task) {
	// A retried task reopens a finished plan.
	*b.open = *b.open || !b.req.DryRun
	b.res.Retried = append(b.res.Retried, t.TenantID)
}

// one retries t as Retry would, with the plan check.
func (b *bulkRetry) one(ctx context.Context, t *task.Task) {
	if *b.cancelled != nil {
		b.skip(t, *b.cancelled)
		return
	}
	if _, err := b.c.retryTask(ctx, t.TenantID, t.ID, b.request(t), b.a, b.planOK); err != nil {
		b.skip(t, err)
		return
	}
	b.retried(t)
}

// prepared is one tenant of a chunk after its preparation: early is an
// error retryTask finds before it reads the plan (the task is no longer
// the tenant's current one, or not retriable), late one it finds after
// (refused by the lock, changed under it); q is the prepared write, and
// alone a tenant to retry by itself (an orphan to take over: it turned
// RUNNING since the selection).
type prepared struct {
	early, late error
	q           *requeue
	// Between the lock and the read under it: the task as read first,
	// its retry and the lease.
	t     *task.Task
	rs    rerunSpec
	lease Lease
	mode  string
	from  int
	alone bool
}

// prepare is retryTask's part before its plan check for one tenant sel
// of a chunk, up to the tenant lock; t and ck are the tenant's current
// task and checkpoint as read for the whole chunk (err: that read failed).
func (b *bulkRetry) prepare(ctx context.Context, sel, t *task.Task, ck *checkpoint.Checkpoint, err error) (pr prepared) {
	c := b.c
	if err == nil && t == nil {
		err = task.ErrNotFound
	}
	if err != nil {
		pr.early = translate(err, "task of tenant "+sel.TenantID)
		return pr
	}
	if t.ID != sel.ID {
		pr.early = wrapf(ErrInvalidState, "task %s is no longer the current task of tenant %s: task %s of plan %s is; retry that one instead",
			sel.ID, sel.TenantID, t.ID, t.PlanID)
		return pr
	}
	req := b.request(sel)
	if pr.early = c.retriable(t, req.ExpectedAttempt); pr.early != nil {
		return pr
	}
	rs, err := retryPlan(req, b.p, ck)
	if err != nil {
		pr.late = err
		return pr
	}
	if c.closing.Load() {
		pr.late = wrapf(ErrShuttingDown, "instance %s is shutting down; retry on another instance", c.cfg.Instance)
		return pr
	}
	names := b.p.StageNames()
	pr.mode = c.retryEvent(&rs, t, req, b.a, append([]string{}, names[rs.from:]...))
	if rs.orphaned {
		pr.alone = true
		return pr
	}
	pr.from = rs.from
	pr.t, pr.rs = t, rs
	pr.lease, pr.late = c.lockFor(ctx, t)
	return pr
}

// chunk retries ts (none RUNNING when selected): prepared all at once,
// then checked against the plan and written one by one, in order.
func (b *bulkRetry) chunk(ctx context.Context, ts []*task.Task) {
	c := b.c
	preps := make([]prepared, len(ts))
	defer func() {
		if p := recover(); p != nil {
			// A panic (one of the preparations', raised again by
			// parallel.ForEach) must not leave the prepared tenants locked
			// for a lease: release every lease taken (those written or
			// released already answer "not held", logged).
			for _, pr := range preps {
				if pr.lease != nil {
					c.releaseQuietly(pr.lease)
				}
				if pr.q != nil {
					c.releaseQuietly(pr.q.lease)
				}
			}
			panic(p)
		}
	}()
	if *b.cancelled == nil {
		// The tenants' current tasks in two round trips (bulkChunk is
		// within repository.TenantBatchMax), then the locks, bulkWorkers
		// at a time.
		ids := make([]string, len(ts))
		for i, t := range ts {
			ids[i] = t.TenantID
		}
		cur, cks, err := c.store.TasksByTenant(ctx, ids)
		_ = parallel.ForEach(len(ts), bulkWorkers, func(i int) error {
			// With a deadline, the locker may send the acquisitions in
			// shared pipelines (it sends a call without one on its own).
			pctx, cancel := context.WithTimeout(ctx, c.cfg.WriteTimeout)
			defer cancel()
			preps[i] = b.prepare(pctx, ts[i], cur[ids[i]], cks[ids[i]], err)
			return nil
		})
		// The locked tasks read again under their locks, in two round
		// trips: still what the retry was decided on?
		ids = ids[:0]
		for _, pr := range preps {
			if pr.lease != nil {
				ids = append(ids, pr.t.TenantID)
			}
		}
		if len(ids) > 0 {
			fresh, cks, err := c.store.TasksByTenant(ctx, ids)
			for i := range preps {
				pr := &preps[i]
				if pr.lease == nil {
					continue
				}
				f := fresh[pr.t.TenantID]
				switch {
				case err != nil:
					pr.late = translate(err, "task "+pr.t.ID)
				case f == nil || f.ID != pr.t.ID:
					// Another task became the tenant's current one.
					pr.late = wrapf(ErrInvalidState, "task %s is no longer the current task of tenant %s; read it again", pr.t.ID, pr.t.TenantID)
				}
				if pr.late != nil {
					c.releaseQuietly(pr.lease)
				} else {
					pr.q, pr.late = c.requeueLocked(pr.t, f, cks[pr.t.TenantID], pr.lease, b.p, b.stages, pr.rs)
				}
				pr.lease = nil
			}
		}
	}
	var (
		items  []planItem
		latest *plan.Plan
		unused []Lease
	)
	for i, t := range ts {
		pr := preps[i]
		switch {
		case *b.cancelled != nil:
			if pr.q != nil {
				unused = append(unused, pr.q.lease)
			}
			b.skip(t, *b.cancelled)
			continue
		case pr.early != nil:
			b.skip(t, pr.early)
			continue
		case pr.alone:
			b.one(ctx, t)
			continue
		}
		// The plan as it is now, after the previous tenant's write: a
		// cancel since the retry began stops it here.
		cur, _, err := c.store.Plan(ctx, b.p.ID)
		if err == nil {
			err = b.planOK(cur)
		} else {
			err = translate(err, "plan "+b.p.ID)
		}
		if err == nil {
			err = pr.late
		}
		if err == nil {
			err = c.commitRequeue(ctx, pr.q, cur)
		} else if pr.q != nil {
			unused = append(unused, pr.q.lease)
		}
		if err != nil {
			b.skip(t, err)
			continue
		}
		latest = cur
		items = append(items, planItem{t: pr.q.fresh, mode: itemStart})
		c.log.Info().Str("task_id", t.ID).Str("tenant_id", t.TenantID).Str("actor", pr.q.w.Events[0].Actor).Str("reason", b.req.Reason).
			Str("mode", pr.mode).Int("from", pr.from).Msg("task retried; queued on the plan's work queue")
		b.retried(t)
	}
	_ = parallel.ForEach(len(unused), bulkWorkers, func(i int) error {
		c.releaseQuietly(unused[i])
		return nil
	})
	if len(items) == 0 {
		return
	}
	if err := c.queueWork(ctx, latest, b.stages, items); err != nil {
		// The tasks are PENDING and not queued: the plan's repair (resume,
		// or the counts repair) queues them again.
		c.log.Error().Err(err).Int("tasks", len(items)).Str("plan_id", b.p.ID).Msg("tasks queued again as PENDING but could not be pushed on the plan's queue; resume the plan to queue them")
	}
}

// selectForRetry lists the plan's tasks a bulk retry selects.
func (c *Coordinator) selectForRetry(ctx context.Context, planID string, req PlanRetryRequest) ([]*task.Task, error) {
	var tenants map[string]bool
	if len(req.Tenants) > 0 {
		tenants = make(map[string]bool, len(req.Tenants))
		for _, id := range req.Tenants {
			tenants[id] = true
		}
	}
	statuses := slices.Clone(req.Statuses)
	if req.Orphaned && !slices.Contains(statuses, task.StatusRunning) {
		statuses = append(statuses, task.StatusRunning)
	}
	var out []*task.Task
	for _, s := range statuses {
		f := plan.TaskFilter{Status: s, Limit: plan.LimitMax}
		for {
			ts, next, err := c.store.PlanTasks(ctx, planID, f)
			if err != nil {
				return nil, translate(err, "plan "+planID)
			}
			for _, t := range ts {
				if tenants != nil && !tenants[t.TenantID] {
					continue
				}
				if s == task.StatusRunning && !c.orphaned(t) {
					continue
				}
				out = append(out, t)
			}
			if next == "" {
				break
			}
			f.Cursor = next
		}
	}
	return out, nil
}

// bulkWorkers is how many tasks a bulk action (a plan's cancel, the
// preparation of a bulk retry) works on at once. The store and the tenant
// locks group concurrent calls into shared pipelines (repository's group
// commit, redislock's batcher), so k calls in flight cost about one round
// trip instead of k; 64 keeps the pipelines large without flooding Redis
// while the plan's own tasks run beside them.
const bulkWorkers = 64
