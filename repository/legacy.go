package repository

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/task"
)

// StorageLayout is the layout of the Redis keys this version writes, stamped
// on its instance record ("storageLayout") so that instances of other
// versions sharing the Redis can tell:
//
//	1  versions before the field: a tenant's current task is the STRING
//	   {p}index:tenant:{t}, a task's tenant the STRING {p}taskref:{id}
//	2  the tenant's current task is the newest entry of its history, a
//	   task's tenant a field of its taskref bucket (keys.go); neither
//	   STRING is written but by LegacyKeys
//
// A version reads every layout up to its own.
const StorageLayout = 2

// LegacyKeys says when plan creation also writes the keys that instances
// of layout 1 read (the tenant index and taskref STRINGs): one SET each a
// task, and a rollback puts the index back as layout 1 did. Without them
// such an instance, during a rolling upgrade or after a downgrade, answers
// a tenant's task before the newest and 404 for a task by id that a newer
// one created. Whenever the store turns them on (its first listing of
// instances in mode on, or the first that shows an older instance in mode
// auto) it backfills them for the tasks created while they were off
// (BackfillLegacyKeys, in a goroutine of its own).
type LegacyKeys string

// The LegacyKeys modes.
const (
	// LegacyKeysOff (and ""): never. The store's default.
	LegacyKeysOff LegacyKeys = "off"
	// LegacyKeysAuto: while the last listing of instances (Instances,
	// which every coordinator's heartbeat makes) showed a live instance of
	// an older layout, and from the store's start until its first listing.
	// cmd/deploycoord's default (DEPLOYCOORD_LEGACY_KEYS).
	LegacyKeysAuto LegacyKeys = "auto"
	// LegacyKeysOn: always.
	LegacyKeysOn LegacyKeys = "on"
)

// ParseLegacyKeys parses "auto", "on" or "off".
func ParseLegacyKeys(s string) (LegacyKeys, error) {
	switch m := LegacyKeys(s); m {
	case LegacyKeysAuto, LegacyKeysOn, LegacyKeysOff:
		return m, nil
	}
	return "", fmt.Errorf("%w: legacy keys mode %s: want auto, on or off", ErrConfig, task.Quote(s))
}

// legacyKeys is the store's LegacyKeys state: whether creations write the
// layout-1 keys now, and whether they have been backfilled since.
type legacyKeys struct {
	auto bool
	on   atomic.Bool
	// filled: a backfill ran, or runs, since the keys were last turned on.
	filled atomic.Bool
}

func newLegacyKeys(m LegacyKeys) *legacyKeys {
	l := &legacyKeys{auto: m == LegacyKeysAuto}
	l.on.Store(m == LegacyKeysAuto || m == LegacyKeysOn)
	return l
}

// observe follows a listing of instances (mode auto): on while one that is
// live has an older layout. It reports whether a backfill should start: the
// keys are on and none ran since they were last turned on.
func (l *legacyKeys) observe(insts []task.Instance) (backfill bool) {
	if l.auto {
		older := false
		for _, in := range insts {
			if !in.Gone && in.StorageLayout < StorageLayout {
				older = true
				break
			}
		}
		l.on.Store(older)
	}
	if !l.on.Load() {
		l.filled.Store(false)
		return false
	}
	return l.filled.CompareAndSwap(false, true)
}

// observeInstances follows a listing of instances: the legacy keys' mode,
// and a backfill when they were turned on.
func (r *Redis) observeInstances(insts []task.Instance) {
	if r.legacy.observe(insts) {
		go r.backfillLegacy()
	}
}

// LegacyKeysOn reports whether plan creations write the keys of layout 1
// now (Config.LegacyKeys).
func (r *Redis) LegacyKeysOn() bool { return r.legacy.on.Load() }

// legacyIndex is a task's tenant index STRING of layout 1,
// {p}index:tenant:{t}: its history key without the suffix.
func (k taskKeys) legacyIndex() string { return k.history[:len(k.history)-len(suffixHistory)] }

// writeLegacy adds to a creation pipeline the layout-1 keys of a new task:
// the tenant's index (its newest task) and the task's taskref STRING.
func (r *Redis) writeLegacy(ctx context.Context, pp *pipe, k taskKeys, t *task.Task) {
	pp.p.Set(ctx, k.legacyIndex(), t.ID, r.cfg.TTL)
	ref, _ := r.keys.TaskRefString(t.ID)
	pp.p.Set(ctx, ref, t.TenantID, r.cfg.TTL)
}

// rollbackLegacy adds to a rollback pipeline, after the history's ZREM, the
// undoing of writeLegacy: the taskref STRING goes, and an index naming the
// task names the tenant's newest task left (legacy_index.lua).
func (r *Redis) rollbackLegacy(ctx context.Context, pp *pipe, k taskKeys) {
	ref, _ := r.keys.TaskRefString(k.id)
	pp.p.Del(ctx, ref)
	pp.eval(ctx, legacyIndexScript, []string{k.legacyIndex(), k.history}, k.id)
}

