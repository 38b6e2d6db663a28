package facade

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// Reasons recorded when a task stops between stages.
const (
	ReasonShutdown   = "instance shutdown"
	ReasonPlanPaused = "plan paused"
)

// errInterrupted marks a stage attempt cut short by the instance (shutdown
// after the grace period, lost lease), not by the stage itself.
var errInterrupted = errors.New("facade: stage interrupted")

// taskRun is one run of one task on this instance, from the moment it holds
// the tenant lease to its last write. Only the run's goroutine touches t,
// ckpt and events; other goroutines talk to it through the atomic requests.
type taskRun struct {
	c      *Coordinator
	t      *task.Task
	p      *plan.Plan
	stages []stage.Runnable
	ckpt   checkpoint.Checkpoint
	lease  *tenantlock.Lease
	log    zerolog.Logger
	// pr is the plan run this task belongs to on this instance (nil for a
	// manual retry or resume).
	pr *planRun

	ctx    context.Context
	cancel context.CancelCauseFunc

	pauseReq  atomic.Pointer[string]
	cancelReq atomic.Pointer[string]

	events   []task.Event
	released bool
}

func (c *Coordinator) newRun(t *task.Task, p *plan.Plan, stages []stage.Runnable, ck checkpoint.Checkpoint, lease *tenantlock.Lease, pr *planRun) *taskRun {
	r := &taskRun{c: c, t: t, p: p, stages: stages, ckpt: ck, lease: lease, pr: pr}
	r.log = c.log.With().Str("component", "runner").Str("plan_id", t.PlanID).Str("task_id", t.ID).
		Str("tenant_id", t.TenantID).Int("attempt", t.Attempt).Int64("fence", lease.Fence()).Logger()
	r.ctx, r.cancel = context.WithCancelCause(c.hardStop)
	return r
}

// register makes the run visible to requests on this instance; it returns
// false when the instance is shutting down.
func (c *Coordinator) register(r *taskRun) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing.Load() {
		return false
	}
	c.tasks[r.t.ID] = r
	c.runs.Add(1)
	return true
}

// launch runs r from stage index from in a new goroutine.
func (c *Coordinator) launch(r *taskRun, from int) {
	go r.run(from)
}

// run executes the stages from index from, then leaves the task COMPLETED,
// FAILED, PAUSED or CANCELLED with its lease released — or, when the lease
// is lost, stops without writing (the task then shows as orphaned).
func (r *taskRun) run(from int) {
	defer r.finish()
	stopBeat := r.heartbeat()
	defer stopBeat()

	for i := from; i < len(r.stages); i++ {
		if r.boundary() {
			return
		}
		spec := r.p.Stages[i]
		r.t.EnterStage(i, spec.Name, r.c.now())
		r.addEvent(task.Event{Type: task.EventStageStarted}.AtStage(i, spec.Name))
		res, err := r.runStage(i)
		if err != nil {
			r.interrupted(err)
			return
		}
		now := r.c.now()
		var next checkpoint.Checkpoint
		switch res.Outcome {
		case task.OutcomeFailure:
			r.finalWrite(task.StatusFailed, res.Reason, nil)
			return
		case task.OutcomeSkip:
			next, err = r.ckpt.Skip(i, spec.Name, res.Outputs)
			r.addEvent(task.Event{Type: task.EventStageSkipped, Reason: res.Reason}.AtStage(i, spec.Name))
		default:
			next, err = r.ckpt.Complete(i, spec.Name, res.Outputs)
			r.addEvent(task.Event{Type: task.EventStageSucceeded}.AtStage(i, spec.Name))
		}
		if err != nil { // a bug: stages run in order
			r.finalWrite(task.StatusFailed, "internal error: "+err.Error(), nil)
			return
		}
		next = next.Stamp(now, r.t.Attempt, r.lease.Fence())
		if i == len(r.stages)-1 {
			r.finalWrite(task.StatusCompleted, "", &next)
			return
		}
		r.t.EnterStage(i+1, r.p.Stages[i+1].Name, now)
		prev := r.ckpt
		r.ckpt = next
		if err := r.write(task.StatusRunning, &next, false); err != nil {
			// seed §11.1: a checkpoint that cannot be written fails the task.
			r.ckpt = prev
			r.writeFailed(err, "checkpoint write failed")
			return
		}
	}
	// Every stage was already done (a skip of the last stage).
	if !r.boundary() {
		r.finalWrite(task.StatusCompleted, "", nil)
	}
}

// boundary is called between two stages. It honours lease loss, cancel and
// pause requests and the instance's shutdown; it returns true when the run
// must stop.
func (r *taskRun) boundary() bool {
	if err := r.lease.Check(r.margin()); err != nil {
		r.leaseLost(err)
		return true
	}
	if cause := context.Cause(r.ctx); cause != nil {
		r.interrupted(cause)
		return true
	}
	if reason := r.cancelReq.Load(); reason != nil || r.t.CancelRequested {
		why := "cancel requested"
		if reason != nil {
			why = *reason
		}
		r.finalWrite(task.StatusCancelled, why, nil)
		return true
	}
	if reason := r.pauseReq.Load(); reason != nil || r.t.PauseRequested {
		why := "pause requested"
		if reason != nil {
			why = *reason
		}
		r.finalWrite(task.StatusPaused, why, nil)
		return true
	}
	if r.c.closing.Load() {
		r.finalWrite(task.StatusPaused, ReasonShutdown, nil)
		return true
	}
	return false
}

