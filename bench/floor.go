package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The floor section ("-sections floor") asks what a task with the
// guarantees deploycoord keeps could cost Redis at the least, beside asynq
// in the same run: a design reduced to those guarantees and nothing else,
// written straight against go-redis (no coordinator, no repository), on one
// Redis (no Cluster slots to respect: the plan counts move in the task's own
// script). Per task:
//
//   - creation, in pipelines of 500 tasks: the record (HSET of the fields a
//     created record of deploycoord has), the tenant's history (ZADD: "what
//     happened to tenant X" from any instance), the queue (one RPUSH per
//     pipeline) and the plan's PENDING count (one HINCRBY per pipeline);
//   - claim: LPOP of up to 64 entries at a time;
//   - start, one script: the tenant lock (SET NX PX), the fencing token
//     (INCR), the record checked PENDING and written RUNNING with the fence,
//     a timeline entry, the counts moved;
//   - final write, one script: the lock checked and deleted, the record's
//     seq and fence checked, the record written COMPLETED, the checkpoint,
//     three timeline entries, the counts moved;
//   - the event feed: one XADD per batch of 64 tasks.
//
// Starts and final writes go in pipelines of 64 (the coordinator's group
// commit shares round trips the same way), from -concurrency/64 goroutines.
// Left out, so the figure is a floor and not a design: TTLs (memory
// bounded), per-status search indexes, the permits of shared plans, delta
// writes, the ledger that keeps counts exact across Cluster slots, retries.
// The section checks the plan's counts and every record at the end.

// floorStart is the start script of the floor design.
// KEYS: record, lock, fence, timeline, counts. ARGV: lock value, lease ms,
// instance, now ms, timeline entry.
var floorStart = redis.NewScript(`
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {0, 'locked'} end
local fence = redis.call('INCR', KEYS[3])
local rec = redis.call('HMGET', KEYS[1], 'status', 'seq')
if rec[1] ~= 'PENDING' then redis.call('DEL', KEYS[2]) return {0, rec[1] or 'missing'} end
local seq = tonumber(rec[2]) + 1
redis.call('HSET', KEYS[1], 'status', 'RUNNING', 'seq', seq, 'fence', fence, 'owner', ARGV[3], 'startedAt', ARGV[4], 'updatedAt', ARGV[4])
redis.call('RPUSH', KEYS[4], ARGV[5])
redis.call('HINCRBY', KEYS[5], 'PENDING', -1)
redis.call('HINCRBY', KEYS[5], 'RUNNING', 1)
return {1, seq, fence}
`)

// floorFinal is the final write of the floor design.
// KEYS: record, lock, checkpoint, timeline, counts. ARGV: lock value, fence,
// seq, now ms, checkpoint, timeline entries...
var floorFinal = redis.NewScript(`
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return {0, 'lock'} end
local rec = redis.call('HMGET', KEYS[1], 'seq', 'fence')
if rec[1] ~= ARGV[3] or tonumber(rec[2]) > tonumber(ARGV[2]) then return {0, 'seq'} end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'status', 'COMPLETED', 'seq', tonumber(ARGV[3]) + 1, 'finishedAt', ARGV[4], 'updatedAt', ARGV[4], 'currentStage', 's00')
redis.call('SET', KEYS[3], ARGV[5])
redis.call('RPUSH', KEYS[4], unpack(ARGV, 6))
redis.call('HINCRBY', KEYS[5], 'RUNNING', -1)
redis.call('HINCRBY', KEYS[5], 'COMPLETED', 1)
return {1}
`)

const floorBatch = 64

