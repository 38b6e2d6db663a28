package repository

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

func TestRedisKeysAndTTLs(t *testing.T) {
	t.Parallel()
	const ttl = 48 * time.Hour
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			c, prefix := b.New(t)
			e := newRedisEnv(t, c, prefix+"prod:executor:", Config{TTL: ttl})
			e.prefix = prefix
			fx := createPlan(t, e, 2, 0)
			r := start(t, e, fx.tasks[0], 1)
			cp, _ := checkpoint.Empty().Complete(0, "push-config", nil)
			r.mustWrite(task.StatusRunning, task.Write{Checkpoint: &cp})

			p := prefix + "prod:executor:"
			pid, t0id, t1id := fx.plan.ID, fx.tasks[0].ID, fx.tasks[1].ID
			withTTL := []string{
				p + "plan:{" + pid + "}", p + "plan:{" + pid + "}:tasks", p + "plan:{" + pid + "}:counts",
				p + "task:{t-00000}:" + t0id, p + "task:{t-00000}:" + t0id + ":timeline", p + "ckpt:{t-00000}:" + t0id,
				p + "index:tenant:{t-00000}:history",
				p + "task:{t-00001}:" + t1id, p + "index:tenant:{t-00001}:history",
				// The search indexes of the plan: one task PENDING, one RUNNING.
				p + "plan:{" + pid + "}:status:PENDING", p + "plan:{" + pid + "}:status:RUNNING",
			}
			// The taskref buckets: the hour of the id's ULID and the
			// shard of its last digit (one bucket when the two agree).
			bucket := func(id string) string {
				ulid := id[len("task-"):]
				shard := strings.IndexByte("0123456789ABCDEFGHJKMNPQRSTVWXYZ", ulid[25]) & 15
				return fmt.Sprintf("%staskrefs:{%d.%x}", p, task.ULIDMillis(ulid)/3_600_000, shard)
			}
			withTTL = append(withTTL, bucket(t0id))
			if bucket(t1id) != bucket(t0id) {
				withTTL = append(withTTL, bucket(t1id))
			}
			lease := p + "lock:tenant:{t-00000}"
			noTTL := []string{p + "plans", p + "plans:status:PENDING", p + "plans:status:RUNNING"}
			keys := keysUnder(t, e)
			if len(keys) != len(withTTL)+1+len(noTTL) {
				t.Errorf("keys under the prefix: %q, want %d", keys, len(withTTL)+1+len(noTTL))
			}
			ctx := ctxT(t)
			for _, k := range withTTL {
				if !hasKey(keys, k) {
					t.Errorf("key %s missing (have %q)", k, keys)
					continue
				}
				if d := c.PTTL(ctx, k).Val(); d < ttl-time.Minute || d > ttl {
					t.Errorf("TTL of %s = %s, want about %s", k, d, ttl)
				}
			}
			for _, k := range noTTL {
				if d := c.PTTL(ctx, k).Val(); d != -1 {
					t.Errorf("TTL of %s = %s, want none", k, d)
				}
			}
			if d := c.PTTL(ctx, lease).Val(); d <= 0 || d > time.Minute {
				t.Errorf("TTL of the lock %s = %s, want the lease", lease, d)
			}
			if typ := c.Type(ctx, p+"plan:{"+pid+"}:counts").Val(); typ != "hash" {
				t.Errorf("counts is a %s", typ)
			}
			ledger := c.HGet(ctx, p+"plan:{"+pid+"}:counts", "t:"+t1id).Val()
			if ledger != "PENDING|0|0|||t-00001" {
				t.Errorf("ledger entry of a new task = %q", ledger)
			}
			if got := c.LRange(ctx, p+"plan:{"+pid+"}:tasks", 0, -1).Val(); !reflect.DeepEqual(got, []string{t0id, t1id}) {
				t.Errorf("task list %q", got)
			}
			if got := c.HGet(ctx, bucket(t1id), t1id).Val(); got != "t-00001" {
				t.Errorf("taskref bucket holds %q", got)
			}
			if n := c.Exists(ctx, p+"index:tenant:{t-00001}", p+"taskref:{"+t1id+"}").Val(); n != 0 {
				t.Errorf("%d keys of the layout before the buckets and the history index were written", n)
			}
		})
	}
}

func TestRedisHostileIDsWriteNothing(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		validTask, validPlan := task.NewID(t0), plan.NewID(t0)
		for _, id := range hostile {
			tk := task.New(validTask, validPlan, id, nil, stageNames, t0)
			calls := map[string]error{
				"CreatePlan tenant": e.store.CreatePlan(ctx, &plan.Plan{ID: validPlan, Status: plan.StatusCreated, TotalTasks: 1}, []*task.Task{tk}),
				"CreatePlan plan":   e.store.CreatePlan(ctx, &plan.Plan{ID: id, Status: plan.StatusCreated}, nil),
				"UpdatePlan":        e.store.UpdatePlan(ctx, &plan.Plan{ID: id, Status: plan.StatusPaused}),
				"WriteTask":         func() error { _, err := e.store.WriteTask(ctx, task.Write{Task: tk}); return err }(),
				"RequestTask": func() error {
					_, err := e.store.RequestTask(ctx, id, validTask, task.RequestPause, task.Event{})
					return err
				}(),
				"RequestTask id": func() error {
					_, err := e.store.RequestTask(ctx, "t-1", id, task.RequestPause, task.Event{})
					return err
				}(),
				"Beat":          e.store.Beat(ctx, id, validTask, task.Guard{}, t0),
				"TaskByTenant":  func() error { _, _, err := e.store.TaskByTenant(ctx, id); return err }(),
				"Task":          func() error { _, _, err := e.store.Task(ctx, id); return err }(),
				"TenantHistory": func() error { _, err := e.store.TenantHistory(ctx, id, 10); return err }(),
				"Timeline":      func() error { _, err := e.store.Timeline(ctx, id, validTask, 10); return err }(),
				"Plan":          func() error { _, _, err := e.store.Plan(ctx, id); return err }(),
				"PlanTasks":     func() error { _, _, err := e.store.PlanTasks(ctx, id, plan.TaskFilter{}); return err }(),
				"PlanTasks cursor": func() error {
					_, _, err := e.store.PlanTasks(ctx, validPlan, plan.TaskFilter{Cursor: id + "x"})
					return err
				}(),
				"Plans cursor": func() error { _, _, err := e.store.Plans(ctx, plan.ListFilter{Cursor: id + "x"}); return err }(),
				"RepairCounts": func() error { _, _, err := e.store.RepairCounts(ctx, id); return err }(),
			}
			for name, err := range calls {
				if !errors.Is(err, task.ErrInvalid) && !errors.Is(err, plan.ErrInvalid) {
					t.Errorf("%s(%q) = %v, want an invalid-input error", name, id, err)
				}
			}
		}
		if keys := keysUnder(t, e); len(keys) != 0 {
			t.Fatalf("hostile ids wrote keys %q", keys)
		}
	})
}

