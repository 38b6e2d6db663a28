package facade

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// A task's start that takes its tenant lock in the start write itself
// (task.Write.TakeLock): one script instead of the lock's (acquire_lock.lua)
// and then the PENDING → RUNNING write, one round trip fewer per start, and
// the lock and the RUNNING record taken in one atomic step. It is startTask's
// first try when the store and the locker work on the same Redis keys
// (claimStarts); anything the script cannot settle — a locked tenant, whose
// holder and policy (onTenantLocked) acquire reports and applies, or a fence
// counter ahead of this instance's clock — writes nothing and leaves the
// start to the usual way.

// claimLocker is a Locker whose locks a store's script can take (Claim)
// and that makes leases of them (Adopt): *redislock.Locker.
type claimLocker[L Lease] interface {
	Claim(tenantID string, h tenantlock.Holder, after int64) (tenantlock.Claim, error)
	Adopt(tenantID string, h tenantlock.Holder, c tenantlock.Claim) (L, error)
	LockKeys(tenantID string) (lockKey, fenceKey string)
}

// lockTakingStore is a Store whose starts can take the tenant lock
// (task.Write.TakeLock) and that names the keys they take.
type lockTakingStore interface {
	LockKeys(tenantID string) (lockKey, fenceKey string, err error)
}

// claimer is a claimLocker as the coordinator uses it.
type claimer interface {
	Claim(tenantID string, h tenantlock.Holder, after int64) (tenantlock.Claim, error)
	Adopt(tenantID string, h tenantlock.Holder, c tenantlock.Claim) (Lease, error)
}

type claims[L Lease] struct{ l claimLocker[L] }

func (c claims[L]) Claim(tenantID string, h tenantlock.Holder, after int64) (tenantlock.Claim, error) {
	return c.l.Claim(tenantID, h, after)
}

func (c claims[L]) Adopt(tenantID string, h tenantlock.Holder, cl tenantlock.Claim) (Lease, error) {
	lease, err := c.l.Adopt(tenantID, h, cl)
	if err != nil {
		return nil, err // not a Lease holding a nil L
	}
	return lease, nil
}

// claimStarts returns the claimer of locks when store's starts take the
// locks of locks: both support it and name the same keys (checked on a
// sample tenant; both build the keys from the tenant id alone). Otherwise
// nil: every start takes the lock first.
func claimStarts[L Lease](store Store, locks Locker[L]) claimer {
	cl, ok := any(locks).(claimLocker[L])
	if !ok {
		return nil
	}
	st, ok := store.(lockTakingStore)
	if !ok {
		return nil
	}
	const sample = "tenant-a.1"
	lk, fk := cl.LockKeys(sample)
	slk, sfk, err := st.LockKeys(sample)
	if err != nil || lk == "" || lk != slk || fk != sfk {
		return nil
	}
	return claims[L]{cl}
}

// StartsTakeLock reports whether task starts take the tenant lock in their
// RUNNING write (the store and the locker name the same lock keys); when
// false, every start takes the lock first.
func (c *Coordinator) StartsTakeLock() bool { return c.claims != nil }

