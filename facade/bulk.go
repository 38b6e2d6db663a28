package facade

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
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
	for _, t := range selected {
		if cancelled != nil {
			res.Skipped = append(res.Skipped, RetrySkip{TenantID: t.TenantID, TaskID: t.ID, Err: cancelled})
			continue
		}
		one := RetryRequest{FromCheckpoint: req.FromCheckpoint, FromStage: req.FromStage, Reason: req.Reason,
			DryRun: req.DryRun, ExpectedAttempt: t.Attempt}
		if _, err := c.retryTask(ctx, t.TenantID, t.ID, one, a, planOK); err != nil {
			res.Skipped = append(res.Skipped, RetrySkip{TenantID: t.TenantID, TaskID: t.ID, Err: err})
			continue
		}
		// A retried task reopens a finished plan.
		open = open || !req.DryRun
		res.Retried = append(res.Retried, t.TenantID)
	}
	return res, nil
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

// forEachBounded calls f(0) … f(n-1), at most workers at a time, and
// returns the first error; once one failed no further call starts (those
// in flight finish), as a loop that stops at its first error would.
func forEachBounded(n, workers int, f func(i int) error) error {
	if n == 0 {
		return nil
	}
	var (
		next  atomic.Int64
		once  sync.Once
		first error
		wg    sync.WaitGroup
	)
	failed := atomic.Bool{}
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					failed.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	return first
}
