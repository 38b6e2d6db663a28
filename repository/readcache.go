package repository

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/task"
)

// The tenant query (TaskByTenant) keeps, for tenants whose task was not
// RUNNING when read, the decoded record and checkpoint with the task's
// version: the record fields that every write to a task record changes —
// seq and writeId (write_task.lua: every stage transition, checkpoint and
// takeover), heartbeatAt (beat_task.lua), pauseRequested and
// cancelRequested (request_task.lua). A later query reads, in one
// pipeline, the tenant's index (its history's newest entry) and those five
// fields (HMGET) instead of the whole record and the checkpoint; when the
// index still names the task and
// the five fields are the ones kept, the kept record is the stored one and
// is answered (copied). Nothing is answered unchecked: every answer stands
// on a read of Redis made by the query itself, so it is never staler than
// an answer read in full. The checkpoint is written only by write_task.lua,
// which changes seq and writeId with it.
//
// A RUNNING task changes too often (heartbeats, stages) for the check to
// pay; its tenant keeps only the id (the hint of hints.go).

// versionFields are the record fields whose values make a task's version.
var versionFields = [...]string{fStatus, fSeq, fWriteID, fHeartbeatAt, fPause, fCancel}

// taskVersion is the values of versionFields of a record.
type taskVersion [len(versionFields)]string

// versionOf returns the version of a record read with HGETALL.
func versionOf(rec map[string]string) *taskVersion {
	var v taskVersion
	for i, f := range versionFields {
		v[i] = rec[f]
	}
	return &v
}

// matches reports whether an HMGET of versionFields read v. A missing
// record (status absent) never matches.
func (v *taskVersion) matches(vals []any) bool {
	if len(vals) != len(v) || vals[0] == nil {
		return false
	}
	for i, x := range vals {
		s, _ := x.(string)
		if s != v[i] {
			return false
		}
	}
	return true
}

// TaskByTenant returns the tenant's current task (the newest created for it:
// the newest entry of its history) and its checkpoint (nil if none).
// Returns task.ErrNotFound. One round trip when the store remembers the task
// the history named at the tenant's last query (Config.TenantHints) and it
// still names it: the newest entry of the history with, for a task kept
// with its version, HMGET of the version (the kept record answers when it
// matches), otherwise HGETALL of the record and GET of the checkpoint. Two
// round trips otherwise.
func (r *Redis) TaskByTenant(ctx context.Context, tenantID string) (*task.Task, *checkpoint.Checkpoint, error) {
	op := "get task of tenant " + tenantID
	k, err := r.keys.History(tenantID)
	if err != nil {
		return nil, nil, fmt.Errorf("get task of tenant: %w", err)
	}
	hint := r.hints.entry(tenantID)
	g := newestCmd(ctx, k)
	cmds := append(make([]redis.Cmder, 0, 3), g)
	var tk taskKeys
	var h *redis.MapStringStringCmd
	var c *redis.StringCmd
	var vc *redis.SliceCmd
	if hint.id != "" {
		tk, _ = r.keys.taskKeys(tenantID, hint.id)
		if hint.ver != nil {
			args := make([]any, 0, 2+len(versionFields))
			args = append(args, "hmget", tk.task)
			for _, f := range versionFields {
				args = append(args, f)
			}
			vc = redis.NewSliceCmd(ctx, args...)
			cmds = append(cmds, vc)
		} else {
			h, c = redis.NewMapStringStringCmd(ctx, "hgetall", tk.task), redis.NewStringCmd(ctx, "get", tk.ckpt)
			cmds = append(cmds, h, c)
		}
	}
	if err := r.readPipe(ctx, cmds...); err != nil {
		return nil, nil, wrapErr(ctx, op, err)
	}
	id, err := newestOf(g)
	switch {
	case errors.Is(err, redis.Nil):
		r.hints.forget(tenantID)
		return nil, nil, fmt.Errorf("%s: %w", op, task.ErrNotFound)
	case err != nil:
		return nil, nil, wrapErr(ctx, op, err)
	case hint.id != "" && id == hint.id && vc != nil:
		if vals, err := vc.Result(); err == nil && hint.ver.matches(vals) {
			return copyTaskOut(hint.t), cloneCheckpoint(hint.c), nil
		}
		// The task changed (or is gone): read it again, below.
	case hint.id != "" && id == hint.id:
		t, ck, err := decodeLoaded(ctx, op, tk, h, c)
		if err == nil {
			r.keepTask(tenantID, id, h.Val(), t, ck)
		}
		return t, ck, err
	case !task.ValidID(id):
		r.hints.forget(tenantID)
		return nil, nil, fmt.Errorf("%w: %s holds %s, not a task id", ErrCorrupt, k, task.Quote(id))
	}
	tk, err = r.keys.taskKeys(tenantID, id)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", op, err)
	}
	h, c = redis.NewMapStringStringCmd(ctx, "hgetall", tk.task), redis.NewStringCmd(ctx, "get", tk.ckpt)
	if err := r.readPipe(ctx, h, c); err != nil {
		return nil, nil, wrapErr(ctx, op, err)
	}
	t, ck, err := decodeLoaded(ctx, op, tk, h, c)
	switch {
	case err == nil:
		r.keepTask(tenantID, id, h.Val(), t, ck)
	case errors.Is(err, task.ErrNotFound):
		r.hints.forget(tenantID)
	default:
		r.hints.put(tenantID, id)
	}
	return t, ck, err
}

// keepTask remembers the task the tenant's history named, read as rec and
// decoded as t and ck: with its record and version unless it is RUNNING.
func (r *Redis) keepTask(tenantID, id string, rec map[string]string, t *task.Task, ck *checkpoint.Checkpoint) {
	if t.Status == task.StatusRunning {
		r.hints.keep(tenantID, hintEntry{id: id}, true)
		return
	}
	r.hints.keep(tenantID, hintEntry{id: id, ver: versionOf(rec), t: copyTaskOut(t), c: cloneCheckpoint(ck)}, true)
}

// cloneCheckpoint returns a copy of c (nil for nil).
func cloneCheckpoint(c *checkpoint.Checkpoint) *checkpoint.Checkpoint {
	if c == nil {
		return nil
	}
	cp := c.Clone()
	return &cp
}

// newestCmd is ZREVRANGE history 0 0: the tenant's current task, the newest
// entry of its history (highest score, among ties the greatest id).
func newestCmd(ctx context.Context, history string) *redis.StringSliceCmd {
	return redis.NewStringSliceCmd(ctx, "zrevrange", history, 0, 0)
}

// newestOf returns the id newestCmd read, redis.Nil when the history is
// empty or missing.
func newestOf(c *redis.StringSliceCmd) (string, error) {
	ids, err := c.Result()
	switch {
	case err != nil:
		return "", err
	case len(ids) == 0:
		return "", redis.Nil
	}
	return ids[0], nil
}