func TestRedisRoundTrips(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{Batch: 500}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		if err := e.redis.Preload(ctx); err != nil {
			t.Fatal(err)
		}
		count := func(f func() error) int64 {
			t.Helper()
			var err error
			n := e.counter.Count(func() { err = f() })
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		now := e.clock.Now()
		p := &plan.Plan{ID: plan.NewID(now), Name: "big", Status: plan.StatusRunning, Stages: stages(), TotalTasks: 1000, CreatedAt: now}
		tasks := make([]*task.Task, 1000)
		for i := range tasks {
			tasks[i] = task.New(task.NewID(now), p.ID, tenantName(i), nil, stageNames, now)
		}
		if n := count(func() error { return e.store.CreatePlan(ctx, p, tasks) }); n != 3 {
			t.Errorf("CreatePlan of 1000 tasks at batch 500: %d round trips, want 3 (guard + 2 batches)", n)
		}

		var r *runner
		if n := count(func() error { r = start(t, e, tasks[0], 1); return nil }); n != 2 {
			t.Errorf("start: %d round trips, want 2 (lock SET by the test + 1 write)", n)
		}
		r.tk.EnterStage(1, "migrate", now)
		cp, _ := checkpoint.Empty().Complete(0, "push-config", nil)
		if n := count(func() error {
			_, err := r.write(task.StatusRunning, task.Write{Checkpoint: &cp, Events: []task.Event{{Type: task.EventStageStarted}}})
			return err
		}); n != 1 {
			t.Errorf("WriteTask without status change: %d round trips, want 1", n)
		}
		_ = r.tk.Pause(now, "requested")
		if n := count(func() error { _, err := r.write(task.StatusRunning, task.Write{ClearRequests: true}); return err }); n != 1 {
			t.Errorf("WriteTask with status change: %d round trips, want 1", n)
		}
		rounds := []struct {
			name string
			want int64
			f    func() error
		}{
			{"TaskByTenant", 2, func() error { _, _, err := e.store.TaskByTenant(ctx, tenantName(0)); return err }},
			{"Task", 2, func() error { _, _, err := e.store.Task(ctx, tasks[0].ID); return err }},
			{"Plan (1000 tasks)", 1, func() error { _, _, err := e.store.Plan(ctx, p.ID); return err }},
			{"PlanTasks", 2, func() error { _, _, err := e.store.PlanTasks(ctx, p.ID, plan.TaskFilter{Limit: 100}); return err }},
			{"PlanTasks filtered", 2, func() error {
				_, _, err := e.store.PlanTasks(ctx, p.ID, plan.TaskFilter{Status: task.StatusPaused})
				return err
			}},
			{"Plans", 2, func() error { _, _, err := e.store.Plans(ctx, plan.ListFilter{}); return err }},
			{"TenantHistory", 2, func() error { _, err := e.store.TenantHistory(ctx, tenantName(0), 10); return err }},
			{"Timeline", 1, func() error { _, err := e.store.Timeline(ctx, tenantName(0), tasks[0].ID, 10); return err }},
			{"RequestTask", 1, func() error {
				_, err := e.store.RequestTask(ctx, tenantName(1), tasks[1].ID, task.RequestPause, task.Event{})
				return err
			}},
			{"Beat", 1, func() error {
				err := e.store.Beat(ctx, tenantName(0), tasks[0].ID, r.guard, now)
				if errors.Is(err, task.ErrWriteRefused) {
					return nil // refused or not, one round trip
				}
				return err
			}},
			{"UpdatePlan", 1, func() error { return e.store.UpdatePlan(ctx, p, plan.StatusRunning) }},
		}
		for _, rt := range rounds {
			if n := count(rt.f); n != rt.want {
				t.Errorf("%s: %d round trips, want %d", rt.name, n, rt.want)
			}
		}

		// Plan progress is O(1) in the number of tasks.
		small := createPlan(t, e, 10, 0)
		e.clock.Add(time.Second)
		large := createPlan(t, e, 5000, 0)
		nSmall := count(func() error { _, _, err := e.store.Plan(ctx, small.plan.ID); return err })
		nLarge := count(func() error { _, _, err := e.store.Plan(ctx, large.plan.ID); return err })
		if nSmall != 1 || nLarge != 1 {
			t.Errorf("Plan: %d round trips for 10 tasks, %d for 5000; want 1 and 1", nSmall, nLarge)
		}
	})
}

