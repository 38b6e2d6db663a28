package repository

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Redis is the store on Redis: the authoritative copy of every plan and task
// (see doc.go for the key layout, the write protocol and the round-trip
// budget of each method). It is safe for concurrent use and keeps no state
// besides whether its scripts are loaded, so any number of instances share
// one Redis.
type Redis struct {
	c      redis.UniversalClient
	keys   Keys
	cfg    Config
	loader scriptLoader
	// scanMax bounds filtered listings (ScanMax; tests lower it).
	scanMax int
	// batcher groups concurrent task writes (nil: Config.NoWriteBatching).
	batcher *writeBatcher
	// reads groups concurrent tenant queries' reads (nil:
	// Config.NoReadBatching).
	reads *readBatcher
	// hints remembers tenants' current task ids (nil: none).
	hints *tenantHints
	// last remembers tasks' last acknowledged writes, for delta writes
	// (nil: Config.FullWrites).
	last *lastWrites
	// legacy says whether creations write the keys of storage layout 1
	// (Config.LegacyKeys).
	legacy *legacyKeys
}

// NewRedis returns a store on client. Zero fields of cfg mean the defaults;
// it returns an error wrapping ErrConfig when cfg is invalid. It does not
// talk to Redis: scripts are loaded on first use (or by Preload).
func NewRedis(client redis.UniversalClient, cfg Config) (*Redis, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	keys, err := NewKeys(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	r := &Redis{c: client, keys: keys, cfg: cfg, scanMax: ScanMax, legacy: newLegacyKeys(cfg.LegacyKeys)}
	if !cfg.NoWriteBatching {
		r.batcher = &writeBatcher{max: cfg.WriteBatchMax, sendNow: r.sendNow}
	}
	if !cfg.FullWrites {
		r.last = newLastWrites()
	}
	if !cfg.NoReadBatching {
		r.reads = &readBatcher{max: readBatchMax, sendNow: r.sendReads}
	}
	if cfg.TenantHints > 0 {
		r.hints = newTenantHints(cfg.TenantHints)
	}
	return r, nil
}

// Keys returns the store's key builder (the server wires package tenantlock
// with its Lock and Fence keys).
func (r *Redis) Keys() Keys { return r.keys }

// BlindStarts reports that the store takes blind starts (task.Write.Blind).
func (r *Redis) BlindStarts() bool { return true }

// LockKeys returns the tenant lock and fence keys that a start with
// task.Write.TakeLock takes (Keys.Lock, Keys.Fence): the tenant locker must
// use the same ones.
func (r *Redis) LockKeys(tenantID string) (lockKey, fenceKey string, err error) {
	if lockKey, err = r.keys.Lock(tenantID); err != nil {
		return "", "", err
	}
	fenceKey, err = r.keys.Fence(tenantID)
	return lockKey, fenceKey, err
}

// Preload loads every script into Redis (SCRIPT LOAD) so that EVALSHA hits
// from the first call. Calling it is optional: the store loads them on first
// use, and again after Redis forgot them.
func (r *Redis) Preload(ctx context.Context) error {
	return wrapErr(ctx, "load scripts", r.loader.load(ctx, r.c))
}

// Ping checks that Redis answers (one round trip).
func (r *Redis) Ping(ctx context.Context) error {
	return wrapErr(ctx, "ping redis", r.c.Ping(ctx).Err())
}

func (r *Redis) ttlMs() int64 { return r.cfg.TTL.Milliseconds() }

func (r *Redis) now() time.Time { return r.cfg.Clock() }

// writeIDOf is the id of w (task.Write.ID), or a new one.
func writeIDOf(w task.Write) string {
	if w.ID != "" {
		return w.ID
	}
	return task.NewWriteID()
}

func pageLimit(n int) int {
	switch {
	case n <= 0:
		return plan.LimitDefault
	case n > plan.LimitMax:
		return plan.LimitMax
	}
	return n
}

// stringArg and int64Arg read back a command argument the store built,
// passed by value or by pointer.
func stringArg(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case *string:
		return *x
	}
	return ""
}

func int64Arg(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case *int64:
		return *x, true
	}
	return 0, false
}

