package repository

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// ---- write-behind queue (single-instance mode) ------------------------------

type opKind int

const (
	opCreatePlan opKind = iota
	opUpdatePlan
	opWriteTask
	opRequestTask
	opBeat
)

// queuedOp is an operation applied to memory and waiting to be written back
// to Redis, with its own copies of the caller's values.
type queuedOp struct {
	kind     opKind
	plan     *plan.Plan
	tasks    []*task.Task
	from     []plan.Status
	write    task.Write
	tenantID string
	taskID   string
	req      task.Request
	ev       task.Event
	guard    task.Guard
	at       time.Time
	// holdTask and holdPlan name what memory keeps for it (ReleaseQueued).
	holdTask, holdPlan string
}

func (op *queuedOp) String() string {
	switch op.kind {
	case opCreatePlan:
		return "creation of plan " + op.plan.ID
	case opUpdatePlan:
		return fmt.Sprintf("update of plan %s to %s", op.plan.ID, op.plan.Status)
	case opWriteTask:
		return fmt.Sprintf("write of task %s (%s, seq %d)", op.write.Task.ID, op.write.Task.Status, op.write.ExpectSeq+1)
	case opRequestTask:
		return fmt.Sprintf("%s request of task %s", op.req, op.taskID)
	default:
		return "heartbeat of task " + op.taskID
	}
}

// behind queues an operation behind those already queued (single-instance
// mode): apply puts it in memory and returns it. It reports false, doing
// nothing, when the queue is empty. An operation memory cannot take because
// it does not hold the aggregate fails as unavailable.
func (d *Dual) behind(what string, apply func() (*queuedOp, error)) (bool, error) {
	if !d.cfg.SingleInstance {
		return false, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.queue) == 0 {
		return false, nil
	}
	err := d.pushLocked(apply)
	if missing(err) {
		return true, &UnavailableError{Op: what, msg: "writes to redis are queued (single-instance mode) and memory does not hold it"}
	}
	return true, err
}

// enqueue queues an operation Redis could not take (single-instance mode).
// When memory does not hold the aggregate it returns redisErr.
func (d *Dual) enqueue(redisErr error, apply func() (*queuedOp, error)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.pushLocked(apply)
	if missing(err) {
		return redisErr
	}
	return err
}

func (d *Dual) pushLocked(apply func() (*queuedOp, error)) error {
	op, err := apply()
	if err != nil || op == nil {
		return err
	}
	d.queue = append(d.queue, op)
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return nil
}

// Start starts the flusher that writes queued operations back to Redis
// (single-instance mode; it does nothing otherwise): while the queue is not
// empty it pings Redis every DualConfig.ProbeInterval and, when Redis
// answers, writes the queue back in order. It runs until ctx ends or Close.
func (d *Dual) Start(ctx context.Context) {
	if !d.cfg.SingleInstance {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done != nil {
		return
	}
	ctx, d.cancel = context.WithCancel(ctx)
	d.done = make(chan struct{})
	go d.flushLoop(ctx, d.done)
}

// Close stops the flusher and makes a last attempt to write the queue back
// (within DualConfig.ReplayTimeout per operation). It returns an error
// matching ErrUnavailable when operations are left: they are lost.
func (d *Dual) Close() error {
	d.mu.Lock()
	cancel, done := d.cancel, d.done
	d.cancel = nil
	d.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	if d.Pending() == 0 {
		return nil
	}
	d.drain(context.Background())
	if n := d.Pending(); n > 0 {
		return fmt.Errorf("close dual store: %d queued writes were not written back to redis: %w", n, ErrUnavailable)
	}
	return nil
}

func (d *Dual) flushLoop(ctx context.Context, done chan struct{}) {
	defer close(done)
	for {
		if d.Pending() > 0 {
			if d.drain(ctx) {
				continue
			}
			// Redis does not answer: probe again later (enqueues do not wake us).
			t := time.NewTimer(d.cfg.ProbeInterval)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		}
	}
}

// drain writes the queue back in order once Redis answers a PING. It
// returns true when the queue is empty, false when Redis stopped answering
// (or ctx ended) with operations left.
func (d *Dual) drain(ctx context.Context) bool {
	d.drainMu.Lock()
	defer d.drainMu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, d.cfg.ReplayTimeout)
	err := d.r.Ping(pctx)
	cancel()
	if err != nil {
		d.observe(err)
		return false
	}
	d.observe(nil)
	for {
		d.mu.Lock()
		if len(d.queue) == 0 {
			d.mu.Unlock()
			return true
		}
		op := d.queue[0]
		d.mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, d.cfg.ReplayTimeout)
		err := d.replay(rctx, op)
		cancel()
		if ctx.Err() != nil || IsUnavailable(err) {
			d.observe(err)
			return false
		}
		if err != nil {
			d.cfg.OnReplayError(fmt.Errorf("write back %s: %w", op, err))
		}
		d.mu.Lock()
		d.queue[0] = nil
		d.queue = d.queue[1:]
		if op.kind == opWriteTask {
			delete(d.landed, op.write.ID)
		}
		d.mu.Unlock()
		d.mem.ReleaseQueued(op.holdTask, op.holdPlan)
	}
}

// replay sends one queued operation to Redis through the normal methods. A
// task write carries the id of its first attempt, so a write that reached
// Redis before the outage was noticed succeeds again without being applied
// twice. A plan creation that reached Redis (maybe in part) is deleted and
// written again whole: no later operation on it has been written back yet.
func (d *Dual) replay(ctx context.Context, op *queuedOp) error {
	switch op.kind {
	case opCreatePlan:
		err := d.r.CreatePlan(ctx, op.plan, op.tasks)
		if !errors.Is(err, ErrPlanExists) {
			return err
		}
		return d.r.RecreatePlan(ctx, op.plan, op.tasks)
	case opUpdatePlan:
		return d.r.UpdatePlan(ctx, op.plan, op.from...)
	case opWriteTask:
		_, err := d.r.WriteTask(ctx, op.write)
		return err
	case opRequestTask:
		_, _, err := d.r.RequestTaskApplied(ctx, op.tenantID, op.taskID, op.req, op.ev)
		return err
	default:
		return d.r.Beat(ctx, op.tenantID, op.taskID, op.guard, op.at)
	}
}

// copyWrite returns a deep copy of w for the queue.
func copyWrite(w task.Write) (task.Write, error) {
	t, err := copyTaskIn(w.Task)
	if err != nil {
		return w, err
	}
	w.Task = t
	if w.Checkpoint != nil {
		b, err := w.Checkpoint.Marshal()
		if err != nil {
			return w, err
		}
		cp, err := checkpoint.Unmarshal(b)
		if err != nil {
			return w, err
		}
		w.Checkpoint = &cp
	}
	if w.Events, err = normalize(w.Events); err != nil {
		return w, err
	}
	return w, nil
}

func copyTasksIn(tasks []*task.Task) ([]*task.Task, error) {
	out := make([]*task.Task, len(tasks))
	for i, t := range tasks {
		c, err := copyTaskIn(t)
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}