// TestRedisZombieLedgerFirst plays the worst interleaving of two pipelines:
// the refused write's counts update lands before the committed write's, so
// the committed update is rejected and only the correction puts the counts
// right again.
func TestRedisZombieLedgerFirst(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 2, 0)
		tk := fx.tasks[0]
		pk, _ := e.redis.keys.planKeys(fx.plan.ID)
		tkk, _ := e.redis.keys.taskKeys(tk.TenantID, tk.ID)

		// 1. The zombie (fence 5, its lease gone) starts the task: its counts
		//    update lands first.
		zombieStart(ctx, t, e, tk)
		// 2. An operator cancels the PENDING task without the lock: committed,
		//    but its counts update (seq 1, fence 0) loses to the zombie's (1, 5).
		c := tk.Clone()
		_ = c.Cancel(t0, "not needed")
		if _, err := e.store.WriteTask(ctx, task.Write{Task: c, PrevStatus: task.StatusPending, ExpectSeq: 0}); err != nil {
			t.Fatal(err)
		}
		_, counts, _ := e.store.Plan(ctx, fx.plan.ID)
		if counts[task.StatusRunning] != 1 || counts[task.StatusCancelled] != 0 {
			t.Fatalf("counts %s: the interleaving did not happen", countsString(counts))
		}
		// 3. The zombie's record write is refused; the store corrects the counts.
		e.setLock(tk.TenantID, "someone-else")
		z := tk.Clone()
		_ = z.Start(t0, "coord-z", 5)
		v, err := e.redis.run(ctx, writeTaskScript, []string{tkk.task, tkk.ckpt, tkk.timeline, tkk.lock, tkk.history},
			"zombie-lock", 5, 0, zombieWrite, "", "0", "0", 200, 60000, 0)
		if err != nil || replyInt(v.([]any)[0]) != 0 {
			t.Fatalf("zombie record write: %v, %v; want a refusal", v, err)
		}
		cc, err := e.redis.correctCounts(ctx, tkk, pk, tk.PlanID, tk.ID, zombieWrite)
		if err != nil {
			t.Fatal(err)
		}
		counts = checkCounts(t, e, fx.plan.ID)
		if !cc.corrected || cc.changed || cc.counts[task.StatusCancelled] != 1 || cc.counts[task.StatusPending] != 1 || cc.counts[task.StatusRunning] != 0 {
			t.Fatalf("correction answered %+v, want corrected, the plan's status unchanged, 1 CANCELLED and 1 PENDING", cc)
		}
		if counts[task.StatusCancelled] != 1 || counts[task.StatusPending] != 1 {
			t.Fatalf("counts after the correction %s", countsString(counts))
		}
		if led := e.client.HGet(ctx, pk.counts, "t:"+tk.ID).Val(); led != "CANCELLED|1|0|||t-00000" {
			t.Fatalf("ledger entry %q", led)
		}
		if n := e.client.HGet(ctx, pk.counts, "RUNNING@coord-z").Val(); n != "" {
			t.Fatalf("owner counter RUNNING@coord-z = %q, want gone", n)
		}
		// A second correction finds nothing to do.
		if cc, err := e.redis.correctCounts(ctx, tkk, pk, tk.PlanID, tk.ID, zombieWrite); err != nil || cc.corrected {
			t.Fatalf("second correction %+v, %v; want nothing corrected", cc, err)
		}
		checkCounts(t, e, fx.plan.ID)
	})
}

func TestRedisWriteReplayIsIdempotent(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		tk := fx.tasks[0]
		tkk, _ := e.redis.keys.taskKeys(tk.TenantID, tk.ID)
		// The arguments a write sends (no lock, fence 0, expecting seq 0).
		tw, err := EncodeWrite(task.Write{Task: tk, Events: []task.Event{{Type: task.EventStarted}}})
		if err != nil {
			t.Fatal(err)
		}
		tw.timelineMax, tw.ttl = 200, 60000
		writeID := "write-1"
		args := tw.scriptArgs(&writeID, false, nil, false)
		keys := []string{tkk.task, tkk.ckpt, tkk.timeline, tkk.lock, tkk.history}
		for i := 0; i < 2; i++ {
			v, err := e.redis.run(ctx, writeTaskScript, keys, args...)
			if err != nil || replyInt(v.([]any)[0]) != 1 || replyInt(v.([]any)[1]) != 1 {
				t.Fatalf("attempt %d: %v, %v; want written with seq 1", i, v, err)
			}
		}
		if n := e.client.LLen(ctx, tkk.timeline).Val(); n != 1 {
			t.Fatalf("timeline has %d entries after a replayed write, want 1", n)
		}
	})
}

func TestRedisRepairCounts(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{Batch: 7}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 20, 0)
		for i := 0; i < 5; i++ {
			start(t, e, fx.tasks[i], 1).complete()
		}
		start(t, e, fx.tasks[5], 1).fail("boom")
		start(t, e, fx.tasks[6], 1)
		want := checkCounts(t, e, fx.plan.ID)

		pk, _ := e.redis.keys.planKeys(fx.plan.ID)
		e.client.HSet(ctx, pk.counts, "PENDING", 99, "COMPLETED", -3, "RUNNING@ghost", 4)
		e.client.HDel(ctx, pk.counts, "t:"+fx.tasks[8].ID, "RUNNING")
		e.client.HSet(ctx, pk.counts, "t:"+fx.tasks[1].ID, "FAILED|2|1|||t-00001")     // same key as the record, wrong status
		e.client.HSet(ctx, pk.counts, "t:"+fx.tasks[10].ID, "garbage")                 // unreadable
		e.client.HSet(ctx, pk.counts, "t:"+fx.tasks[9].ID, "PENDING|0|0||"+"|t-00009") // fine
		// Ahead of its record: the move of a write Redis refused, whose
		// writer died before correcting it (a shutdown cut short, a crash).
		// The recount must win (the repair kept it as "a write landed
		// meanwhile": a plan COMPLETED with a task RUNNING, a chaos run).
		e.client.HSet(ctx, pk.counts, "t:"+fx.tasks[6].ID, "COMPLETED|3|1|w-lost|coord-a|t-00006")
		if _, c, _ := e.store.Plan(ctx, fx.plan.ID); c[task.StatusPending] != 99 {
			t.Fatalf("corruption did not take: %v", c)
		}
		got, _, err := e.store.RepairCounts(ctx, fx.plan.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("RepairCounts = %s, want %s", countsString(got), countsString(want))
		}
		checkCounts(t, e, fx.plan.ID)
		if n := e.client.HGet(ctx, pk.counts, "RUNNING@ghost").Val(); n != "" {
			t.Fatalf("RUNNING@ghost survived the repair: %q", n)
		}
		if n := e.client.HGet(ctx, pk.counts, "RUNNING@coord-a").Val(); n != "1" {
			t.Fatalf("RUNNING@coord-a = %q, want 1", n)
		}
		// The ledger works again: the next transitions keep counts right.
		start(t, e, fx.tasks[8], 1).complete()
		start(t, e, fx.tasks[10], 1).complete()
		checkCounts(t, e, fx.plan.ID)
	})
}

