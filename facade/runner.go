package facade

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
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
// ckpt, events, lease and ctx; other goroutines talk to it through the atomic
// requests.
type taskRun struct {
	c      *Coordinator
	t      *task.Task
	p      *plan.Plan
	stages []stage.Runnable
	ckpt   checkpoint.Checkpoint
	log    zerolog.Logger
	// pr is the plan run this task belongs to on this instance (nil for a
	// manual retry or resume).
	pr *planRun

	// runCtx lives as long as the run; stopRun cancels it when the
	// instance stops hard (shutdown past its grace period).
	runCtx  context.Context
	stopRun context.CancelFunc
	// lease is the tenant lease held now; it is replaced when a lapsed lease
	// is re-acquired (same value and fence). ctx (a child of runCtx) is
	// cancelled when that lease is lost; stopBeat stops its heartbeat.
	lease    Lease
	ctx      context.Context
	cancel   context.CancelCauseFunc
	stopBeat func()

	pauseReq  atomic.Pointer[string]
	cancelReq atomic.Pointer[string]

	events   []task.Event
	released bool
	// rolledBack is set when a write was refused because the stored task is
	// PENDING again: its start was lost (a failover rolled the record back).
	// A shared plan run queues the task again.
	rolledBack bool

	// mark is the stage being run and when it started, for LongStages
	// (read by other goroutines: t belongs to the run's goroutine).
	mark atomic.Pointer[stageMark]
}

func (c *Coordinator) newRun(t *task.Task, p *plan.Plan, stages []stage.Runnable, ck checkpoint.Checkpoint, lease Lease, pr *planRun) *taskRun {
	r := &taskRun{c: c, t: t, p: p, stages: stages, ckpt: ck, pr: pr}
	// Not a child of the coordinator's hard-stop context: thousands of runs
	// registering with one parent contend on its lock. Shutdown cancels
	// each run's context itself.
	r.runCtx, r.stopRun = context.WithCancel(context.Background())
	r.log = c.log.With().Str("component", "runner").Str("plan_id", t.PlanID).Str("task_id", t.ID).
		Str("tenant_id", t.TenantID).Int("attempt", t.Attempt).Int64("fence", lease.Fence()).Logger()
	r.hold(lease)
	return r
}

// hold makes lease the run's lease, with a fresh context and heartbeat.
func (r *taskRun) hold(lease Lease) {
	if r.stopBeat != nil {
		r.stopBeat()
	}
	if r.cancel != nil {
		r.cancel(nil)
	}
	r.lease = lease
	r.ctx, r.cancel = context.WithCancelCause(r.runCtx)
	r.stopBeat = r.heartbeat(lease, r.cancel)
}

// abandon undoes newRun for a run that was never registered: its heartbeat
// and contexts stop (the caller releases the lease).
func (r *taskRun) abandon() {
	r.stopBeat()
	r.cancel(nil)
	r.stopRun()
}

// register makes the run visible to requests on this instance; it returns
// false when the instance is shutting down.
func (c *Coordinator) register(r *taskRun) bool {
	if !c.reserveRun() {
		return false
	}
	c.track(r)
	return true
}

// track makes a run counted by reserveRun visible to requests on this
// instance.
func (c *Coordinator) track(r *taskRun) {
	c.mu.Lock()
	c.tasks[r.t.ID] = r
	c.mu.Unlock()
}

// launch runs r from stage index from in a new goroutine.
func (c *Coordinator) launch(r *taskRun, from int) {
	go r.run(from)
}

// run executes the stages from index from, then leaves the task COMPLETED,
// FAILED, PAUSED or CANCELLED with its lease released — or, when the lease
// is lost to someone else, stops without writing (the task then shows as
// orphaned until the new owner writes it).
func (r *taskRun) run(from int) {
	defer r.finish()
	for i := from; i < len(r.stages); i++ {
		if !r.boundary() {
			return
		}
		spec := r.p.Stages[i]
		r.t.EnterStage(i, spec.Name, r.c.now())
		r.mark.Store(&stageMark{started: r.t.StageStartedAt, timeout: spec.TimeoutOrDefault()})
		r.addEvent(task.Event{Type: task.EventStageStarted}.AtStage(i, spec.Name))
		res, err := r.runStage(i)
		if err != nil {
			if r.recover(err) {
				i-- // the lease is ours again: run the cut-short stage again
				continue
			}
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
			// The record names the stage whose checkpoint failed, not the
			// next one, which never started.
			r.ckpt = prev
			r.t.StageIndex, r.t.StageName = i, spec.Name
			r.writeFailed(err, "checkpoint write failed")
			return
		}
	}
	// Every stage was already done (a skip of the last stage).
	if r.boundary() {
		r.finalWrite(task.StatusCompleted, "", nil)
	}
}

