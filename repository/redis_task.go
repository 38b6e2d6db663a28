package repository

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// WriteTask applies w in one round trip: write_task.lua (the fenced write of
// record, checkpoint and timeline, in the tenant's slot) and, when the status
// changes or a RUNNING task is taken over (RUNNING → RUNNING with
// ClearRequests), move_plan_counts.lua (the plan's counts and status, in the
// plan's slot) in the same pipeline. Concurrent writes share pipelines (see
// Config.NoWriteBatching): each still waits for exactly one exchange with
// Redis. Returns a *task.RefusedError when the lock, fence or seq check
// fails: nothing is written, and if the counts update had applied it is
// corrected at once (two more round trips, refusals only). A write that
// changes a fixed field of the record (plan id, params, total stages,
// creation time) takes one more round trip: the script asks for them.
//
// The stored fence becomes w.Guard.Fence. After an *UnavailableError the
// outcome is unknown: read the task (its Seq tells whether the write landed).
//
// Sending the same write again with the same id (task.Write.ID) succeeds
// without writing twice as long as no other write has been made to the task
// since (the Dual store's write-behind replays rely on it).
func (r *Redis) WriteTask(ctx context.Context, w task.Write) (task.WriteResult, error) {
	tw, err := EncodeWrite(w)
	if err != nil {
		return task.WriteResult{}, err
	}
	return r.WriteEncoded(ctx, tw)
}

// EncodedWrite is a checked task write encoded once (EncodeWrite): the Dual
// store sends it to Redis (Redis.WriteEncoded) and applies the same encoded
// form to memory (Memory.MirrorWrite).
type EncodedWrite struct {
	w task.Write
	// id is the write's id: w.ID, or a new one.
	id string
	// ckpt is the checkpoint JSON, "" to keep it, "-" to delete it.
	ckpt   string
	events []string
	vals   [len(mutableFields)]string
	fixed  fixedFields
	// moving says whether the write goes to the plan's counts (movesCounts).
	moving bool
	// Integer arguments, passed by pointer (no allocation per argument).
	fence, expect, timelineMax, ttl, nowMs, nFields, newSeq, leaseMs int64
	// move_plan_counts.lua's string and time arguments, by pointer too.
	mID, mStatus, mWriteID, mOwner, mTenant, mNow string
	mMicros                                       int64
}

// EncodeWrite checks w (the errors of WriteTask for bad input) and encodes
// it. Its id is w.ID, or a new one when w.ID is empty (ID).
func EncodeWrite(w task.Write) (*EncodedWrite, error) {
	if err := checkWrite(w); err != nil {
		return nil, err
	}
	t := w.Task
	op := "write task " + t.ID
	tw := &EncodedWrite{w: w, id: writeIDOf(w), moving: movesCounts(w), vals: mutableValues(t), fence: w.Guard.Fence, expect: w.ExpectSeq,
		leaseMs: w.TakeLock.Milliseconds()}
	var err error
	if tw.fixed, err = fixedOf(t); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", task.ErrInvalid, op, err)
	}
	if tw.ckpt, tw.events, err = encodeWrite(w); err != nil {
		return nil, err
	}
	return tw, nil
}

// ID returns the write's id (task.Write.ID): sending the write again with
// it does not apply it twice.
func (tw *EncodedWrite) ID() string { return tw.id }