// flag is b as a script argument, "1" or "0", by pointer (no allocation).
func flag(b bool) *string {
	if b {
		return &flagTrue
	}
	return &flagFalse
}

var flagTrue, flagFalse = "1", "0" // read only

// strArgs appends s to dst as command arguments: pointers into s (a string
// stored in an interface is an allocation each; go-redis writes a *string
// as the string), so s must not change until the command is sent.
// BenchmarkCreatePlan: 58 234 → 38 203 allocations a 1 000-task plan.
func strArgs(dst []any, s ...string) []any {
	for i := range s {
		dst = append(dst, &s[i])
	}
	return dst
}

func replyInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func replyStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

func replySlice(op string, v any) ([]any, error) {
	s, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: unexpected script reply %T", op, v)
	}
	return s, nil
}

// refusal builds the *task.RefusedError of a script's refusal reply
// {0, reason, status, seq, fence, owner}.
func refusal(taskID string, v []any) *task.RefusedError {
	e := &task.RefusedError{TaskID: taskID}
	if len(v) >= 6 {
		e.Reason = task.RefuseReason(replyStr(v[1]))
		e.Status = task.Status(replyStr(v[2]))
		e.Seq = replyInt(v[3])
		e.Fence = replyInt(v[4])
		e.Owner = replyStr(v[5])
	}
	return e
}

// ---- plans (creation: redis_create.go) ------------------------------------

// UpdatePlan writes p's status, reason, owner and times if the stored status
// is one of from (any status when from is empty). Returns plan.ErrNotFound or
// a *plan.TransitionError naming the stored status. One round trip.
func (r *Redis) UpdatePlan(ctx context.Context, p *plan.Plan, from ...plan.Status) error {
	if p == nil {
		return fmt.Errorf("%w: update plan: nil plan", plan.ErrInvalid)
	}
	op := "update plan " + p.ID
	pk, err := r.keys.planKeys(p.ID)
	if err != nil {
		return fmt.Errorf("update plan: %w", err)
	}
	if !p.Status.Valid() {
		return fmt.Errorf("%w: %s: status %s", plan.ErrInvalid, op, task.Quote(string(p.Status)))
	}
	args := []any{r.ttlMs(), len(from)}
	for _, s := range from {
		args = append(args, string(s))
	}
	v, err := r.run(ctx, updatePlanScript, []string{pk.plan, pk.tasks, pk.counts}, strArgs(args, planState(p)...)...)
	if err != nil {
		return wrapErr(ctx, op, err)
	}
	s, err := replySlice(op, v)
	if err != nil || len(s) == 0 {
		return fmt.Errorf("%s: unexpected script reply %v", op, v)
	}
	switch replyInt(s[0]) {
	case 1:
		return nil
	case -1:
		return fmt.Errorf("%s: %w", op, plan.ErrNotFound)
	}
	var stored plan.Status
	if len(s) > 1 {
		stored = plan.Status(replyStr(s[1]))
	}
	return &plan.TransitionError{PlanID: p.ID, From: stored, To: p.Status}
}

// Plan returns a plan and its counts: one round trip whatever its size.
// Returns plan.ErrNotFound.
func (r *Redis) Plan(ctx context.Context, planID string) (*plan.Plan, plan.Counts, error) {
	op := "get plan " + planID
	pk, err := r.keys.planKeys(planID)
	if err != nil {
		return nil, nil, fmt.Errorf("get plan: %w", err)
	}
	pp := r.c.Pipeline()
	h := pp.HGetAll(ctx, pk.plan)
	c := pp.HMGet(ctx, pk.counts, statusNames()...)
	if err := transportErr(pp.Exec(ctx)); err != nil {
		return nil, nil, wrapErr(ctx, op, err)
	}
	if err := errors.Join(h.Err(), c.Err()); err != nil {
		return nil, nil, wrapErr(ctx, op, err)
	}
	p, err := decodePlan(pk.plan, h.Val())
	if err != nil {
		return nil, nil, err
	}
	if p == nil {
		return nil, nil, fmt.Errorf("%s: %w", op, plan.ErrNotFound)
	}
	counts, err := decodeCounts(pk.counts, c.Val())
	if err != nil {
		return nil, nil, err
	}
	return p, counts, nil
}

