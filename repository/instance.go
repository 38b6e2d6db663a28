package repository

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/task"
)

// InstancesMax is the most instances Instances lists (the newest).
const InstancesMax = 1000

// Field names of the instance record (HASH {p}instance:{<id>}) beyond the shared ones.
const (
	fAddr         = "addr"
	fVersion      = "version"
	fLastSeen     = "lastSeen"
	fTasksRunning = "tasksRunning"
	fSingle       = "singleInstance"
	fLayout       = "storageLayout"
)

func checkRegistration(inst task.Instance, ttl time.Duration) error {
	if err := checkInstanceID(inst.ID); err != nil {
		return fmt.Errorf("register instance: %w", err)
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: register instance %s: ttl %s must be at least 1ms", task.ErrInvalid, inst.ID, ttl)
	}
	return nil
}

func instanceRecord(inst task.Instance) []any {
	return []any{
		fID, inst.ID, fAddr, inst.Addr, fVersion, inst.Version,
		fStartedAt, formatTime(inst.StartedAt), fLastSeen, formatTime(inst.LastSeen),
		fTasksRunning, strconv.Itoa(inst.TasksRunning), fSingle, formatBool(inst.SingleInstance),
		fLayout, strconv.Itoa(StorageLayout),
	}
}

func decodeInstance(key string, m map[string]string) (task.Instance, error) {
	r := &fieldReader{key: key, m: m}
	inst := task.Instance{
		ID: r.str(fID), Addr: r.str(fAddr), Version: r.str(fVersion),
		StartedAt: r.time(fStartedAt), LastSeen: r.time(fLastSeen),
		TasksRunning: r.int(fTasksRunning), SingleInstance: r.bool(fSingle),
		StorageLayout: 1, // versions before the field
	}
	if _, ok := m[fLayout]; ok {
		inst.StorageLayout = r.int(fLayout)
	}
	return inst, r.err
}

// RegisterInstance records inst's heartbeat: its record for ttl and its
// last-seen time in the instances index, pruning instances not seen for
// InstancePruneAfter. inst.LastSeen zero means now (Config.Clock). One round
// trip (a pipeline). Returns an error wrapping task.ErrInvalid for a bad id
// or a ttl under 1ms.
func (r *Redis) RegisterInstance(ctx context.Context, inst task.Instance, ttl time.Duration) error {
	if err := checkRegistration(inst, ttl); err != nil {
		return err
	}
	op := "register instance " + inst.ID
	k, _ := r.keys.Instance(inst.ID)
	now := r.now()
	if inst.LastSeen.IsZero() {
		inst.LastSeen = now
	}
	idx := r.keys.Instances()
	pp := r.c.Pipeline()
	pp.HSet(ctx, k, instanceRecord(inst)...)
	pp.PExpire(ctx, k, ttl)
	pp.ZAdd(ctx, idx, redis.Z{Score: float64(inst.LastSeen.UnixMilli()), Member: inst.ID})
	pp.ZRemRangeByScore(ctx, idx, "-inf", "("+strconv.FormatInt(now.Add(-InstancePruneAfter).UnixMilli(), 10))
	return wrapErr(ctx, op, execAll(ctx, pp))
}

// execAll sends a pipeline and returns its first error, reply errors
// included (redis.Nil excepted).
func execAll(ctx context.Context, pp redis.Pipeliner) error {
	cmds, err := pp.Exec(ctx)
	if err := transportErr(cmds, err); err != nil {
		return err
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil && err != redis.Nil {
			return err
		}
	}
	return nil
}

// DeregisterInstance removes a live instance's record (a clean shutdown).
// Its entry in the instances index stays, with now as its last-seen time,
// until it is pruned. One round trip.
func (r *Redis) DeregisterInstance(ctx context.Context, id string) error {
	k, err := r.keys.Instance(id)
	if err != nil {
		return fmt.Errorf("deregister instance: %w", err)
	}
	pp := r.c.Pipeline()
	pp.Del(ctx, k)
	pp.ZAddXX(ctx, r.keys.Instances(), redis.Z{Score: float64(r.now().UnixMilli()), Member: id})
	return wrapErr(ctx, "deregister instance "+id, execAll(ctx, pp))
}