// scriptArgs returns write_task.lua's arguments; full sends the fixed
// fields themselves instead of their digest; a base (not full) sends only
// the mutable fields that differ from it, and heartbeatAt (delta.go);
// sparse leaves out of a task's first write the mutable fields at their
// zero (not with Config.FullWrites, nor in the resend with the fixed fields).
func (tw *EncodedWrite) scriptArgs(writeID *string, full bool, base *ackWrite, sparse bool) []any {
	if full {
		base = nil
	}
	n := len(mutableFields) + 1
	if full {
		n += 4
	}
	args := make([]any, 0, 11+2*n+len(tw.events))
	// write_lock.lua: "0", or the lease when the write deletes the lock;
	// start_lock.lua: the lease of the lock it takes.
	var seventh any = &flagFalse
	if tw.w.TakeLock > 0 || tw.w.ReleaseLock {
		seventh = &tw.leaseMs
	}
	args = append(args, &tw.w.Guard.LockValue, &tw.fence, &tw.expect, writeID, &tw.ckpt,
		flag(tw.w.ClearRequests), seventh, &tw.timelineMax, &tw.ttl, &tw.nowMs, &tw.nFields)
	current := 0
	if tw.w.Current {
		// First, not last: a blind start's pseudo-field must be the last.
		args = append(args, checkCurrent, &tw.w.Task.ID)
		current = 1
	}
	n += current
	if base != nil {
		n = 1 + current
		for i, name := range mutableFields {
			if tw.vals[i] != base.vals[i] || name == fHeartbeatAt {
				args = append(args, &mutableFields[i], &tw.vals[i])
				n++
			}
		}
		args = append(args, checkPrevWrite, &base.id)
		tw.nFields = int64(n)
		for i := range tw.events {
			args = append(args, &tw.events[i])
		}
		return args
	}
	// A task's first write (seq 0: the record is as created, which left out
	// the mutable fields at their zero) leaves out those still at zero: the
	// record keeps lacking them, which reads the same. Fewer arguments, a
	// shorter HSET and a smaller record for every later write to scan.
	first := sparse && tw.expect == 0
	for i := range mutableFields {
		if first && tw.vals[i] == zeroOf(mutableFields[i]) {
			n--
			continue
		}
		args = append(args, &mutableFields[i], &tw.vals[i]) // by pointer: no allocation each
	}
	tw.nFields = int64(n)
	if full {
		f := &tw.fixed
		args = append(args, fPlanID, &f.planID, fParams, &f.params, fTotalStages, &f.totalStages,
			fCreatedAt, &f.createdAt, fFixedSum, &f.sum)
	} else if tw.w.Blind {
		args = append(args, checkBlind, &tw.fixed.planID) // last: write_task.lua looks there
	} else {
		args = append(args, checkFixedSum, &tw.fixed.sum)
	}
	for i := range tw.events {
		args = append(args, &tw.events[i])
	}
	return args
}

// setFixed sets the fixed fields a blind start's answer v carries (params,
// totalStages, createdAt as stored in key) on its task, and its encoded
// form to them: the write is remembered (delta writes) and mirrored with
// the task as stored.
func (tw *EncodedWrite) setFixed(key string, v []any) error {
	if len(v) < 7 {
		return fmt.Errorf("write task %s: blind start answered without the fixed fields: %v", tw.w.Task.ID, v)
	}
	m := map[string]string{fID: tw.w.Task.ID, fTenantID: tw.w.Task.TenantID, fStatus: string(task.StatusPending),
		fPlanID: tw.fixed.planID, fParams: replyStr(v[4]), fTotalStages: replyStr(v[5]), fCreatedAt: replyStr(v[6])}
	stored, err := decodeTask(key, m)
	if err != nil {
		return err
	}
	t := tw.w.Task
	t.Params, t.TotalStages, t.CreatedAt = stored.Params, stored.TotalStages, stored.CreatedAt
	tw.fixed, err = fixedOf(t)
	return err
}

// WriteEncoded sends an encoded write (see WriteTask).
func (r *Redis) WriteEncoded(ctx context.Context, tw *EncodedWrite) (task.WriteResult, error) {
	writeID := tw.id
	t := tw.w.Task
	op := "write task " + t.ID
	tk, _ := r.keys.taskKeys(t.TenantID, t.ID)
	now := r.now()
	tw.timelineMax, tw.ttl, tw.nowMs, tw.newSeq = int64(r.cfg.TimelineMax), r.ttlMs(), now.UnixMilli(), tw.expect+1
	if tw.w.ReleaseLock {
		tw.leaseMs = r.cfg.LockLease.Milliseconds()
	}
	req := &writeReq{
		pending: pending{ctx: ctx},
		script:  writeTaskScript,
		wKeys:   []string{tk.task, tk.ckpt, tk.timeline, tk.lock, tk.history},
		wArgs:   tw.scriptArgs(&writeID, false, r.last.base(tw), r.last != nil),
	}
	if tw.w.TakeLock > 0 {
		req.script, req.wKeys = startTaskScript, append(req.wKeys, tk.fence)
	}
	var pk planKeys
	if tw.moving {
		pk, _ = r.keys.planKeys(t.PlanID)
		sk := r.keys.statusKeys(t.PlanID)
		req.mKeys = []string{pk.counts, pk.plan, pk.tasks, sk[0], sk[1], sk[2], sk[3], sk[4], sk[5]}
		tw.mID, tw.mStatus, tw.mWriteID, tw.mOwner, tw.mTenant = t.ID, string(t.Status), writeID, t.Owner, t.TenantID
		tw.mNow, tw.mMicros = formatTime(now), micros(now)
		req.mArgs = []any{&tw.mID, &tw.mStatus, &tw.newSeq, &tw.fence, &tw.mWriteID, &tw.mOwner, &tw.mTenant,
			&tw.mNow, &tw.ttl, plan.ReasonFailureThreshold, &tw.mMicros}
		if t.CreatedAt.IsZero() || now.Sub(t.CreatedAt) > ttlMargin(r.cfg.TTL) {
			// The taskref follows the record's TTL, given again when it is
			// older than the margin the scripts apply (see write_task.lua).
			req.ref = tk.ref
		}
	}
	res, err := r.sendWrite(ctx, op, tw, req, tk, pk)
	if err != nil {
		r.last.forget(t.ID)
	} else {
		r.last.acked(tw)
	}
	return res, err
}