func decodeCounts(key string, vals []any) (plan.Counts, error) {
	counts := newCounts()
	for i, s := range task.Statuses {
		if i >= len(vals) || vals[i] == nil {
			continue
		}
		v := replyStr(vals[i])
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("%w: %s field %s = %s: %v", ErrCorrupt, key, s, task.Quote(v), err)
		}
		counts[s] = n
	}
	return counts, nil
}

// planCursor is the position of a plans listing: the last plan returned.
type planCursor struct {
	score int64
	id    string
}

func (c planCursor) String() string { return strconv.FormatInt(c.score, 10) + ":" + c.id }

func parsePlanCursor(s string) (planCursor, bool, error) {
	if s == "" {
		return planCursor{}, false, nil
	}
	ms, id, ok := strings.Cut(s, ":")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || !plan.ValidID(id) {
		return planCursor{}, false, fmt.Errorf("%w: cursor %s", plan.ErrInvalid, task.Quote(s))
	}
	return planCursor{score: n, id: id}, true, nil
}

// Plans lists plans, newest first, and the cursor of the next page ("" at
// the end). The cursor is "<createdAt ms>:<planId>" of the last plan listed.
// Two round trips a page; with a status filter it reads pages of candidates
// until the page is full or ScanMax plans were examined.
func (r *Redis) Plans(ctx context.Context, f plan.ListFilter) ([]*plan.Plan, string, error) {
	if f.Status != "" && !f.Status.Valid() {
		return nil, "", fmt.Errorf("%w: list plans: status %s", plan.ErrInvalid, task.Quote(string(f.Status)))
	}
	cur, has, err := parsePlanCursor(f.Cursor)
	if err != nil {
		return nil, "", fmt.Errorf("list plans: %w", err)
	}
	limit := pageLimit(f.Limit)
	chunk := limit + 1
	if f.Status != "" {
		chunk = max(chunk, 200)
	}
	var out []*plan.Plan
	for scanned := 0; scanned < r.scanMax; {
		zs, err := r.plansAfter(ctx, cur, has, chunk)
		if err != nil {
			return nil, "", wrapErr(ctx, "list plans", err)
		}
		if len(zs) == 0 {
			return out, "", nil
		}
		pp := r.c.Pipeline()
		hs := make([]*redis.MapStringStringCmd, len(zs))
		for i, z := range zs {
			hs[i] = pp.HGetAll(ctx, r.keys.plan(z.id))
		}
		if err := transportErr(pp.Exec(ctx)); err != nil {
			return nil, "", wrapErr(ctx, "list plans", err)
		}
		for i, z := range zs {
			if len(out) == limit {
				// zs[i] exists: there is a next page.
				return out, cur.String(), nil
			}
			cur, has = z, true
			scanned++
			if err := hs[i].Err(); err != nil {
				return nil, "", wrapErr(ctx, "list plans", err)
			}
			p, err := decodePlan(r.keys.plan(z.id), hs[i].Val())
			if err != nil {
				return nil, "", err
			}
			if p == nil || (f.Status != "" && p.Status != f.Status) {
				continue
			}
			out = append(out, p)
		}
		if len(zs) < chunk {
			return out, "", nil
		}
	}
	return out, cur.String(), nil
}

// plansAfter returns up to n plan ids after cursor c, newest first: the rest
// of c's millisecond (same score, smaller id) and the older ones, in one
// round trip.
func (r *Redis) plansAfter(ctx context.Context, c planCursor, has bool, n int) ([]planCursor, error) {
	key := r.keys.Plans()
	if !has {
		zs, err := r.c.ZRevRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Max: "+inf", Min: "-inf", Count: int64(n)}).Result()
		if err != nil {
			return nil, err
		}
		return toCursors(zs), nil
	}
	score := strconv.FormatInt(c.score, 10)
	pp := r.c.Pipeline()
	same := pp.ZRevRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Max: score, Min: score})
	older := pp.ZRevRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Max: "(" + score, Min: "-inf", Count: int64(n)})
	if err := transportErr(pp.Exec(ctx)); err != nil {
		return nil, err
	}
	if err := errors.Join(same.Err(), older.Err()); err != nil {
		return nil, err
	}
	var out []planCursor
	for _, z := range toCursors(same.Val()) {
		if z.id < c.id {
			out = append(out, z)
		}
	}
	out = append(out, toCursors(older.Val())...)
	return out[:min(len(out), n)], nil
}