// boundary is called before every stage. It waits while Redis was just
// restarted, makes sure the lease is confirmed, and honours cancel and
// pause requests and the instance's shutdown. It returns false when the run
// must stop.
func (r *taskRun) boundary() bool {
	r.c.waitSuspect()
	if err := r.lease.Check(r.margin()); err != nil {
		if !r.recover(fmt.Errorf("%w: %w", errInterrupted, err)) {
			return false
		}
	}
	if cause := context.Cause(r.ctx); cause != nil {
		return r.recover(fmt.Errorf("%w: %w", errInterrupted, cause))
	}
	if reason := r.cancelReq.Load(); reason != nil || r.t.CancelRequested {
		why := r.requestReason(reason, task.EventCancelRequested, "cancel requested")
		r.finalWrite(task.StatusCancelled, why, nil)
		return false
	}
	if reason := r.pauseReq.Load(); reason != nil || r.t.PauseRequested {
		if reason != nil && *reason == ReasonPlanPaused && r.t.PauseRequested {
			// A person asked too, on another instance (the stored request):
			// theirs wins, as above.
			reason = nil
		}
		why := r.requestReason(reason, task.EventPauseRequested, "pause requested")
		r.finalWrite(task.StatusPaused, why, nil)
		return false
	}
	if r.c.closing.Load() {
		r.finalWrite(task.StatusPaused, ReasonShutdown, nil)
		return false
	}
	return true
}

// requestReason is the reason of a pause or cancel request: the one given
// on this instance, else the one in the newest timeline entry of type typ
// (a request made on another instance), else fallback.
func (r *taskRun) requestReason(local *string, typ task.EventType, fallback string) string {
	if local != nil {
		return *local
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.c.cfg.WriteTimeout)
	defer cancel()
	evs, err := r.c.store.Timeline(ctx, r.t.TenantID, r.t.ID, 20)
	if err != nil {
		return fallback
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == typ && evs[i].Reason != "" {
			return evs[i].Reason
		}
	}
	return fallback
}

// margin is how much lease must be left before a stage starts: a sixth of
// the lease (measured on the lease itself, so a locker configured with
// another lease than Config.Lease still works), at most 5s.
func (r *taskRun) margin() time.Duration {
	lease := r.lease.Deadline().Sub(r.lease.Confirmed())
	if lease <= 0 {
		lease = r.c.cfg.Lease
	}
	return min(lease/6, 5*time.Second)
}