// LegacyBackfill is what a backfill of the layout-1 keys did.
type LegacyBackfill struct {
	// Tenants is how many tenant index STRINGs it wrote (those that did
	// not name their history's newest task).
	Tenants int
	// Tasks is how many taskref STRINGs it wrote (one for every task of the
	// taskref buckets).
	Tasks int
	// Skipped: another instance began one within legacyBackfillGap.
	Skipped bool
}

// legacyBackfillGap is how long a backfill's marker key keeps other
// instances from starting one.
const legacyBackfillGap = 10 * time.Minute

// BackfillLegacyKeys writes the keys of storage layout 1 for every task the
// store's prefix holds: each tenant index STRING names its history's newest
// task, each task of the taskref buckets gets its taskref STRING — what
// creations made while the store did not write them lack. It SCANs the
// keyspace (every master of a cluster) for the histories and the buckets,
// 1 000 keys a step, and writes in pipelines of at most as many: a few
// seconds for 100 000 tasks. Safe to run beside creations (an index is
// moved by a script, in the tenant's slot) and to run again.
func (r *Redis) BackfillLegacyKeys(ctx context.Context) (LegacyBackfill, error) {
	const op = "backfill legacy keys"
	var tenants, tasks atomic.Int64
	ttl := r.ttlMs()
	err := r.scanKeys(ctx, r.keys.prefix+"index:tenant:{*}"+suffixHistory, func(keys []string) error {
		pp := r.pipeline()
		evals := make([]*evalCmd, 0, len(keys))
		for _, h := range keys {
			evals = append(evals, pp.eval(ctx, legacyIndexScript, []string{strings.TrimSuffix(h, suffixHistory), h}, "", ttl))
		}
		if err := pp.exec(ctx); err != nil {
			return err
		}
		for _, e := range evals {
			n, err := e.cmd.Int64()
			if err != nil {
				return err
			}
			tenants.Add(n)
		}
		return nil
	})
	if err == nil {
		err = r.scanKeys(ctx, r.keys.prefix+"taskrefs:{*}", func(buckets []string) error {
			n, err := r.backfillTaskRefs(ctx, buckets)
			tasks.Add(n)
			return err
		})
	}
	res := LegacyBackfill{Tenants: int(tenants.Load()), Tasks: int(tasks.Load())}
	return res, wrapErr(ctx, op, err)
}

// backfillTaskRefs writes the taskref STRING of every task of buckets.
func (r *Redis) backfillTaskRefs(ctx context.Context, buckets []string) (int64, error) {
	pp := r.c.Pipeline()
	hs := make([]*redis.MapStringStringCmd, len(buckets))
	for i, b := range buckets {
		hs[i] = pp.HGetAll(ctx, b)
	}
	if _, err := pp.Exec(ctx); err != nil {
		return 0, err
	}
	var n int64
	pp = r.c.Pipeline()
	for _, h := range hs {
		for taskID, tenantID := range h.Val() {
			ref, err := r.keys.TaskRefString(taskID)
			if err != nil {
				continue // not a task id: not ours to copy
			}
			pp.Set(ctx, ref, tenantID, r.cfg.TTL)
			if n++; pp.Len() >= 1000 {
				if _, err := pp.Exec(ctx); err != nil {
					return n, err
				}
			}
		}
	}
	if pp.Len() > 0 {
		if _, err := pp.Exec(ctx); err != nil {
			return n, err
		}
	}
	return n, nil
}

// scanKeys calls each with the keys matching match, a SCAN step at a time,
// on every master of a cluster (concurrently: each must be safe for that).
func (r *Redis) scanKeys(ctx context.Context, match string, each func(keys []string) error) error {
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, match, 1000).Result()
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				if err := each(keys); err != nil {
					return err
				}
			}
			if next == 0 {
				return nil
			}
			cursor = next
		}
	}
	if cc, ok := r.c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	}
	return scan(ctx, r.c)
}

// backfillLegacy runs a backfill after the keys were turned on (Instances),
// unless another instance began one within legacyBackfillGap, and reports it
// to Config.OnLegacyBackfill. A backfill that fails is tried again at the
// next listing of instances.
func (r *Redis) backfillLegacy() {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	marker := r.keys.LegacyBackfill()
	var res LegacyBackfill
	ok, err := r.c.SetNX(ctx, marker, r.now().UTC().Format(time.RFC3339), legacyBackfillGap).Result()
	switch {
	case err != nil:
		err = wrapErr(ctx, "backfill legacy keys: take "+marker, err)
	case !ok:
		res.Skipped = true
	default:
		res, err = r.BackfillLegacyKeys(ctx)
	}
	if err != nil {
		r.legacy.filled.Store(false)
		if ok {
			r.c.Del(context.WithoutCancel(ctx), marker)
		}
	}
	if f := r.cfg.OnLegacyBackfill; f != nil {
		f(res, err)
	}
}