// sendWrite sends a write's request and reads its answers (WriteEncoded).
func (r *Redis) sendWrite(ctx context.Context, op string, tw *EncodedWrite, req *writeReq, tk taskKeys, pk planKeys) (task.WriteResult, error) {
	writeID, t := tw.id, tw.w.Task
	if err := r.send(req); err != nil {
		return task.WriteResult{}, wrapErr(ctx, op, err)
	}
	v, err := req.wt.cmd.Slice()
	if err != nil {
		return task.WriteResult{}, wrapErr(ctx, op, err)
	}
	if len(v) > 0 && replyInt(v[0]) == 2 {
		// The fixed fields changed (or the record has no digest), or the
		// record no longer carries the write a delta was relative to: the
		// same write again, whole. The counts update of the first attempt
		// stands.
		again := &writeReq{pending: pending{ctx: ctx}, script: req.script, wKeys: req.wKeys, wArgs: tw.scriptArgs(&writeID, true, nil, false)}
		if err := r.send(again); err != nil {
			return task.WriteResult{}, wrapErr(ctx, op, err)
		}
		if v, err = again.wt.cmd.Slice(); err != nil {
			return task.WriteResult{}, wrapErr(ctx, op, err)
		}
	}
	if len(v) == 0 {
		return task.WriteResult{}, fmt.Errorf("%s: empty script reply", op)
	}
	if replyInt(v[0]) != 1 {
		var refused error
		if replyInt(v[0]) == 3 {
			refused = &task.LockNotTakenError{TaskID: t.ID, TenantID: t.TenantID, Reason: replyStr(v[1])}
		} else {
			refused = refusal(t.ID, v)
		}
		if req.mKeys != nil && req.mvErr == nil && len(req.mv) > 1 && replyInt(req.mv[1]) >= 1 {
			cc, err := r.correctCounts(ctx, tk, pk, t.PlanID, t.ID, writeID)
			if err != nil {
				return task.WriteResult{}, errors.Join(refused, err)
			}
			if cc.corrected {
				// The refused move's own status change (answer 2) was never
				// published: the correction compares the plan's status with
				// the one before the write (CANCELLED -> RUNNING -> FAILED
				// is a change, RUNNING -> COMPLETED -> RUNNING none; "moved
				// xor corrected" took the first for none).
				return task.WriteResult{CountsCorrected: true, PlanStatus: cc.status,
					PlanStatusChanged: cc.changed, Counts: cc.counts}, refused
			}
		}
		return task.WriteResult{}, refused
	}
	if len(v) < 4 {
		return task.WriteResult{}, fmt.Errorf("%s: short script reply %v", op, v)
	}
	res := task.WriteResult{Seq: replyInt(v[1]), PauseRequested: replyInt(v[2]) == 1, CancelRequested: replyInt(v[3]) == 1}
	if tw.w.Blind {
		if err := tw.setFixed(tk.task, v); err != nil {
			return task.WriteResult{}, err
		}
	}
	if req.mKeys != nil {
		if req.mvErr != nil {
			return res, fmt.Errorf("%s: written, but the plan counts did not move (RepairCounts fixes them): %w", op, wrapErr(ctx, op, req.mvErr))
		}
		if len(req.mv) > 1 {
			res.PlanStatus = replyStr(req.mv[0])
			res.PlanStatusChanged = replyInt(req.mv[1]) == 2
		}
	}
	return res, nil
}