func TestRedisRepairRederivesPlan(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 2, 0)
		start(t, e, fx.tasks[0], 1).complete()
		r := start(t, e, fx.tasks[1], 1)
		pk, _ := e.redis.keys.planKeys(fx.plan.ID)
		// Lose the counts entirely, then finish the last task: nothing moves.
		e.client.Del(ctx, pk.counts)
		if res := r.complete(); res.PlanStatus != string(plan.StatusRunning) {
			t.Fatalf("plan status %q with lost counts", res.PlanStatus)
		}
		if _, changed, err := e.store.RepairCounts(ctx, fx.plan.ID); err != nil || !changed {
			t.Fatalf("repair: changed %v, %v; want the plan's status changed", changed, err)
		}
		p, counts, _ := e.store.Plan(ctx, fx.plan.ID)
		if p.Status != plan.StatusCompleted || counts[task.StatusCompleted] != 2 {
			t.Fatalf("after repair: plan %s, counts %s", p.Status, countsString(counts))
		}
		// Again: nothing to change, and it says so (the plan's end is
		// published once).
		if _, changed, err := e.store.RepairCounts(ctx, fx.plan.ID); err != nil || changed {
			t.Fatalf("second repair: changed %v, %v; want unchanged", changed, err)
		}
	})
}

// deriveTestLua calls derive_plan.lua on a plan set up by the test.
const deriveTestLua = `
-- KEYS[1] counts, KEYS[2] plan; ARGV[1] now, ARGV[2] threshold reason,
-- ARGV[3] the task's old status, ARGV[4] its new status
return derive_plan(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4])`

func TestDeriveParity(t *testing.T) {
	t.Parallel()
	c := func(p, r, pa, co, f, ca int) plan.Counts {
		return plan.Counts{task.StatusPending: p, task.StatusRunning: r, task.StatusPaused: pa,
			task.StatusCompleted: co, task.StatusFailed: f, task.StatusCancelled: ca}
	}
	const (
		pe = task.StatusPending
		ru = task.StatusRunning
		pa = task.StatusPaused
		co = task.StatusCompleted
		fa = task.StatusFailed
		ca = task.StatusCancelled
	)
	tests := []struct {
		cur       plan.Status
		counts    plan.Counts
		total     int
		maxFailed int
		from, to  task.Status
	}{
		{plan.StatusRunning, c(0, 0, 0, 3, 0, 0), 3, 0, ru, co},
		{plan.StatusRunning, c(0, 0, 0, 2, 1, 0), 3, 0, ru, fa},
		{plan.StatusRunning, c(0, 0, 0, 2, 0, 1), 3, 0, pe, ca},
		{plan.StatusRunning, c(0, 0, 0, 2, 0, 1), 3, 0, "", ""},
		{plan.StatusRunning, c(1, 0, 0, 2, 0, 0), 3, 0, ru, co},
		{plan.StatusRunning, c(0, 1, 0, 2, 0, 0), 3, 0, pe, ru},
		{plan.StatusRunning, c(0, 0, 1, 2, 0, 0), 3, 0, ru, pa},
		{plan.StatusRunning, c(5, 1, 0, 0, 2, 0), 8, 1, ru, fa},
		{plan.StatusRunning, c(5, 1, 0, 0, 2, 0), 8, 1, pe, fa},
		{plan.StatusRunning, c(5, 1, 0, 0, 1, 0), 8, 1, ru, fa},
		{plan.StatusRunning, c(5, 1, 0, 0, 9, 0), 15, 0, ru, fa},
		// Resumed over the threshold: moves that add no failure keep it
		// running, a new failure pauses it again.
		{plan.StatusRunning, c(4, 2, 0, 0, 2, 0), 8, 1, pe, ru},
		{plan.StatusRunning, c(5, 0, 0, 1, 2, 0), 8, 1, ru, co},
		{plan.StatusRunning, c(4, 1, 0, 0, 2, 1), 8, 1, pe, ca},
		{plan.StatusRunning, c(5, 1, 0, 0, 2, 0), 8, 1, "", ""},
		{plan.StatusRunning, c(5, 1, 0, 0, 2, 0), 8, 1, fa, fa},
		{plan.StatusRunning, c(4, 1, 0, 0, 3, 0), 8, 1, ru, fa},
		{plan.StatusPaused, c(0, 0, 0, 1, 2, 0), 3, 1, ru, fa},
		{plan.StatusPaused, c(0, 0, 0, 3, 0, 0), 3, 0, ru, co},
		{plan.StatusPaused, c(0, 0, 0, 3, 0, 0), 3, 0, "", ""},
		{plan.StatusPaused, c(1, 0, 0, 0, 5, 0), 6, 1, ru, fa},
		// Finished plans reopen on a manual re-run only.
		{plan.StatusCompleted, c(0, 1, 0, 2, 0, 0), 3, 0, ru, ru},
		{plan.StatusCompleted, c(0, 1, 0, 2, 0, 0), 3, 0, "", ""},
		{plan.StatusFailed, c(0, 1, 0, 1, 1, 0), 3, 0, fa, ru},
		{plan.StatusFailed, c(0, 1, 0, 1, 1, 0), 3, 1, fa, ru},
		{plan.StatusCancelled, c(0, 1, 0, 0, 0, 2), 3, 0, ca, ru},
		{plan.StatusCancelled, c(0, 1, 0, 0, 0, 2), 3, 0, pa, ru},
		{plan.StatusCancelled, c(0, 1, 0, 0, 0, 2), 3, 0, ru, ru},
		// Bug 1: a cancelled plan's task still finishing its stage; another
		// idle task is cancelled, or a PENDING one started after the cancel.
		{plan.StatusCancelled, c(0, 1, 0, 0, 0, 2), 3, 0, pe, ca},
		{plan.StatusCancelled, c(0, 2, 0, 0, 0, 1), 3, 0, pe, ru},
		{plan.StatusCancelled, c(0, 1, 0, 0, 1, 1), 3, 0, ru, fa},
		{plan.StatusCancelled, c(2, 0, 0, 0, 0, 1), 3, 0, ru, ca},
		{plan.StatusFailed, c(0, 0, 0, 2, 1, 0), 3, 0, ru, fa},
		{plan.StatusCreated, c(0, 0, 0, 0, 0, 0), 0, 0, "", ""},
		{plan.StatusCreated, c(3, 0, 0, 0, 0, 0), 3, 0, "", ""},
		{plan.StatusCreated, c(2, 1, 0, 0, 0, 0), 3, 0, fa, ru},
		{plan.StatusRunning, c(0, 0, 0, 0, 0, 0), 0, 0, "", ""},
		{plan.StatusRunning, c(0, 0, 0, 0, 100000, 0), 100000, 0, ru, fa},
	}
	s := newScript("derive_test", deriveLua, deriveTestLua)
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		now := t0.Add(time.Hour)
		for i, tt := range tests {
			id := plan.NewID(t0)
			pk, _ := e.redis.keys.planKeys(id)
			e.client.HSet(ctx, pk.plan, fStatus, string(tt.cur), fReason, "before", fTotalTasks, tt.total,
				fMaxFailed, tt.maxFailed, fUpdatedAt, formatTime(t0), fFinishedAt, "")
			for st, n := range tt.counts {
				e.client.HSet(ctx, pk.counts, string(st), n)
			}
			got, err := e.redis.run(ctx, s, []string{pk.counts, pk.plan}, formatTime(now), plan.ReasonFailureThreshold,
				string(tt.from), string(tt.to))
			if err != nil {
				t.Fatal(err)
			}
			want := &plan.Plan{Status: tt.cur, Reason: "before", UpdatedAt: t0}
			st, reason := plan.Derive(tt.cur, tt.counts, tt.total, tt.maxFailed, tt.from, tt.to)
			want.Apply(now, st, reason)
			stored, _ := e.client.HGetAll(ctx, pk.plan).Result()
			if got != string(st) || stored[fStatus] != string(want.Status) || stored[fReason] != want.Reason ||
				stored[fUpdatedAt] != formatTime(want.UpdatedAt) || stored[fFinishedAt] != formatTime(want.FinishedAt) {
				t.Errorf("case %d (%s %s total %d maxFailed %d, task %q → %q): Lua %q stored %v; plan.Derive %s %q, Apply %+v",
					i, tt.cur, countsString(tt.counts), tt.total, tt.maxFailed, tt.from, tt.to, got, stored, st, reason, want)
			}
		}
	})
}