// margin is how much lease must be left before a stage starts.
func (r *taskRun) margin() time.Duration { return min(r.c.cfg.Lease/6, 5*time.Second) }

// runStage runs stage i with its timeout and retry policy. It returns the
// final result, or errInterrupted (wrapped) when the instance cut it short.
func (r *taskRun) runStage(i int) (task.Result, error) {
	spec := r.p.Stages[i]
	policy := spec.Retry
	for n := 1; ; n++ {
		if err := r.lease.Check(r.margin()); err != nil {
			return task.Result{}, err
		}
		in := stage.Input{
			TenantID: r.t.TenantID, PlanID: r.t.PlanID, TaskID: r.t.ID, Stage: spec.Name, StageIndex: i,
			Attempt: r.t.Attempt, StageAttempt: n, Params: r.t.Params, Outputs: r.ckpt.ContextData,
		}
		start := r.c.now()
		sctx, cancel := context.WithTimeout(r.ctx, spec.TimeoutOrDefault())
		res := safeRun(sctx, r.stages[i], in)
		cancel()
		took := task.Duration(r.c.now().Sub(start))
		if res.Outcome != task.OutcomeFailure {
			return res, nil
		}
		if cause := context.Cause(r.ctx); cause != nil {
			return task.Result{}, fmt.Errorf("%w: %w", errInterrupted, cause)
		}
		ev := task.Event{StageAttempt: n, Reason: res.Reason, Duration: took}.AtStage(i, spec.Name)
		if !res.Retryable || n >= policy.Attempts() {
			ev.Type = task.EventStageFailed
			r.addEvent(ev)
			reason := fmt.Sprintf("stage %s: %s", spec.Name, res.Reason)
			if n > 1 {
				reason += fmt.Sprintf(" (after %d attempts)", n)
			}
			return task.Failure(reason, false), nil
		}
		delay := policy.Delay(n, r.c.cfg.Rand())
		ev.Type, ev.Delay = task.EventStageRetrying, task.Duration(delay)
		r.addEvent(ev)
		r.t.LastError = fmt.Sprintf("stage %s attempt %d: %s", spec.Name, n, res.Reason)
		r.t.Beat(r.c.now())
		// Record the retry now: an SRE watching sees it during the delay,
		// and a crash during the delay does not lose it.
		if err := r.write(task.StatusRunning, nil, false); err != nil {
			return task.Result{}, fmt.Errorf("record retry: %w", err)
		}
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
		case <-r.ctx.Done():
			timer.Stop()
			return task.Result{}, fmt.Errorf("%w: %w", errInterrupted, context.Cause(r.ctx))
		case <-r.lease.Lost():
			timer.Stop()
			return task.Result{}, r.lease.Err()
		}
	}
}

// safeRun runs one stage attempt, turning a panic into a failure.
func safeRun(ctx context.Context, s stage.Runnable, in stage.Input) (res task.Result) {
	defer func() {
		if p := recover(); p != nil {
			res = task.Failure(fmt.Sprintf("stage panicked: %v\n%s", p, debug.Stack()), false)
		}
	}()
	return s.Run(ctx, in)
}

// interrupted handles a run stopped by something other than its stages:
// a lost lease, a refused or failed write, or the instance's shutdown.
func (r *taskRun) interrupted(err error) {
	switch {
	case errors.Is(err, tenantlock.ErrLeaseLost) || r.lease.Check(0) != nil:
		r.leaseLost(err)
	case errors.Is(err, errStoreRefused):
		// Logged by write; the task is not ours any more.
	case r.c.closing.Load():
		// Shutdown after the grace period: the stage runs again on resume.
		r.finalWrite(task.StatusPaused, ReasonShutdown, nil)
	default:
		r.writeFailed(err, "storage write failed")
	}
}

// leaseLost stops the run without writing: another instance may own the
// tenant now, and the fenced writes would be refused anyway.
func (r *taskRun) leaseLost(err error) {
	r.released = true // nothing of ours left to release
	r.log.Error().Err(err).Int("stage_index", r.t.StageIndex).Msg("lease lost; task stopped without writing")
}

// errStoreRefused marks a write the store refused: the task is no longer ours.
var errStoreRefused = errors.New("facade: write refused")

func (r *taskRun) addEvent(ev task.Event) {
	if ev.At.IsZero() {
		ev.At = r.c.now().UTC()
	}
	ev.Attempt = r.t.Attempt
	r.events = append(r.events, ev)
}

func (r *taskRun) guard() task.Guard {
	return task.Guard{LockValue: r.lease.Value(), Fence: r.lease.Fence()}
}