func toCursors(zs []redis.Z) []planCursor {
	out := make([]planCursor, 0, len(zs))
	for _, z := range zs {
		id, _ := z.Member.(string)
		if plan.ValidID(id) {
			out = append(out, planCursor{score: int64(z.Score), id: id})
		}
	}
	return out
}

// PlanTasks lists a plan's tasks in plan order and the cursor of the next
// page ("" at the end); the cursor is a position in the plan's task list.
// One script call picks the page's ids and tenants (examining up to
// ScanMax entries with a filter) and one pipeline reads the records: two
// round trips. Returns plan.ErrNotFound.
func (r *Redis) PlanTasks(ctx context.Context, planID string, f plan.TaskFilter) ([]*task.Task, string, error) {
	op := "list tasks of plan " + planID
	pk, err := r.keys.planKeys(planID)
	if err != nil {
		return nil, "", fmt.Errorf("list plan tasks: %w", err)
	}
	pos, want, err := taskFilter(f)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", op, err)
	}
	limit := pageLimit(f.Limit)
	scan := limit
	if want != "" || f.TenantPrefix != "" {
		scan = r.scanMax
	}
	pp := r.pipeline()
	exists := pp.p.Exists(ctx, pk.plan)
	list := pp.eval(ctx, listPlanTasksScript, []string{pk.tasks, pk.counts}, pos, limit, scan, string(want), f.TenantPrefix)
	if err := pp.exec(ctx); err != nil {
		return nil, "", wrapErr(ctx, op, err)
	}
	if err := errors.Join(exists.Err(), list.cmd.Err()); err != nil {
		return nil, "", wrapErr(ctx, op, err)
	}
	if exists.Val() == 0 {
		return nil, "", fmt.Errorf("%s: %w", op, plan.ErrNotFound)
	}
	s, err := replySlice(op, list.cmd.Val())
	if err != nil || len(s) == 0 {
		return nil, "", fmt.Errorf("%s: unexpected script reply", op)
	}
	next := replyStr(s[0])
	ids := make([]string, 0, len(s)/2)
	tenants := make([]string, 0, len(s)/2)
	for i := 1; i+1 < len(s); i += 2 {
		ids = append(ids, replyStr(s[i]))
		tenants = append(tenants, replyStr(s[i+1]))
	}
	tasks, err := r.readTasks(ctx, op, ids, tenants)
	if err != nil {
		return nil, "", err
	}
	out := tasks[:0]
	for _, t := range tasks {
		if keepTask(t, want, f) {
			out = append(out, t)
		}
	}
	return out, next, nil
}

// taskFilter validates a task listing filter: the start position and the
// status the ledger must show.
func taskFilter(f plan.TaskFilter) (int64, task.Status, error) {
	var pos int64
	if f.Cursor != "" {
		n, err := strconv.ParseInt(f.Cursor, 10, 64)
		if err != nil || n < 0 {
			return 0, "", fmt.Errorf("%w: cursor %s", plan.ErrInvalid, task.Quote(f.Cursor))
		}
		pos = n
	}
	want := f.Status
	if want != "" && !want.Valid() {
		return 0, "", fmt.Errorf("%w: status %s", plan.ErrInvalid, task.Quote(string(want)))
	}
	if f.TenantPrefix != "" && !task.ValidTenantID(f.TenantPrefix) {
		return 0, "", fmt.Errorf("%w: tenant prefix %s", plan.ErrInvalid, task.Quote(f.TenantPrefix))
	}
	if f.Orphaned {
		if want != "" && want != task.StatusRunning {
			return 0, "", fmt.Errorf("%w: orphaned tasks are RUNNING, not %s", plan.ErrInvalid, want)
		}
		want = task.StatusRunning
	}
	return pos, want, nil
}

// keepTask reports whether t passes the filter's status (want; RUNNING for
// Orphaned) and tenant prefix.
func keepTask(t *task.Task, want task.Status, f plan.TaskFilter) bool {
	return (want == "" || t.Status == want) && strings.HasPrefix(t.TenantID, f.TenantPrefix)
}