// startClaimed starts t with one write that marks it RUNNING and takes its
// tenant lock, and runs it. done is false when nothing was written and the
// start goes the usual way (startTask): the tenant is locked, its fence
// counter is ahead of this instance's clock, the checkpoint of a queued
// retry could not be read, or the instance is shutting down — and, for a
// blind start (blindTask), when the record was not as created (written
// since, or of another plan): the caller reads the task then. Otherwise
// again is startTask's answer.
func (c *Coordinator) startClaimed(pr *planRun, t *task.Task, acquired func(), log zerolog.Logger, blind bool) (again, done bool) {
	ck, from, err := c.queuedCheckpoint(t, len(pr.stages))
	if err != nil {
		return false, false // the usual way reads it again and reports it
	}
	// Counted as a run before the write: once the start lands, the run
	// exists even if the shutdown began meanwhile (it pauses the task at
	// its first boundary, as any run).
	if !c.reserveRun() {
		return false, false
	}
	holder := tenantlock.Holder{PlanID: t.PlanID, TaskID: t.ID, Instance: c.cfg.Instance}
	claim, err := c.claims.Claim(t.TenantID, holder, t.Fence)
	if err != nil {
		c.runs.Done()
		return false, false
	}
	prev := t.Status
	started := *t // t stays as read until the start lands
	now := c.now()
	if err := started.Start(now, c.cfg.Instance, claim.Fence); err != nil {
		c.runs.Done()
		log.Error().Err(err).Msg("start task")
		return false, true
	}
	w := task.Write{
		Task: &started, PrevStatus: prev, ExpectSeq: started.Seq,
		Guard: task.Guard{LockValue: claim.Value, Fence: claim.Fence}, TakeLock: claim.Lease, Blind: blind, ID: task.NewWriteID(),
		Events: []task.Event{{At: now.UTC(), Type: task.EventStarted, Instance: c.cfg.Instance, Fence: claim.Fence, Attempt: started.Attempt}},
	}
	res, err := c.writeClaimed(w, claim)
	if err != nil && res.Seq > 0 {
		// The start landed — the record is RUNNING with this claim's lock —
		// and only its plan counts' move failed (see Store.WriteTask). It
		// is a start: taken for one that had not landed, it was queued
		// again and the next claim, finding it RUNNING, dropped it — the
		// task stayed RUNNING with no run anywhere. The run's later moves
		// start from the ledger entry the failed move left, so the counts
		// add up again when the task ends; until then they lag.
		log.Error().Err(err).Msg("task started, but its plan's counts did not move; they lag until it ends (or repair the plan's counts)")
		err = nil
	}
	if err != nil {
		c.runs.Done()
		var refused *task.RefusedError
		switch {
		case errors.Is(err, task.ErrLockNotTaken):
			return false, false
		case blind && errors.As(err, &refused) && (refused.Status == task.StatusPending || refused.Reason == task.RefusedPlan):
			return false, false
		case errors.As(err, &refused) && refused.Status != task.StatusPending:
			return false, true // someone else started or cancelled it meanwhile
		case IsMalformed(err):
			// A field of the stored record does not decode (a hand edit, a
			// bug): queued again it would fail the same way. A blind start
			// learns it from the write's answer — the task is RUNNING with
			// this claim's lock, which is let go so that, once the field is
			// fixed, a retry takes it over: at once on this instance (where
			// it shows orphaned, no run here holding it), on the others once
			// a lease has passed without a heartbeat.
			c.letGoClaim(t.TenantID, holder, claim)
			log.Error().Err(err).Msg("task not started: its stored record is malformed; fix the field named, then retry the task " +
				"(or, if it still shows PENDING, repair the plan's counts, which queues it)")
			return false, true
		}
		// As startTask after a start write that did not land: the task is
		// PENDING (or, if a lost answer landed and Redis stayed away past
		// the lease, RUNNING without a holder: orphaned, for an operator).
		c.forget(t.ID, claim.Fence)
		logStartNotLanded(log, err, w.ExpectSeq, claim.Fence)
		return true, true
	}
	// A lease adopted after it ran out (Redis answered late) is lost from
	// the start: the run's first boundary takes it back if nobody took the
	// tenant (Reacquire), as after any lapse.
	lease, err := c.claims.Adopt(t.TenantID, holder, claim)
	if err != nil { // a bug: the claim is the Locker's own
		c.runs.Done()
		log.Error().Err(err).Msg("adopt the lease of a started task; it will show orphaned")
		return false, true
	}
	*t = started
	r := c.newRun(t, pr.p, pr.stages, ck, lease, pr)
	c.track(r)
	acquired()
	pr.add(r)
	r.events = w.Events
	r.applied(w, res)
	c.obs.TaskStarted()
	r.run(from)
	return r.rolledBack, true
}

// reserveRun counts a run about to start (c.runs); false when the instance
// is shutting down. register is reserveRun and track.
func (c *Coordinator) reserveRun() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing.Load() {
		return false
	}
	c.runs.Add(1)
	return true
}

// writeClaimed sends the claimed start w. While Redis is unreachable it
// sends it again, with the same write id and lock value — a start whose
// answer was lost but that landed is answered as written — until Redis
// answers, the claim's lease has passed (a start that landed then lapses:
// its task shows orphaned) or the coordinator stops.
func (c *Coordinator) writeClaimed(w task.Write, claim tenantlock.Claim) (task.WriteResult, error) {
	delay := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.WriteTimeout)
		res, err := c.writeTask(ctx, w)
		cancel()
		if err == nil || !IsUnavailable(err) || time.Since(claim.Sent) >= claim.Lease || !c.sleep(delay) {
			return res, err
		}
		delay = min(delay*2, time.Second)
	}
}

// letGoClaim releases the lock a start write took with claim (it is the
// claim's value or already gone; another holder's value is left alone), for
// a start that landed but cannot run.
func (c *Coordinator) letGoClaim(tenantID string, h tenantlock.Holder, claim tenantlock.Claim) {
	lease, err := c.claims.Adopt(tenantID, h, claim)
	if err != nil { // a bug: the claim is the Locker's own; the lock ends with its lease
		c.log.Error().Err(err).Str("tenant_id", tenantID).Msg("adopt a claim to release it")
		return
	}
	c.releaseQuietly(lease)
}

// logStartNotLanded logs a start whose RUNNING write did not land: the task
// is still PENDING and is started again (queued again with shared plans,
// read again before an owned plan's run ends). The message keeps its words
// (alerts match them); cause says whether anyone has to act
// (docs/operations.md, "A start that did not land"): "refused" — the record
// was written by someone else after this instance read it (refusal, and the
// stored seq and fence against the start's expected_seq and fence; nothing
// of this version writes a PENDING task but its start, so a repeated one
// names another writer), "unavailable" — Redis did not answer within the
// lease (a start that landed unanswered shows orphaned: retry it), "error"
// — Redis answered an error.
func logStartNotLanded(log zerolog.Logger, err error, expectSeq, fence int64) {
	ev := log.Warn().Err(err).Int64("expected_seq", expectSeq).Int64("fence", fence)
	var refused *task.RefusedError
	switch {
	case errors.As(err, &refused):
		ev = ev.Str("cause", "refused").Str("refusal", string(refused.Reason)).Str("stored_status", string(refused.Status)).
			Int64("stored_seq", refused.Seq).Int64("stored_fence", refused.Fence)
	case IsUnavailable(err):
		ev = ev.Str("cause", "unavailable")
	default:
		ev = ev.Str("cause", "error")
	}
	ev.Msg("could not mark task RUNNING; it will be started again")
}