// Instances lists the instances seen within InstancePruneAfter (at most
// InstancesMax), newest first. An instance whose record expired or was
// deregistered is listed with its id and last-seen time only. Two round
// trips: ZREVRANGE, then the records in one pipeline.
func (r *Redis) Instances(ctx context.Context) ([]task.Instance, error) {
	const op = "list instances"
	zs, err := r.c.ZRevRangeWithScores(ctx, r.keys.Instances(), 0, InstancesMax-1).Result()
	if err != nil {
		return nil, wrapErr(ctx, op, err)
	}
	out := make([]task.Instance, 0, len(zs))
	keys := make([]string, 0, len(zs))
	for _, z := range zs {
		id, _ := z.Member.(string)
		k, err := r.keys.Instance(id)
		if err != nil {
			continue // not ours: the index holds only valid ids
		}
		out = append(out, task.Instance{ID: id, LastSeen: time.UnixMilli(int64(z.Score)).UTC(), Gone: true})
		keys = append(keys, k)
	}
	if len(out) > 0 {
		if err := r.readInstances(ctx, op, out, keys); err != nil {
			return nil, err
		}
	}
	r.observeInstances(out)
	return out, nil
}

// readInstances fills out (listed from the index, Gone) with the records
// at keys that still exist, in one pipeline.
func (r *Redis) readInstances(ctx context.Context, op string, out []task.Instance, keys []string) error {
	pp := r.c.Pipeline()
	hs := make([]*redis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		hs[i] = pp.HGetAll(ctx, k)
	}
	if err := transportErr(pp.Exec(ctx)); err != nil {
		return wrapErr(ctx, op, err)
	}
	for i, h := range hs {
		if err := h.Err(); err != nil {
			return wrapErr(ctx, op, err)
		}
		if len(h.Val()) == 0 {
			continue
		}
		inst, err := decodeInstance(keys[i], h.Val())
		if err != nil {
			return err
		}
		inst.ID = out[i].ID
		inst.Gone = false
		if inst.LastSeen.IsZero() {
			inst.LastSeen = out[i].LastSeen
		}
		out[i] = inst
	}
	return nil
}

// ---- memory ----------------------------------------------------------------

type memInstance struct {
	inst task.Instance
	// expires is when the record lapses; zero once deregistered.
	expires time.Time
}

// RegisterInstance records inst's heartbeat for ttl, as the Redis store does.
func (m *Memory) RegisterInstance(_ context.Context, inst task.Instance, ttl time.Duration) error {
	if err := checkRegistration(inst, ttl); err != nil {
		return err
	}
	now := m.cfg.Clock()
	if inst.LastSeen.IsZero() {
		inst.LastSeen = now
	}
	inst.StartedAt, inst.LastSeen = utc(inst.StartedAt), utc(inst.LastSeen)
	inst.StorageLayout = StorageLayout
	m.mu.Lock()
	defer m.mu.Unlock()
	m.instances[inst.ID] = &memInstance{inst: inst, expires: now.Add(ttl)}
	for id, mi := range m.instances {
		if mi.inst.LastSeen.Before(now.Add(-InstancePruneAfter)) {
			delete(m.instances, id)
		}
	}
	return nil
}

// DeregisterInstance drops a live instance's record; it stays listed with
// its id and now as last-seen time.
func (m *Memory) DeregisterInstance(_ context.Context, id string) error {
	if err := checkInstanceID(id); err != nil {
		return fmt.Errorf("deregister instance: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if mi := m.instances[id]; mi != nil {
		mi.inst = task.Instance{ID: id, LastSeen: utc(m.cfg.Clock()).Truncate(time.Millisecond), Gone: true}
		mi.expires = time.Time{}
	}
	return nil
}

// Instances lists the instances seen within InstancePruneAfter, newest
// first, as the Redis store does.
func (m *Memory) Instances(_ context.Context) ([]task.Instance, error) {
	now := m.cfg.Clock()
	m.mu.Lock()
	out := make([]task.Instance, 0, len(m.instances))
	for _, mi := range m.instances {
		inst := mi.inst
		if !now.Before(mi.expires) {
			// As in Redis: the id and the index's millisecond score only.
			inst = task.Instance{ID: inst.ID, LastSeen: inst.LastSeen.Truncate(time.Millisecond), Gone: true}
		}
		out = append(out, inst)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b task.Instance) int {
		if c := b.LastSeen.Compare(a.LastSeen); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	return out[:min(len(out), InstancesMax)], nil
}