// eachOwnServer runs f on miniredis and on a throwaway redis-server, for
// tests that touch server-wide state (the script cache).
func eachOwnServer(t *testing.T, cfg Config, f func(t *testing.T, e *env)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		_, c := redistest.Mini(t)
		f(t, newRedisEnv(t, c, "x:", cfg))
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		srv := redistest.StartServer(t)
		f(t, newRedisEnv(t, srv.Client(), "x:", cfg))
	})
}

func TestRedisAnswersAfterScriptFlush(t *testing.T) {
	t.Parallel()
	eachOwnServer(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 2, 0)
		r := start(t, e, fx.tasks[0], 1)
		e.client.ScriptFlush(ctx)
		// A pipeline holding two scripts (record and counts).
		_ = r.tk.Pause(t0, "x")
		if res := r.mustWrite(task.StatusRunning, task.Write{}); res.PlanStatus != string(plan.StatusRunning) {
			t.Fatalf("write after SCRIPT FLUSH: %+v", res)
		}
		checkCounts(t, e, fx.plan.ID)
		e.client.ScriptFlush(ctx)
		if _, err := e.store.RequestTask(ctx, tenantName(1), fx.tasks[1].ID, task.RequestPause, task.Event{}); err != nil {
			t.Fatalf("single script after SCRIPT FLUSH: %v", err)
		}
		// The next call reloads every script: EVALSHA hits again.
		if err := e.store.UpdatePlan(ctx, fx.plan); err != nil {
			t.Fatal(err)
		}
		n := e.counter.Count(func() {
			_, _ = e.store.RequestTask(ctx, tenantName(1), fx.tasks[1].ID, task.RequestPause, task.Event{})
		})
		if n != 1 {
			t.Fatalf("RequestTask after the reload: %d round trips, want 1", n)
		}
	})
}