// ttlMargin is how much of its TTL a key may have lost before a write gives
// it the TTL again: min(TTL/100, 30 s), as in write_task.lua.
func ttlMargin(ttl time.Duration) time.Duration {
	return min(ttl/100, 30*time.Second)
}

// correction is what correct_plan_counts.lua answered.
type correction struct {
	status    string // the plan's status after it
	corrected bool   // the ledger entry still carried the write: corrected
	changed   bool   // the plan's status differs from before the refused write
	counts    map[task.Status]int
}

// correctCounts undoes the counts update of a refused write: it reads the
// task record as stored now and sets the ledger entry to it if the entry
// still carries writeID (see correct_plan_counts.lua).
func (r *Redis) correctCounts(ctx context.Context, tk taskKeys, pk planKeys, planID, taskID, writeID string) (correction, error) {
	op := "correct plan counts for task " + taskID
	v, err := r.c.HMGet(ctx, tk.task, fStatus, fSeq, fFence, fOwner).Result()
	if err != nil {
		return correction{}, wrapErr(ctx, op, err)
	}
	status := task.Status(replyStr(v[0]))
	if !status.Valid() {
		status = ""
	}
	sk := r.keys.statusKeys(planID)
	now := r.now()
	pp := r.pipeline()
	fix := pp.eval(ctx, correctPlanCountsScript, []string{pk.counts, pk.plan, pk.tasks, sk[0], sk[1], sk[2], sk[3], sk[4], sk[5]},
		taskID, writeID, string(status), replyInt(v[1]), replyInt(v[2]), replyStr(v[3]),
		formatTime(now), plan.ReasonFailureThreshold, micros(now), r.ttlMs())
	if status != "" {
		r.indexPlans(ctx, pp, planID, now, status)
	}
	err = pp.exec(ctx)
	if err == nil {
		err = fix.cmd.Err()
	}
	if err != nil {
		return correction{}, wrapErr(ctx, op, err)
	}
	a, err := fix.cmd.Slice()
	if err != nil || len(a) < 3+len(task.Statuses) {
		return correction{}, fmt.Errorf("%s: unexpected script reply %v (%v)", op, a, err)
	}
	c := correction{status: replyStr(a[0]), corrected: replyInt(a[1]) == 1, changed: replyInt(a[2]) == 1,
		counts: make(map[task.Status]int, len(task.Statuses))}
	if c.status == "" && status != "" {
		// The plan record is gone: the ZADD beside the script named a ghost
		// (see unindexGone).
		r.unindexGone(ctx, []string{planID})
	}
	for i, s := range task.Statuses {
		c.counts[s] = int(replyInt(a[3+i]))
	}
	return c, nil
}

func checkRequest(req task.Request) error {
	switch req {
	case task.RequestPause, task.RequestCancel, task.RequestClearPause, task.RequestNote:
		return nil
	}
	return fmt.Errorf("%w: request %s must be pause, cancel, clear_pause or note", task.ErrInvalid, task.Quote(string(req)))
}

// RequestTask stores a cooperative request on a task without the tenant lock
// and without changing its seq, appends ev to its timeline when the request
// was stored (ev.Type "" appends nothing), and returns the task as stored.
// Pause and cancel are stored only on RUNNING tasks; clear_pause withdraws a
// pause request on a task of any status. One round trip. Returns
// task.ErrNotFound.
func (r *Redis) RequestTask(ctx context.Context, tenantID, taskID string, req task.Request, ev task.Event) (*task.Task, error) {
	t, _, err := r.RequestTaskApplied(ctx, tenantID, taskID, req, ev)
	return t, err
}

// RequestTaskApplied is RequestTask, and reports whether the request was
// stored (the Dual store mirrors only what was).
func (r *Redis) RequestTaskApplied(ctx context.Context, tenantID, taskID string, req task.Request, ev task.Event) (*task.Task, bool, error) {
	return r.requestTask(ctx, tenantID, taskID, req, ev)
}