// lookupTenants fills the "" entries of tenants (those of ids whose ledger
// entry lost the tenant) from the tasks' taskrefs, in one round trip (none
// when every tenant is known); a tenant stays "" when neither taskref holds
// it. bad is the error of
// the first id that is not a task id (its tenant stays ""); err a transport
// error.
func (r *Redis) lookupTenants(ctx context.Context, op string, ids, tenants []string) (bad, err error) {
	refs := map[int]refRead{}
	pp := r.c.Pipeline()
	for i, t := range tenants {
		if t != "" {
			continue
		}
		ref, err := r.keys.refRead(ctx, ids[i])
		if err != nil {
			if bad == nil {
				bad = err
			}
			continue
		}
		refs[i] = ref
		_ = pp.Process(ctx, ref.bucket)
		_ = pp.Process(ctx, ref.str)
	}
	if len(refs) == 0 {
		return bad, nil
	}
	if err := transportErr(pp.Exec(ctx)); err != nil {
		return bad, wrapErr(ctx, op, err)
	}
	for i, ref := range refs {
		tenants[i], _, _ = ref.tenant()
	}
	return bad, nil
}

// readTasks reads the records of tasks by id, in order, skipping missing
// ones. A tenant id "" is looked up through the taskref (one more round trip).
func (r *Redis) readTasks(ctx context.Context, op string, ids, tenants []string) ([]*task.Task, error) {
	bad, err := r.lookupTenants(ctx, op, ids, tenants)
	if err != nil {
		return nil, err
	}
	if bad != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, op, bad)
	}
	pp := r.c.Pipeline()
	keys := make([]string, len(ids))
	hs := make([]*redis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		if tenants[i] == "" {
			continue
		}
		k, err := r.keys.Task(tenants[i], id)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, op, err)
		}
		keys[i] = k
		hs[i] = pp.HGetAll(ctx, k)
	}
	if err := transportErr(pp.Exec(ctx)); err != nil {
		return nil, wrapErr(ctx, op, err)
	}
	out := make([]*task.Task, 0, len(ids))
	for i, h := range hs {
		if h == nil {
			continue
		}
		if err := h.Err(); err != nil {
			return nil, wrapErr(ctx, op, err)
		}
		t, err := decodeTask(keys[i], h.Val())
		if err != nil {
			return nil, err
		}
		if t != nil {
			out = append(out, t)
		}
	}
	return out, nil
}

// repairSettle is how long RepairCounts waits before it reads again the
// records its ledger entries are ahead of (a write in flight lands within
// it; a write Redis refused never does).
const repairSettle = 500 * time.Millisecond