// write stores the task record (status prev → r.t.Status), the checkpoint
// if given and the pending timeline entries, in one round trip.
func (r *taskRun) write(prev task.Status, ck *checkpoint.Checkpoint, release bool) error {
	return r.commit(task.Write{PrevStatus: prev, Checkpoint: ck, ReleaseLock: release})
}

// commit completes w with the run's task, guard and pending events and
// applies it.
func (r *taskRun) commit(w task.Write) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.c.cfg.WriteTimeout)
	defer cancel()
	w.Task, w.ExpectSeq, w.Guard, w.Events = r.t, r.t.Seq, r.guard(), r.events
	res, err := r.c.store.WriteTask(ctx, w)
	if err != nil {
		var refused *task.RefusedError
		if errors.As(err, &refused) {
			r.log.Error().Err(err).Str("refusal", string(refused.Reason)).Msg("fenced write refused; task stopped on this instance")
			r.released = true // the lock is not ours (or gone); never delete it
			return fmt.Errorf("%w: %w", errStoreRefused, err)
		}
		return err
	}
	r.t.Seq = res.Seq
	r.t.PauseRequested, r.t.CancelRequested = res.PauseRequested, res.CancelRequested
	r.events = nil
	if w.ReleaseLock {
		r.released = true
		r.lease.Forget()
	}
	if r.pr != nil && res.PlanStatus != "" {
		r.pr.observe(plan.Status(res.PlanStatus))
	}
	return nil
}

// finalWrite moves the task to a final or paused status and releases the
// lease in the same atomic write.
func (r *taskRun) finalWrite(to task.Status, reason string, ck *checkpoint.Checkpoint) {
	now := r.c.now()
	prev := r.t.Status
	var err error
	var ev task.Event
	switch to {
	case task.StatusCompleted:
		err = r.t.Complete(now)
		ev = task.Event{Type: task.EventCompleted}
	case task.StatusFailed:
		err = r.t.Fail(now, reason)
		ev = task.Event{Type: task.EventFailed, Reason: reason}
	case task.StatusPaused:
		err = r.t.Pause(now, reason)
		ev = task.Event{Type: task.EventPaused, Reason: reason}
	case task.StatusCancelled:
		err = r.t.Cancel(now, reason)
		ev = task.Event{Type: task.EventCancelled, Reason: reason}
	}
	if err != nil {
		r.log.Error().Err(err).Msg("illegal final transition")
		return
	}
	ev.Instance = r.c.cfg.Instance
	r.addEvent(ev)
	if err := r.write(prev, ck, true); err != nil {
		if !errors.Is(err, errStoreRefused) {
			r.log.Error().Err(err).Str("status", string(to)).Msg("final write failed; task left RUNNING in storage, will show orphaned")
		}
		return
	}
	lvl := r.log.Info()
	if to == task.StatusFailed {
		lvl = r.log.Warn()
	}
	lvl.Str("status", string(to)).Str("reason", reason).Msg("task finished")
}

// writeFailed fails the task after a write error (seed §11.1).
func (r *taskRun) writeFailed(err error, what string) {
	if errors.Is(err, errStoreRefused) {
		return
	}
	r.log.Error().Err(err).Msg(what)
	r.finalWrite(task.StatusFailed, what+": "+err.Error(), nil)
}

// finish releases what the run still holds and unregisters it.
func (r *taskRun) finish() {
	if !r.released {
		ctx, cancel := context.WithTimeout(context.Background(), r.c.cfg.WriteTimeout)
		if err := r.lease.Release(ctx); err != nil {
			r.log.Warn().Err(err).Msg("release tenant lock")
		}
		cancel()
	} else {
		r.lease.Forget()
	}
	r.cancel(nil)
	r.c.mu.Lock()
	delete(r.c.tasks, r.t.ID)
	r.c.mu.Unlock()
	if r.pr != nil {
		r.pr.taskDone(r.t.ID)
	}
	r.c.runs.Done()
}

// heartbeat refreshes the task's heartbeat every lease/3 while it runs, and
// cancels the run when the lease is lost or the store refuses the beat.
func (r *taskRun) heartbeat() (stop func()) {
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(max(r.c.cfg.Lease/3, 10*time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-r.lease.Lost():
				r.cancel(r.lease.Err())
				return
			case <-tick.C:
				ctx, cancel := context.WithTimeout(context.Background(), max(r.c.cfg.Lease/3, time.Second))
				err := r.c.store.Beat(ctx, r.t.TenantID, r.t.ID, r.guard(), r.c.now())
				cancel()
				if errors.Is(err, task.ErrWriteRefused) {
					r.log.Error().Err(err).Msg("heartbeat refused: another instance owns the task")
					r.cancel(fmt.Errorf("%w: heartbeat refused: %w", tenantlock.ErrLeaseLost, err))
					return
				}
				if err != nil {
					r.log.Warn().Err(err).Msg("heartbeat failed")
				}
			}
		}
	}()
	return func() { close(done) }
}

// requestPause asks a run on this instance to pause at the next boundary.
func (r *taskRun) requestPause(reason string) { r.pauseReq.Store(&reason) }

// requestCancel asks a run on this instance to cancel at the next boundary.
func (r *taskRun) requestCancel(reason string) { r.cancelReq.Store(&reason) }