func (r *Redis) requestTask(ctx context.Context, tenantID, taskID string, req task.Request, ev task.Event) (*task.Task, bool, error) {
	op := "request " + string(req) + " of task " + taskID
	tk, err := r.keys.taskKeys(tenantID, taskID)
	if err != nil {
		return nil, false, fmt.Errorf("request task: %w", err)
	}
	if err := checkRequest(req); err != nil {
		return nil, false, err
	}
	evJSON := ""
	if ev.Type != "" {
		b, err := appendEvent(nil, ev)
		if err != nil {
			return nil, false, fmt.Errorf("%w: %s: event: %v", task.ErrInvalid, op, err)
		}
		evJSON = string(b)
	}
	v, err := r.run(ctx, requestTaskScript, []string{tk.task, tk.timeline}, string(req), evJSON, r.cfg.TimelineMax, r.ttlMs())
	if err != nil {
		return nil, false, wrapErr(ctx, op, err)
	}
	s, err := replySlice(op, v)
	if err != nil {
		return nil, false, err
	}
	if len(s) == 0 {
		return nil, false, fmt.Errorf("%s: %w", op, task.ErrNotFound)
	}
	m := make(map[string]string, len(s)/2)
	for i := 1; i+1 < len(s); i += 2 {
		m[replyStr(s[i])] = replyStr(s[i+1])
	}
	t, err := decodeTask(tk.task, m)
	if err != nil {
		return nil, false, err
	}
	if t == nil {
		return nil, false, fmt.Errorf("%s: %w", op, task.ErrNotFound)
	}
	return t, replyInt(s[0]) == 1, nil
}

// Beat refreshes a task's heartbeat if g still holds its tenant lock (not
// checked for an empty lock value: an in-process lease of the single-instance
// mode) and no newer fence has written the task. One round trip. Returns a
// *task.RefusedError otherwise.
func (r *Redis) Beat(ctx context.Context, tenantID, taskID string, g task.Guard, now time.Time) error {
	op := "heartbeat of task " + taskID
	tk, err := r.keys.taskKeys(tenantID, taskID)
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	v, err := r.run(ctx, beatTaskScript, []string{tk.task, tk.lock}, g.LockValue, g.Fence, formatTime(now))
	if err != nil {
		return wrapErr(ctx, op, err)
	}
	s, err := replySlice(op, v)
	if err != nil || len(s) == 0 {
		return fmt.Errorf("%s: unexpected script reply %v", op, v)
	}
	if replyInt(s[0]) == 1 {
		return nil
	}
	return refusal(taskID, s)
}

// Task returns a task by id and its checkpoint (nil if none): two round
// trips (shared with concurrent queries, see groupcommit.go): the task's
// tenant from its taskref bucket (with the taskref STRING of versions
// before the buckets, read in the same pipeline while such keys may be
// left), then the record. Returns task.ErrNotFound.
func (r *Redis) Task(ctx context.Context, taskID string) (*task.Task, *checkpoint.Checkpoint, error) {
	op := "get task " + taskID
	ref, err := r.keys.refRead(ctx, taskID)
	if err != nil {
		return nil, nil, fmt.Errorf("get task: %w", err)
	}
	if err := r.readPipe(ctx, ref.bucket, ref.str); err != nil {
		return nil, nil, wrapErr(ctx, op, err)
	}
	tenant, k, err := ref.tenant()
	if errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("%s: %w", op, task.ErrNotFound)
	}
	if err != nil {
		return nil, nil, wrapErr(ctx, op, err)
	}
	if !task.ValidTenantID(tenant) {
		return nil, nil, fmt.Errorf("%w: %s holds %s, not a tenant id", ErrCorrupt, k, task.Quote(tenant))
	}
	return r.loadTask(ctx, op, tenant, taskID)
}

// refRead reads a task's tenant: HGET of its taskref bucket and GET of the
// taskref STRING of versions before the buckets, sent together.
type refRead struct {
	bucket, str *redis.StringCmd
}

// refRead returns the commands that read taskID's tenant (not sent).
func (k Keys) refRead(ctx context.Context, taskID string) (refRead, error) {
	if err := checkTaskID(taskID); err != nil {
		return refRead{}, err
	}
	return refRead{
		bucket: redis.NewStringCmd(ctx, "hget", string(k.appendTaskRef(nil, taskID)), taskID),
		str:    redis.NewStringCmd(ctx, "get", string(k.appendTaskRefString(nil, taskID))),
	}, nil
}

// tenant returns the tenant the bucket holds or, if it holds none, the
// STRING's, with the key it came from; redis.Nil when neither holds one.
func (rr refRead) tenant() (tenant, key string, err error) {
	tenant, err = rr.bucket.Result()
	if !errors.Is(err, redis.Nil) {
		return tenant, rr.bucket.Args()[1].(string), err
	}
	tenant, err = rr.str.Result()
	return tenant, rr.str.Args()[1].(string), err
}