func TestRedisRestartedInstanceAnswers(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			c, prefix := b.New(t)
			e := newRedisEnv(t, c, prefix, Config{})
			fx := createPlan(t, e, 3, 0)
			r := start(t, e, fx.tasks[0], 1)
			cp, _ := checkpoint.Empty().Complete(0, "push-config", map[string]any{"x": 1.0})
			r.mustWrite(task.StatusRunning, task.Write{Checkpoint: &cp, Events: []task.Event{{Type: task.EventStageSucceeded}}})
			start(t, e, fx.tasks[1], 1).fail("boom")

			// Another instance: a new client, a new store, nothing shared but Redis.
			c2 := redistest.Clone(t, c)
			e2 := newRedisEnv(t, c2, prefix, Config{})
			ctx := ctxT(t)
			type answer struct {
				name string
				f    func(s *env) any
			}
			answers := []answer{
				{"TaskByTenant", func(s *env) any { t, c, err := s.store.TaskByTenant(ctx, tenantName(0)); return []any{t, c, err} }},
				{"Task", func(s *env) any { t, c, err := s.store.Task(ctx, fx.tasks[1].ID); return []any{t, c, err} }},
				{"Plan", func(s *env) any { p, c, err := s.store.Plan(ctx, fx.plan.ID); return []any{p, c, err} }},
				{"Plans", func(s *env) any { p, n, err := s.store.Plans(ctx, plan.ListFilter{}); return []any{p, n, err} }},
				{"PlanTasks", func(s *env) any {
					ts, n, err := s.store.PlanTasks(ctx, fx.plan.ID, plan.TaskFilter{})
					return []any{ts, n, err}
				}},
				{"TenantHistory", func(s *env) any { ts, err := s.store.TenantHistory(ctx, tenantName(1), 0); return []any{ts, err} }},
				{"Timeline", func(s *env) any {
					ev, err := s.store.Timeline(ctx, tenantName(0), fx.tasks[0].ID, 0)
					return []any{ev, err}
				}},
			}
			for _, a := range answers {
				want, got := a.f(e), a.f(e2)
				if !reflect.DeepEqual(want, got) {
					t.Errorf("%s: the new instance answers %+v, the first %+v", a.name, got, want)
				}
			}
			if got, ck, err := e2.store.TaskByTenant(ctx, tenantName(0)); err != nil || got.Status != task.StatusRunning || ck == nil || ck.ContextData["push-config"] == nil {
				t.Fatalf("new instance: %+v %+v %v", got, ck, err)
			}
		})
	}
}

// failPipeline is a hook that fails the n-th pipeline it sees (1-based).
type failPipeline struct {
	n, seen int
}

func (f *failPipeline) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *failPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (f *failPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		f.seen++
		if f.seen == f.n {
			// The first half reaches Redis, then the connection "breaks".
			half := cmds[:len(cmds)/2]
			_ = next(ctx, half)
			err := errors.New("injected: connection reset")
			for _, c := range cmds[len(cmds)/2:] {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// A creation that fails midway leaves nothing behind: with legacy keys on
// (see legacy.go) the keys of layout 1 are as they were too — each tenant's
// index names its task before again (or is gone), no taskref STRING stays.
func TestRedisCreatePlanRollsBack(t *testing.T) {
	t.Parallel()
	for _, legacy := range []LegacyKeys{LegacyKeysOff, LegacyKeysOn} {
		t.Run("legacy="+string(legacy), func(t *testing.T) {
			t.Parallel()
			testCreatePlanRollsBack(t, legacy)
		})
	}
}

func testCreatePlanRollsBack(t *testing.T, legacy LegacyKeys) {
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			c, prefix := b.New(t)
			cfg := Config{Batch: 10, LegacyKeys: legacy}
			e := newRedisEnv(t, c, prefix, cfg)
			ctx := ctxT(t)
			if err := e.redis.Preload(ctx); err != nil {
				t.Fatal(err)
			}
			earlier := createPlan(t, e, 25, 0)
			before := keysUnder(t, e)

			// Make the third task pipeline fail halfway.
			c2 := redistest.Clone(t, c)
			hook := &failPipeline{n: 3}
			c2.AddHook(hook)
			cfg.Prefix, cfg.Clock = prefix, e.clock.Now
			r2, _ := NewRedis(c2, cfg)
			_ = r2.Preload(ctx)
			hook.seen = 0
			e.clock.Add(time.Second)
			now := e.clock.Now()
			p := &plan.Plan{ID: plan.NewID(now), Status: plan.StatusCreated, TotalTasks: 30, CreatedAt: now}
			tasks := make([]*task.Task, 30)
			for i := range tasks {
				tasks[i] = task.New(task.NewID(now), p.ID, tenantName(i), nil, stageNames, now)
			}
			err := r2.CreatePlan(ctx, p, tasks)
			if err == nil || !IsUnavailable(err) {
				t.Fatalf("CreatePlan with a broken batch: %v, want an unavailable error", err)
			}
			after := keysUnder(t, e)
			if len(after) != len(before) {
				t.Fatalf("rollback left %d keys, before there were %d: extra %v", len(after), len(before), diff(after, before))
			}
			// The tenants' index points at their previous task again.
			for i := 0; i < 25; i++ {
				got, _, err := e.store.TaskByTenant(ctx, tenantName(i))
				if err != nil || got.ID != earlier.tasks[i].ID {
					t.Fatalf("tenant %d: current task %v, %v; want the earlier plan's", i, got, err)
				}
			}
			if ps, _, _ := e.store.Plans(ctx, plan.ListFilter{}); len(ps) != 1 {
				t.Fatalf("plans listed after the rollback: %d", len(ps))
			}
			if legacy == LegacyKeysOn {
				layout1{e}.check(t, earlier)
			}
		})
	}
}

// The tenant's index is its history's newest entry: a plan created later —
// in the same millisecond too (ids made in turn sort in turn) — names the
// tenant's current task; when its entry goes, the one before it does again.
func TestTenantIndexIsHistoryNewest(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		var fxs []fixture
		for i := 0; i < 3; i++ { // the clock does not move: one millisecond
			fxs = append(fxs, createPlan(t, e, 2, 0))
		}
		newest := fxs[2].tasks[1]
		got, _, err := e.store.TaskByTenant(ctx, newest.TenantID)
		if err != nil || got.ID != newest.ID {
			t.Fatalf("current task %v, %v; want the last created %s", got, err, newest.ID)
		}
		tasks, _, err := e.store.TasksByTenant(ctx, []string{newest.TenantID, "t-99999"})
		if err != nil || len(tasks) != 1 || tasks[newest.TenantID].ID != newest.ID {
			t.Fatalf("TasksByTenant %v, %v; want the last created %s only", tasks, err, newest.ID)
		}
		h, _ := e.redis.keys.History(newest.TenantID)
		e.client.ZRem(ctx, h, newest.ID)
		if got, _, err := e.store.TaskByTenant(ctx, newest.TenantID); err != nil || got.ID != fxs[1].tasks[1].ID {
			t.Fatalf("after its entry went: %v, %v; want %s", got, err, fxs[1].tasks[1].ID)
		}
		// A later millisecond wins whatever the ids say.
		e.client.ZAdd(ctx, h, redis.Z{Score: float64(t0.Add(time.Hour).UnixMilli()), Member: fxs[0].tasks[1].ID})
		if got, _, err := e.store.TaskByTenant(ctx, newest.TenantID); err != nil || got.ID != fxs[0].tasks[1].ID {
			t.Fatalf("newest by score: %v, %v; want %s", got, err, fxs[0].tasks[1].ID)
		}
		// No old-layout index STRING is written.
		if n := e.client.Exists(ctx, e.prefix+"index:tenant:{"+newest.TenantID+"}").Val(); n != 0 {
			t.Fatalf("an index STRING was written")
		}
	})
}