// RepairCounts recomputes a plan's counts and ledger from its task records:
// it reads the task list and ledger (one round trip), the records in
// pipelines of Config.Batch, and rewrites the counts hash in one script that
// also derives the plan's status again (the records its ledger entries are
// ahead of read once more after repairSettle); changed reports that this
// derivation changed the plan's status (exactly one writer sees a change,
// as with a task write's PlanStatusChanged). Returns plan.ErrNotFound.
func (r *Redis) RepairCounts(ctx context.Context, planID string) (_ plan.Counts, changed bool, _ error) {
	op := "repair counts of plan " + planID
	pk, err := r.keys.planKeys(planID)
	if err != nil {
		return nil, false, fmt.Errorf("repair counts: %w", err)
	}
	pp := r.c.Pipeline()
	exists := pp.Exists(ctx, pk.plan)
	list := pp.LRange(ctx, pk.tasks, 0, -1)
	led := pp.HGetAll(ctx, pk.counts)
	if err := transportErr(pp.Exec(ctx)); err != nil {
		return nil, false, wrapErr(ctx, op, err)
	}
	if err := errors.Join(exists.Err(), list.Err(), led.Err()); err != nil {
		return nil, false, wrapErr(ctx, op, err)
	}
	if exists.Val() == 0 {
		return nil, false, fmt.Errorf("%s: %w", op, plan.ErrNotFound)
	}
	ids := list.Val()
	tenants := make([]string, len(ids))
	for i, id := range ids {
		if e, ok := parseLedger(led.Val()[ledgerPrefix+id]); ok && task.ValidTenantID(e.TenantID) {
			tenants[i] = e.TenantID
		}
	}
	entries := make([]ledger, len(ids))
	for start := 0; start < len(ids); start += r.cfg.Batch {
		end := min(start+r.cfg.Batch, len(ids))
		if err := r.recount(ctx, op, ids[start:end], tenants[start:end], entries[start:end]); err != nil {
			return nil, false, err
		}
	}
	// A ledger entry already ahead of its recounted record is a write in
	// flight (its counts move landed first: sent again after a
	// {2,'fixed'} answer, or the record's Cluster node slower) or one Redis
	// refused whose writer never undid the move (it died). Those records are
	// read again after repairSettle: a write in flight has landed by then.
	var suspects []int
	for i, id := range ids {
		if pre, ok := parseLedger(led.Val()[ledgerPrefix+id]); ok && (pre.Seq > entries[i].Seq || (pre.Seq == entries[i].Seq && pre.Fence > entries[i].Fence)) {
			suspects = append(suspects, i)
		}
	}
	if len(suspects) > 0 {
		select {
		case <-time.After(repairSettle):
		case <-ctx.Done():
			return nil, false, wrapErr(ctx, op, ctx.Err())
		}
		sIDs, sTenants, sEntries := make([]string, len(suspects)), make([]string, len(suspects)), make([]ledger, len(suspects))
		for j, i := range suspects {
			sIDs[j], sTenants[j] = ids[i], tenants[i]
		}
		if err := r.recount(ctx, op, sIDs, sTenants, sEntries); err != nil {
			return nil, false, err
		}
		for j, i := range suspects {
			entries[i] = sEntries[j]
		}
	}
	args := []any{formatTime(r.now()), r.ttlMs(), plan.ReasonFailureThreshold}
	for i, id := range ids {
		args = append(args, id, entries[i].String(), led.Val()[ledgerPrefix+id])
	}
	v, err := r.run(ctx, repairPlanCountsScript, []string{pk.counts, pk.plan, pk.tasks}, args...)
	if err != nil {
		return nil, false, wrapErr(ctx, op, err)
	}
	s, err := replySlice(op, v)
	if err != nil {
		return nil, false, err
	}
	if len(s) < 1+len(task.Statuses) {
		return nil, false, fmt.Errorf("%s: %w", op, plan.ErrNotFound)
	}
	counts := newCounts()
	for i, st := range task.Statuses {
		counts[st] = int(replyInt(s[1+i]))
	}
	changed = len(s) > 1+len(task.Statuses) && replyInt(s[1+len(task.Statuses)]) == 1
	// The status indexes of the search follow the repaired ledger.
	return counts, changed, r.reindexPlan(ctx, op, planID)
}

// recount fills entries with the ledger entries of one batch of task records.
func (r *Redis) recount(ctx context.Context, op string, ids, tenants []string, entries []ledger) error {
	// A bad id, or a taskref holding no tenant id, keeps the "" tenant: its
	// entry counts nowhere.
	var unknown []int
	for i, t := range tenants {
		if t == "" {
			unknown = append(unknown, i)
		}
	}
	if _, err := r.lookupTenants(ctx, op, ids, tenants); err != nil {
		return err
	}
	for _, i := range unknown {
		if !task.ValidTenantID(tenants[i]) {
			tenants[i] = ""
		}
	}
	pp := r.c.Pipeline()
	recs := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		entries[i] = ledger{TenantID: tenants[i]}
		if k, err := r.keys.Task(tenants[i], id); err == nil {
			recs[i] = pp.HMGet(ctx, k, fStatus, fSeq, fFence, fOwner)
		}
	}
	if err := transportErr(pp.Exec(ctx)); err != nil {
		return wrapErr(ctx, op, err)
	}
	for i, c := range recs {
		if c == nil {
			continue
		}
		if err := c.Err(); err != nil {
			return wrapErr(ctx, op, err)
		}
		v := c.Val()
		st := task.Status(replyStr(v[0]))
		if !st.Valid() {
			continue // missing (or unreadable) record: counted nowhere
		}
		entries[i].Status = st
		entries[i].Seq = replyInt(v[1])
		entries[i].Fence = replyInt(v[2])
		entries[i].Owner = replyStr(v[3])
	}
	return nil
}