// loadTask reads a task record and its checkpoint in one round trip.
func (r *Redis) loadTask(ctx context.Context, op, tenantID, taskID string) (*task.Task, *checkpoint.Checkpoint, error) {
	tk, err := r.keys.taskKeys(tenantID, taskID)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", op, err)
	}
	h, c := redis.NewMapStringStringCmd(ctx, "hgetall", tk.task), redis.NewStringCmd(ctx, "get", tk.ckpt)
	if err := r.readPipe(ctx, h, c); err != nil {
		return nil, nil, wrapErr(ctx, op, err)
	}
	return decodeLoaded(ctx, op, tk, h, c)
}

// decodeLoaded decodes the answers to HGETALL of a task record and GET of
// its checkpoint. Returns task.ErrNotFound when the record is missing.
func decodeLoaded(ctx context.Context, op string, tk taskKeys, h *redis.MapStringStringCmd, c *redis.StringCmd) (*task.Task, *checkpoint.Checkpoint, error) {
	t, err := decodeRecord(ctx, op, tk, h)
	if err != nil {
		return nil, nil, err
	}
	switch err := c.Err(); {
	case errors.Is(err, redis.Nil):
		return t, nil, nil
	case err != nil:
		return nil, nil, wrapErr(ctx, op, err)
	}
	cp, err := unmarshalCheckpoint([]byte(c.Val()))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, tk.ckpt, err)
	}
	return t, &cp, nil
}

// decodeRecord decodes the answer to HGETALL of a task record. Returns
// task.ErrNotFound when the record is missing.
func decodeRecord(ctx context.Context, op string, tk taskKeys, h *redis.MapStringStringCmd) (*task.Task, error) {
	if err := h.Err(); err != nil {
		return nil, wrapErr(ctx, op, err)
	}
	t, err := decodeTask(tk.task, h.Val())
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, fmt.Errorf("%s: %w", op, task.ErrNotFound)
	}
	return t, nil
}

// TenantHistory returns up to limit of the tenant's tasks, newest first
// (limit 0 means plan.LimitDefault, at most plan.LimitMax): two round trips.
func (r *Redis) TenantHistory(ctx context.Context, tenantID string, limit int) ([]*task.Task, error) {
	op := "history of tenant " + tenantID
	k, err := r.keys.History(tenantID)
	if err != nil {
		return nil, fmt.Errorf("tenant history: %w", err)
	}
	ids, err := r.c.ZRevRange(ctx, k, 0, int64(pageLimit(limit)-1)).Result()
	if err != nil {
		return nil, wrapErr(ctx, op, err)
	}
	tenants := make([]string, len(ids))
	for i := range tenants {
		tenants[i] = tenantID
	}
	return r.readTasks(ctx, op, ids, tenants)
}

// Timeline returns up to limit of the newest timeline entries of a task,
// oldest first (limit 0 or above Config.TimelineMax means TimelineMax): one
// round trip. Returns task.ErrNotFound.
func (r *Redis) Timeline(ctx context.Context, tenantID, taskID string, limit int) ([]task.Event, error) {
	op := "timeline of task " + taskID
	tk, err := r.keys.taskKeys(tenantID, taskID)
	if err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	if limit <= 0 || limit > r.cfg.TimelineMax {
		limit = r.cfg.TimelineMax
	}
	pp := r.c.Pipeline()
	exists := pp.Exists(ctx, tk.task)
	entries := pp.LRange(ctx, tk.timeline, int64(-limit), -1)
	if err := transportErr(pp.Exec(ctx)); err != nil {
		return nil, wrapErr(ctx, op, err)
	}
	if err := errors.Join(exists.Err(), entries.Err()); err != nil {
		return nil, wrapErr(ctx, op, err)
	}
	if exists.Val() == 0 {
		return nil, fmt.Errorf("%s: %w", op, task.ErrNotFound)
	}
	return decodeEvents(tk.timeline, entries.Val())
}

func decodeEvents(key string, raw []string) ([]task.Event, error) {
	out := make([]task.Event, 0, len(raw))
	for i, s := range raw {
		var ev task.Event
		if err := json.Unmarshal([]byte(s), &ev); err != nil {
			return nil, fmt.Errorf("%w: %s entry %d: %v", ErrCorrupt, key, i, err)
		}
		out = append(out, ev)
	}
	return out, nil
}