// A task written by a version before the taskref buckets (its tenant in
// {p}taskref:{id}) is found by id, by the plan's task list and by a repair.
func TestTaskByIDOfOlderVersion(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 2, 0)
		old := fx.tasks[1]
		bucket, _ := e.redis.keys.TaskRef(old.ID)
		str, _ := e.redis.keys.TaskRefString(old.ID)
		if n := e.client.HDel(ctx, bucket, old.ID).Val(); n != 1 {
			t.Fatalf("the bucket %s did not hold the task", bucket)
		}
		if got, _, err := e.store.Task(ctx, old.ID); !errors.Is(err, task.ErrNotFound) {
			t.Fatalf("Task without a taskref: %v, %v; want not found", got, err)
		}
		e.client.Set(ctx, str, old.TenantID, time.Hour)
		got, _, err := e.store.Task(ctx, old.ID)
		if err != nil || got.ID != old.ID || got.TenantID != old.TenantID {
			t.Fatalf("Task by the older taskref: %v, %v", got, err)
		}
		if got, _, err := e.store.Task(ctx, fx.tasks[0].ID); err != nil || got.ID != fx.tasks[0].ID {
			t.Fatalf("Task by the bucket: %v, %v", got, err)
		}
		// A ledger entry that lost its tenant: the listing and the repair
		// find it through the older taskref.
		pk, _ := e.redis.keys.planKeys(fx.plan.ID)
		e.client.HDel(ctx, pk.counts, "t:"+old.ID)
		e.client.HSet(ctx, pk.counts, "PENDING", 7)
		tasks, _, err := e.store.PlanTasks(ctx, fx.plan.ID, plan.TaskFilter{})
		if err != nil || len(tasks) != 2 || tasks[1].ID != old.ID {
			t.Fatalf("PlanTasks with a ledger entry without tenant: %v, %v; want both tasks", tasks, err)
		}
		counts, _, err := e.store.RepairCounts(ctx, fx.plan.ID)
		if err != nil || counts[task.StatusPending] != 2 {
			t.Fatalf("RepairCounts = %v, %v; want 2 PENDING", counts, err)
		}
		if led := e.client.HGet(ctx, pk.counts, "t:"+old.ID).Val(); !strings.HasSuffix(led, "|"+old.TenantID) {
			t.Fatalf("ledger entry after the repair %q, want its tenant back", led)
		}
		// A corrupt older taskref is an error, not a tenant.
		e.client.Set(ctx, str, "t:{evil}", time.Hour)
		if _, _, err := e.store.Task(ctx, old.ID); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Task by a corrupt taskref: %v, want ErrCorrupt", err)
		}
	})
}

func diff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !hasKey(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// isMalformed: err is ErrCorrupt, and says so by the method facade.IsMalformed
// looks for (package facade does not import this one).
func isMalformed(err error) bool {
	var m interface{ Malformed() bool }
	return errors.Is(err, ErrCorrupt) && errors.As(err, &m) && m.Malformed()
}

func TestRedisMalformedRecords(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 2, 0)
		k0, _ := e.redis.keys.Task(tenantName(0), fx.tasks[0].ID)
		e.client.HSet(ctx, k0, fAttempt, "many")
		_, _, err := e.store.TaskByTenant(ctx, tenantName(0))
		if !isMalformed(err) || !strings.Contains(err.Error(), k0) || !strings.Contains(err.Error(), fAttempt) {
			t.Fatalf("malformed record: %v, want ErrCorrupt naming %s", err, k0)
		}
		ck, _ := e.redis.keys.Checkpoint(tenantName(1), fx.tasks[1].ID)
		e.client.Set(ctx, ck, "{not json", time.Hour)
		if _, _, err := e.store.Task(ctx, fx.tasks[1].ID); !isMalformed(err) || !strings.Contains(err.Error(), ck) {
			t.Fatalf("malformed checkpoint: %v", err)
		}
		pkey, _ := e.redis.keys.Plan(fx.plan.ID)
		e.client.HSet(ctx, pkey, fStages, "[{")
		if _, _, err := e.store.Plan(ctx, fx.plan.ID); !isMalformed(err) || !strings.Contains(err.Error(), pkey) {
			t.Fatalf("malformed plan: %v", err)
		}
		e.client.HSet(ctx, k0, fAttempt, "1", fStatus, "DANCING")
		if _, _, err := e.store.Task(ctx, fx.tasks[0].ID); !isMalformed(err) {
			t.Fatalf("unknown status: %v", err)
		}
		tl, _ := e.redis.keys.Timeline(tenantName(1), fx.tasks[1].ID)
		e.client.RPush(ctx, tl, "nope")
		if _, err := e.store.Timeline(ctx, tenantName(1), fx.tasks[1].ID, 0); !isMalformed(err) {
			t.Fatalf("malformed timeline: %v", err)
		}
		idx, _ := e.redis.keys.History(tenantName(1))
		e.client.ZAdd(ctx, idx, redis.Z{Score: 1 << 50, Member: "task-{evil}"})
		if _, _, err := e.store.TaskByTenant(ctx, tenantName(1)); !isMalformed(err) {
			t.Fatalf("index with a bad id: %v", err)
		}
	})
}

