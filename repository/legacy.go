package repository

import (
	"context"
	"fmt"
	"sync/atomic"

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
// such an instance, during a rolling upgrade, answers a tenant's task
// before the newest and 404 for a task by id that a newer one created.
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
	// LegacyKeysOn: always (before a downgrade to a version of layout 1).
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
// layout-1 keys now.
type legacyKeys struct {
	auto bool
	on   atomic.Bool
}

func newLegacyKeys(m LegacyKeys) *legacyKeys {
	l := &legacyKeys{auto: m == LegacyKeysAuto}
	l.on.Store(m == LegacyKeysAuto || m == LegacyKeysOn)
	return l
}

// observe follows a listing of instances (mode auto): on while one that is
// live has an older layout.
func (l *legacyKeys) observe(insts []task.Instance) {
	if !l.auto {
		return
	}
	older := false
	for _, in := range insts {
		if !in.Gone && in.StorageLayout < StorageLayout {
			older = true
			break
		}
	}
	l.on.Store(older)
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