// runFloor runs n tasks of the floor design on a fresh prefix and checks
// them all COMPLETED and the counts exact.
func (e *env) runFloor(ctx context.Context, n int) (planRun, error) {
	p := newPrefix("floor")
	defer func() { _ = e.reset(context.Background(), p) }()
	c := e.client
	for _, sc := range []*redis.Script{floorStart, floorFinal} {
		if err := sc.Load(ctx, c).Err(); err != nil {
			return planRun{}, err
		}
	}
	planID := "plan-" + randHex(4)
	counts, queue, feed := p+"counts:{"+planID+"}", p+"queue:{"+planID+"}", p+"feed"
	rec := func(i int) string { return p + "task:{" + tenantID(i) + "}:" + strconv.Itoa(i) }
	stop, err := e.meterRedis(ctx)
	if err != nil {
		return planRun{}, err
	}
	start := time.Now()
	for lo := 0; lo < n; lo += 500 {
		hi := min(lo+500, n)
		pp := c.Pipeline()
		ids := make([]any, 0, hi-lo)
		now := strconv.FormatInt(time.Now().UnixMilli(), 10)
		for i := lo; i < hi; i++ {
			t := tenantID(i)
			pp.HSet(ctx, rec(i), "id", strconv.Itoa(i), "tenantId", t, "planId", planID, "status", "PENDING",
				"seq", "0", "fence", "0", "attempt", "1", "totalStages", "1", "createdAt", now, "updatedAt", now,
				"params", `{"version":"1.2.3"}`, "pipeline", "standard-deploy", "stages", `[{"name":"s00","kind":"noop"}]`)
			pp.ZAdd(ctx, p+"hist:{"+t+"}", redis.Z{Score: float64(i), Member: strconv.Itoa(i)})
			ids = append(ids, strconv.Itoa(i))
		}
		pp.RPush(ctx, queue, ids...)
		pp.HIncrBy(ctx, counts, "PENDING", int64(hi-lo))
		if _, err := pp.Exec(ctx); err != nil {
			return planRun{}, fmt.Errorf("floor: create: %w", err)
		}
	}
	created := time.Now()

	var failed atomic.Pointer[error]
	fail := func(err error) { failed.CompareAndSwap(nil, &err) }
	var wg sync.WaitGroup
	for range max(1, e.cfg.Concurrency/floorBatch) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for failed.Load() == nil {
				ids, err := c.LPopCount(ctx, queue, floorBatch).Result()
				if err == redis.Nil || (err == nil && len(ids) == 0) {
					return
				}
				if err != nil {
					fail(fmt.Errorf("floor: claim: %w", err))
					return
				}
				if err := floorRun(ctx, c, p, counts, feed, rec, ids); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	done := time.Now()
	use, err := stop(ctx)
	if err != nil {
		return planRun{}, err
	}
	if f := failed.Load(); f != nil {
		return planRun{}, *f
	}
	got, err := c.HGetAll(ctx, counts).Result()
	if err != nil {
		return planRun{}, err
	}
	if got["COMPLETED"] != strconv.Itoa(n) || got["PENDING"] != "0" || got["RUNNING"] != "0" {
		return planRun{}, fmt.Errorf("floor: counts %v, want %d COMPLETED", got, n)
	}
	pp := c.Pipeline()
	sts := make([]*redis.StringCmd, n)
	for i := range n {
		sts[i] = pp.HGet(ctx, rec(i), "status")
	}
	if _, err := pp.Exec(ctx); err != nil {
		return planRun{}, err
	}
	for i, s := range sts {
		if s.Val() != "COMPLETED" {
			return planRun{}, fmt.Errorf("floor: task %d is %q", i, s.Val())
		}
	}
	return planRun{create: created.Sub(start), run: done.Sub(created), total: done.Sub(start), cpu: use.cpu, cmds: use.cmds, instr: use.instr}, nil
}

// floorRun starts the tasks ids in one pipeline, runs their noop stage and
// finishes them in another, and appends their events to the feed.
func floorRun(ctx context.Context, c *redis.Client, p, counts, feed string, rec func(int) string, ids []string) error {
	const instance = "bench-1"
	keys := func(id string) (idx int, record, lock, timeline string) {
		i, _ := strconv.Atoi(id)
		t := tenantID(i)
		return i, rec(i), p + "lock:{" + t + "}", rec(i) + ":timeline"
	}
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	pp := c.Pipeline()
	starts := make([]*redis.Cmd, len(ids))
	values := make([]string, len(ids))
	for j, id := range ids {
		i, record, lock, timeline := keys(id)
		values[j] = randHex(8)
		entry := `{"at":` + now + `,"type":"started","instance":"` + instance + `","attempt":1}`
		starts[j] = floorStart.EvalSha(ctx, pp, []string{record, lock, p + "fence:{" + tenantID(i) + "}", timeline, counts},
			values[j], 30000, instance, now, entry)
	}
	if _, err := pp.Exec(ctx); err != nil {
		return fmt.Errorf("floor: start: %w", err)
	}
	now = strconv.FormatInt(time.Now().UnixMilli(), 10)
	pp = c.Pipeline()
	finals := make([]*redis.Cmd, len(ids))
	for j, id := range ids {
		res, _ := starts[j].Slice()
		if len(res) != 3 || res[0] != int64(1) {
			return fmt.Errorf("floor: start of %s refused: %v", id, res)
		}
		i, record, lock, timeline := keys(id)
		ck := `{"lastCompletedStageIndex":0,"completedStages":["s00"],"savedAt":` + now + `,"attempt":1,"fence":` + strconv.FormatInt(res[2].(int64), 10) + `}`
		finals[j] = floorFinal.EvalSha(ctx, pp, []string{record, lock, p + "ckpt:{" + tenantID(i) + "}:" + id, timeline, counts},
			values[j], res[2], res[1], now, ck,
			`{"at":`+now+`,"type":"stage_started","stage":"s00","attempt":1}`,
			`{"at":`+now+`,"type":"stage_succeeded","stage":"s00","attempt":1}`,
			`{"at":`+now+`,"type":"completed","instance":"`+instance+`","attempt":1}`)
	}
	events := make([]byte, 0, 100*len(ids))
	for _, id := range ids {
		events = append(events, `{"type":"task.completed","taskId":"`+id+`","at":`+now+`}`...)
	}
	pp.XAdd(ctx, &redis.XAddArgs{Stream: feed, MaxLen: 10000, Approx: true, Values: []any{"d", events}})
	if _, err := pp.Exec(ctx); err != nil {
		return fmt.Errorf("floor: final: %w", err)
	}
	for j, f := range finals {
		if res, _ := f.Slice(); len(res) != 1 || res[0] != int64(1) {
			return fmt.Errorf("floor: final write of %s refused: %v", ids[j], res)
		}
	}
	return nil
}