func TestRedisUnavailable(t *testing.T) {
	t.Parallel()
	t.Run("miniredis closed", func(t *testing.T) {
		t.Parallel()
		m, _ := redistest.Mini(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { _ = c.Close() })
		e := newRedisEnv(t, c, "x:", Config{})
		fx := createPlan(t, e, 1, 0)
		m.Close()
		_, _, err := e.store.TaskByTenant(ctxT(t), tenantName(0))
		if !IsUnavailable(err) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("closed server: %v, want unavailable", err)
		}
		_, err = e.store.WriteTask(ctxT(t), task.Write{Task: fx.tasks[0], PrevStatus: task.StatusPending})
		if !IsUnavailable(err) {
			t.Fatalf("write to a closed server: %v, want unavailable", err)
		}
	})
	t.Run("redis-server paused", func(t *testing.T) {
		t.Parallel()
		srv := redistest.StartServer(t)
		c := srv.Client()
		e := newRedisEnv(t, c, "x:", Config{})
		createPlan(t, e, 1, 0)
		srv.Stop()
		defer srv.Cont()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, _, err := e.store.TaskByTenant(ctx, tenantName(0))
		if !IsUnavailable(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("paused server: %v, want unavailable and DeadlineExceeded", err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		cancel()
		_, _, err = e.store.TaskByTenant(ctx, tenantName(0))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled context: %v, want context.Canceled", err)
		}
	})
}

func TestRedisPlansIndexPruned(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{TTL: time.Hour}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		old := createPlan(t, e, 1, 0)
		e.clock.Add(time.Hour + time.Second)
		fresh := createPlan(t, e, 1, 0)
		ids, err := e.client.ZRange(ctx, e.redis.keys.Plans(), 0, -1).Result()
		if err != nil || len(ids) != 1 || ids[0] != fresh.plan.ID {
			t.Fatalf("plans index %v, %v; want only %s (%s is older than the TTL)", ids, err, fresh.plan.ID, old.plan.ID)
		}
	})
}

// TestRedisResentWriteAnsweredAsWritten: a write sent again with its id
// (an attempt whose answer was lost had landed) is answered as written,
// with the stored result — seq, requests and the plan's status — and
// changes nothing more: one timeline entry, counts moved once. A write
// with a new id is refused.
func TestRedisResentWriteAnsweredAsWritten(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 1, 0)
		r := start(t, e, fx.tasks[0], 1)
		if _, err := e.store.RequestTask(ctx, r.tk.TenantID, r.tk.ID, task.RequestPause,
			task.Event{At: e.clock.Now(), Type: task.EventPauseRequested}); err != nil {
			t.Fatal(err)
		}
		if err := r.tk.Complete(e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		w := task.Write{Task: r.tk, PrevStatus: task.StatusRunning, ExpectSeq: r.tk.Seq, Guard: r.guard, ReleaseLock: true,
			ID: "resend-1", Events: []task.Event{{Type: task.EventCompleted}}}
		first, err := e.store.WriteTask(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		again, err := e.store.WriteTask(ctx, w)
		if err != nil {
			t.Fatalf("the same write sent again: %v, want it answered as written", err)
		}
		if again.Seq != first.Seq || again.PauseRequested != first.PauseRequested || !again.PauseRequested ||
			again.PlanStatus != string(plan.StatusCompleted) {
			t.Errorf("resent write answered %+v, first %+v; want the same seq and requests, plan COMPLETED", again, first)
		}
		tl, _ := e.store.Timeline(ctx, r.tk.TenantID, r.tk.ID, 0)
		if n := countType(tl, task.EventCompleted); n != 1 {
			t.Errorf("%d task.completed entries after a resent write, want 1", n)
		}
		if counts := checkCounts(t, e, fx.plan.ID); counts[task.StatusCompleted] != 1 {
			t.Errorf("counts %s, want 1 COMPLETED", countsString(counts))
		}
		w.ID = "other-1"
		_, err = e.store.WriteTask(ctx, w)
		refusedAs(t, err, task.RefusedLock) // released by the write it repeats
		w.ID = "bad id{*}"
		if _, err := e.store.WriteTask(ctx, w); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("write id with spaces, braces and a glob: %v, want ErrInvalid", err)
		}
	})
}

func countType(evs []task.Event, typ task.EventType) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// afterPipeline calls then once, after the first pipeline it sees that
// holds a command named name and none named skip (once armed).
type afterPipeline struct {
	armed      atomic.Bool
	name, skip string
	then       func()
}

func (*afterPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*afterPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *afterPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		has := func(n string) bool {
			return slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == n })
		}
		if has(h.name) && !has(h.skip) && h.armed.CompareAndSwap(true, false) {
			h.then()
		}
		return err
	}
}

// TestRedisRepairKeepsWriteLandedMeanwhile: a task write that lands while a
// repair recounts (after the ledger was read, before the repair's script)
// is kept: its ledger entry changed since the read, the recount is behind.
func TestRedisRepairKeepsWriteLandedMeanwhile(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	hook := &afterPipeline{name: "hmget", skip: "lrange"}
	hooked := srv.Client()
	hooked.AddHook(hook)
	e := newRedisEnv(t, hooked, "x:", Config{})
	other := newRedisEnv(t, srv.Client(), "x:", Config{})
	ctx := ctxT(t)
	fx := createPlan(t, e, 3, 0)
	r := start(t, other, fx.tasks[0], 1)
	hook.then = func() { r.complete() } // lands during the recount
	hook.armed.Store(true)
	got, _, err := e.store.RepairCounts(ctx, fx.plan.ID)
	if err != nil {
		t.Fatal(err)
	}
	if hook.armed.Load() {
		t.Fatal("the write was never sent during the recount")
	}
	if got[task.StatusCompleted] != 1 || got[task.StatusRunning] != 0 || got[task.StatusPending] != 2 {
		t.Fatalf("RepairCounts = %s, want the write that landed meanwhile counted (1 COMPLETED, 2 PENDING)", countsString(got))
	}
	checkCounts(t, e, fx.plan.ID)
}