// runStage runs stage i with its timeout and retry policy. It returns the
// final result, or an error matching errInterrupted when the instance cut
// it short (lease lost or unconfirmed, shutdown), or a storage error.
func (r *taskRun) runStage(i int) (task.Result, error) {
	spec := r.p.Stages[i]
	policy := spec.Retry
	for n := 1; ; n++ {
		if err := r.lease.Check(r.margin()); err != nil {
			return task.Result{}, fmt.Errorf("%w: %w", errInterrupted, err)
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
		r.c.obs.StageAttempt(spec.Kind, res.Outcome, took.D())
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
		r.c.obs.StageRetry(spec.Kind)
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

// recover decides what to do after the run was cut short. It returns true
// when the run holds a confirmed lease again and may go on (re-running the
// interrupted stage); otherwise it has left the task as it should be.
func (r *taskRun) recover(err error) bool {
	switch {
	case errors.Is(err, errStoreRefused):
		return false // logged by commit; the task is not ours any more
	case r.lease.Refused() || errors.Is(err, tenantlock.ErrLeaseRefused):
		r.leaseLost(err)
		return false
	case r.c.closing.Load() && r.lease.Check(0) == nil:
		// Shutdown after the grace period: the stage runs again on resume.
		r.finalWrite(task.StatusPaused, ReasonShutdown, nil)
		return false
	case errors.Is(err, errInterrupted) || r.lease.Check(0) != nil:
		return r.regain()
	default:
		r.writeFailed(err, "storage write failed")
		return false
	}
}

// regain waits, with no stage running, until the lease is confirmed again:
// the renewer gets through, or — once the lease lapsed — it is re-acquired
// with the same value and fence if nobody took the tenant meanwhile
// (docs/architecture.md, Redis unreachable). It returns false when the tenant was taken
// or the instance stops.
func (r *taskRun) regain() bool {
	r.log.Warn().Err(r.lease.Err()).Time("deadline", r.lease.Deadline()).Msg("lease not confirmed; no stage starts until it is")
	delay := 50 * time.Millisecond
	for {
		if r.c.closing.Load() || r.c.hardStop.Err() != nil {
			r.leaseLost(errStopping)
			return false
		}
		if r.lease.Check(r.margin()) == nil && context.Cause(r.ctx) == nil {
			return true
		}
		if r.lease.Refused() {
			r.leaseLost(r.lease.Err())
			return false
		}
		if r.lease.Check(0) != nil || context.Cause(r.ctx) != nil {
			if ok, stop := r.retake(); ok {
				return true
			} else if stop != nil {
				return false
			}
		}
		if !r.c.sleep(delay) {
			continue
		}
		delay = min(delay*2, time.Second)
	}
}

// leaseLost stops the run without writing: another instance may own the
// tenant now, and the fenced writes would be refused anyway.
func (r *taskRun) leaseLost(err error) {
	r.c.obs.LeaseLost()
	r.c.forget(r.t.ID, r.lease.Fence())
	r.released = true // nothing of ours left to release
	r.log.Error().Err(err).Int("stage_index", r.t.StageIndex).Msg("lease lost; task stopped without writing")
	r.c.publishTask(r.t, task.Event{At: r.c.now().UTC(), Type: task.EventLeaseLost, Reason: leaseLostReason(err), Instance: r.c.cfg.Instance, Fence: r.lease.Fence()})
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

func (r *taskRun) guard() task.Guard { return guardOf(r.lease) }

func guardOf(l Lease) task.Guard {
	if l.Local() {
		// In-process (single-instance) leases have no lock key in Redis; the
		// fence and the sequence check still apply.
		return task.Guard{Fence: l.Fence()}
	}
	return task.Guard{LockValue: l.Value(), Fence: l.Fence()}
}

// write stores the task record (status prev → r.t.Status), the checkpoint
// if given and the pending timeline entries, in one round trip.
func (r *taskRun) write(prev task.Status, ck *checkpoint.Checkpoint, release bool) error {
	return r.commit(task.Write{PrevStatus: prev, Checkpoint: ck, ReleaseLock: release})
}

// commit completes w with the run's task, guard and pending events and
// applies it. While Redis is unreachable the write waits here — the
// double-writing store shows it from memory meanwhile — and goes through
// the fenced script when Redis is back, re-acquiring a lapsed lease first
// if nobody took the tenant. A refused write stops the run. Every attempt
// carries the same write id: an attempt whose answer was lost but which
// landed is answered as written when sent again, with the stored result.
func (r *taskRun) commit(w task.Write) error {
	w.Task, w.ExpectSeq, w.Events, w.ID = r.t, r.t.Seq, r.events, task.NewWriteID()
	delay := 50 * time.Millisecond
	waiting := false
	for {
		w.Guard, w.Events = r.guard(), r.events // a retake adds its event
		ctx, cancel := context.WithTimeout(context.Background(), r.c.cfg.WriteTimeout)
		res, err := r.c.writeTask(ctx, w)
		cancel()
		if err != nil && res.Seq > 0 && !IsUnavailable(err) {
			// Written; only the plan counts' move failed (see
			// Store.WriteTask). Taken for a write that did not land, a start
			// was queued again and dropped as running (the task RUNNING
			// with no run), a stage boundary stopped a run whose record
			// says it goes on. (A move Redis could not take is sent again
			// below with the write, whose id answers it as written: the
			// move then applies.)
			r.log.Error().Err(err).Msg("task written, but its plan's counts did not move; they lag until its next status change " +
				"(a task that ended has none: repair the plan's counts)")
			err = nil
		}
		if err == nil {
			if waiting {
				r.log.Info().Msg("redis is back; waiting write stored")
			}
			r.applied(w, res)
			return nil
		}
		var refused *task.RefusedError
		if errors.As(err, &refused) {
			if r.ownsRecord(w, refused) && refused.Reason == task.RefusedLock {
				// Our lock key lapsed (Redis was slow or away) but the record
				// is still ours: take the lease back if nobody took the tenant.
				ok, stop := r.retake()
				if stop != nil {
					return stop
				}
				if !ok && r.c.hardStop.Err() == nil {
					// Redis could not tell whether the tenant was taken:
					// ask again, as after an unreachable write.
					r.c.sleep(delay)
					delay = min(delay*2, time.Second)
				}
				if ok || r.c.hardStop.Err() == nil {
					continue
				}
			}
			r.rolledBack = refused.Status == task.StatusPending && w.PrevStatus != task.StatusPending
			r.c.obs.WriteRefused(refused.Reason)
			r.log.Error().Err(err).Str("refusal", string(refused.Reason)).Msg("fenced write refused; task stopped on this instance")
			// The timeline cannot take it (the write was refused): the feed does.
			r.c.publishTask(r.t, task.Event{At: r.c.now().UTC(), Type: task.EventWriteRefused, Reason: err.Error(),
				Instance: r.c.cfg.Instance, Fence: w.Guard.Fence, Data: map[string]any{"refusal": string(refused.Reason)}})
			r.released = true // the lock is not ours (or gone); never delete it
			return fmt.Errorf("%w: %w", errStoreRefused, err)
		}
		if !IsUnavailable(err) {
			return err
		}
		if !waiting {
			waiting = true
			r.log.Warn().Err(err).Msg("redis unreachable; write waits in memory, no stage starts until it is stored")
		}
		if r.c.hardStop.Err() != nil {
			return err
		}
		if r.lease.Refused() {
			return fmt.Errorf("%w: %w", errStoreRefused, r.lease.Err())
		}
		if r.lease.Check(0) != nil {
			// The lease lapsed during the outage: take it back with the same
			// value and fence if nobody took the tenant, so the waiting write
			// still passes the fenced check.
			if ok, stop := r.retake(); ok {
				continue
			} else if stop != nil {
				return stop
			}
		}
		r.c.sleep(delay)
		delay = min(delay*2, time.Second)
	}
}

// ownsRecord reports whether the stored record is still the one this run
// wrote last (its seq, fence and owner) — or, for the first write of a run
// (the start of a PENDING task, the re-run write of a retry, resume or
// takeover), still the untouched record this run read: same seq, same
// status. Every write raises the seq, so nobody wrote the record since;
// retake then succeeds only if nobody took the tenant's lock either (the
// fence counter is unchanged), so taking the lease back is safe.
func (r *taskRun) ownsRecord(w task.Write, refused *task.RefusedError) bool {
	if refused.Seq != w.ExpectSeq {
		return false
	}
	if refused.Status == w.PrevStatus {
		return true
	}
	return refused.Fence == w.Guard.Fence && refused.Owner == r.c.cfg.Instance
}

// retake re-acquires a lapsed lease with the same value and fence. It
// returns ok when the run holds it again; stop (an errStoreRefused error)
// when the tenant was taken; neither when Redis could not tell (try again).
func (r *taskRun) retake() (ok bool, stop error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.c.cfg.WriteTimeout)
	next, err := r.c.locks.Reacquire(ctx, r.lease)
	cancel()
	switch {
	case err == nil:
		r.lease.Forget()
		r.hold(next)
		r.log.Warn().Msg("lease re-acquired with the same fence after Redis came back")
		r.addEvent(task.Event{Type: task.EventLeaseRegained, Fence: next.Fence(), Instance: r.c.cfg.Instance})
		return true, nil
	case errors.Is(err, tenantlock.ErrLeaseRefused) || errors.Is(err, tenantlock.ErrLocked):
		r.leaseLost(err)
		return false, fmt.Errorf("%w: %w", errStoreRefused, err)
	}
	return false, nil
}

// applied updates the run after a successful write.
func (r *taskRun) applied(w task.Write, res task.WriteResult) {
	r.t.Seq = res.Seq
	r.t.PauseRequested, r.t.CancelRequested = res.PauseRequested, res.CancelRequested
	r.c.publishWrite(r.t, w.PrevStatus, r.events)
	r.events = nil
	if w.ReleaseLock {
		r.released = true
		r.lease.Forget()
	}
	if r.pr != nil && res.PlanStatus != "" {
		r.pr.observe(plan.Status(res.PlanStatus))
	}
	r.c.planStatusChanged(r.t.PlanID, res)
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
	// A pause or cancel honours the requests: clear them with the move.
	clear := to == task.StatusPaused || to == task.StatusCancelled
	if err := r.commit(task.Write{PrevStatus: prev, Checkpoint: ck, ReleaseLock: true, ClearRequests: clear}); err != nil {
		if !errors.Is(err, errStoreRefused) {
			r.log.Error().Err(err).Str("status", string(to)).Msg("final write failed; task left RUNNING in storage, will show orphaned")
		}
		return
	}
	r.c.obs.TaskFinished(to)
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
	r.stopBeat()
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
	r.stopRun()
	// Only this run's own entries: a resume (or retry) of the task may
	// have registered a new run before this one got here.
	r.c.mu.Lock()
	if r.c.tasks[r.t.ID] == r {
		delete(r.c.tasks, r.t.ID)
	}
	r.c.mu.Unlock()
	if r.pr != nil {
		r.pr.taskDone(r)
	}
	r.c.runs.Done()
}

// heartbeat refreshes the task's heartbeat every lease/3 while it holds
// lease, and cancels the run's stage (cancel) the moment the lease is lost:
// the instance cannot promise it is the only one deploying the tenant after
// its lease ends. It starts no goroutine and makes no context: the lease's
// own renewer calls the cancel when it records the loss (Lease.OnLost), and
// timers beat and watch the deadline (a task shorter than lease/3 never
// fires either).
func (r *taskRun) heartbeat(lease Lease, cancel context.CancelCauseFunc) (stop func()) {
	tenantID, taskID, g := r.t.TenantID, r.t.ID, guardOf(lease)
	every := max(r.c.cfg.Lease/3, 10*time.Millisecond)
	// Cut the stage a guard time before the lease would end unconfirmed,
	// not at its last moment: the cancel takes time to reach a stage's
	// in-flight call, and another instance may take the tenant as soon as
	// the lock key expires in Redis.
	leaseLen := lease.Deadline().Sub(lease.Confirmed())
	if leaseLen <= 0 {
		leaseLen = r.c.cfg.Lease
	}
	guard := min(max(leaseLen/10, 50*time.Millisecond), 5*time.Second)

	stopLost := lease.OnLost(func(cause error) {
		cancel(fmt.Errorf("%w: %w", errInterrupted, cause))
	})

	var mu sync.Mutex
	stopped := false
	var watch, beatTimer *time.Timer
	var checkDeadline func()
	checkDeadline = func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		left := time.Until(lease.Deadline()) - guard
		if left <= 0 {
			cancel(fmt.Errorf("%w: lease about to end unconfirmed (renewals are failing)", errInterrupted))
			return
		}
		// Renewals move the deadline: look again when the old one is near.
		watch = time.AfterFunc(left, checkDeadline)
	}
	var beat func()
	beat = func() {
		// Bounded by the lease left: a beat answered after the lease ended
		// says nothing anyway.
		ctx, cancelBeat := context.WithDeadline(context.Background(), lease.Deadline())
		err := r.c.store.Beat(ctx, tenantID, taskID, g, r.c.now())
		cancelBeat()
		var refused *task.RefusedError
		again := true
		switch {
		case errors.As(err, &refused) && refused.Reason == task.RefusedLock && refused.Fence == g.Fence && refused.Owner == r.c.cfg.Instance:
			// The lock key lapsed but the record is still ours: not a loss
			// by itself. The renewer (or the next boundary) settles it.
			r.log.Warn().Err(err).Msg("heartbeat found the lock key gone; lease unconfirmed")
		case errors.As(err, &refused):
			msg := "heartbeat refused: another instance owns the task"
			switch {
			case refused.Reason == task.RefusedMissing:
				msg = "heartbeat refused: the task's record is gone from Redis (a restart without persistence, or a deleted key)"
			case refused.Reason == task.RefusedLock && refused.Owner == r.c.cfg.Instance:
				msg = "heartbeat refused: the tenant's lock holds another value (released by hand, or lost by Redis)"
			}
			r.log.Error().Err(err).Msg(msg)
			cancel(fmt.Errorf("%w: heartbeat refused: %w", tenantlock.ErrLeaseRefused, err))
			again = false // every further beat would be refused too
		case err != nil:
			r.log.Warn().Err(err).Msg("heartbeat failed")
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped && again {
			beatTimer = time.AfterFunc(every, beat)
		}
	}
	checkDeadline()
	mu.Lock()
	beatTimer = time.AfterFunc(every, beat)
	mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			stopped = true
			if watch != nil {
				watch.Stop()
			}
			if beatTimer != nil {
				beatTimer.Stop()
			}
			mu.Unlock()
			stopLost()
		})
	}
}

// requestPause asks a run on this instance to pause at the next boundary.
func (r *taskRun) requestPause(reason string) { r.pauseReq.Store(&reason) }

// requestPlanPause asks a run on this instance to pause at the next boundary
// because its plan was paused, unless a person already asked it to pause on
// this instance: their reason stays, so that the task ends PAUSED with it and
// the plan's resume (which resumes only the tasks the plan's pause paused)
// leaves it paused.
func (r *taskRun) requestPlanPause() {
	reason := ReasonPlanPaused
	r.pauseReq.CompareAndSwap(nil, &reason)
}

// requestCancel asks a run on this instance to cancel at the next boundary.
func (r *taskRun) requestCancel(reason string) { r.cancelReq.Store(&reason) }
