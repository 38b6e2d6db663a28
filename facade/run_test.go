package facade_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
)

func eventTypes(evs []task.Event) []task.EventType {
	out := make([]task.EventType, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// timelineCount returns how many entries of type typ the timeline of
// tenant's task has (read through c), and all their types.
func timelineCount(t *testing.T, c *facade.Coordinator, tenant string, typ task.EventType) (int, []task.EventType) {
	t.Helper()
	tl, err := c.Timeline(context.Background(), tenant, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range tl.Events {
		if e.Type == typ {
			n++
		}
	}
	return n, eventTypes(tl.Events)
}

func TestRunPlan(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		tenants := []string{"t-001", "t-002", "t-003", "t-004", "t-005"}
		v := b.create(spec([]task.StageSpec{b.httpStage("push", task.RetryPolicy{}), noopStage("settle"), b.httpStage("verify", task.RetryPolicy{})}, tenants...))
		if v.Status != plan.StatusRunning || v.TotalTasks != 5 || v.Owner != "coord-a" {
			t.Fatalf("created plan: %+v", v.Plan)
		}
		done := b.waitPlan(b.coord, v.ID, plan.StatusCompleted)
		if done.Counts[task.StatusCompleted] != 5 || done.Counts.Total() != 5 || done.FinishedAt.IsZero() {
			t.Fatalf("finished plan: %+v counts %v", done.Plan, done.Counts)
		}
		for _, tn := range tenants {
			tv := b.waitTask(b.coord, tn, task.StatusCompleted)
			if tv.Checkpoint == nil || tv.Checkpoint.LastCompletedStageIndex != 2 ||
				!slices.Equal(tv.Checkpoint.CompletedStages, []string{"push", "settle", "verify"}) {
				t.Fatalf("%s checkpoint: %+v", tn, tv.Checkpoint)
			}
			push, _ := tv.Checkpoint.ContextData["push"].(map[string]any)
			if push["tenant"] != tn {
				t.Fatalf("%s: push outputs not in context data: %v", tn, tv.Checkpoint.ContextData)
			}
			if tv.Attempt != 1 || tv.FinishedAt.IsZero() || tv.Orphaned {
				t.Fatalf("%s task: %+v", tn, tv.Task)
			}
			for _, st := range []string{"push", "verify"} {
				if n := b.target.count(tn, st); n != 1 {
					t.Fatalf("target saw %s/%s %d times, want 1", tn, st, n)
				}
			}
			tl, err := b.coord.Timeline(context.Background(), tn, 0)
			if err != nil {
				t.Fatal(err)
			}
			evs := tl.Events
			want := []task.EventType{task.EventStarted,
				task.EventStageStarted, task.EventStageSucceeded, task.EventStageStarted, task.EventStageSucceeded,
				task.EventStageStarted, task.EventStageSucceeded, task.EventCompleted}
			if got := eventTypes(evs); !slices.Equal(got, want) {
				t.Fatalf("%s timeline %v, want %v", tn, got, want)
			}
			info, err := b.coord.Lock(context.Background(), tn)
			if err != nil || info.Held {
				t.Fatalf("%s lock after completion: %+v %v", tn, info, err)
			}
		}
	})
}

func TestRunnerOutcomes(t *testing.T) {
	t.Parallel()
	fast := task.RetryPolicy{MaxAttempts: 3, Backoff: task.BackoffFixed, BaseDelay: task.Duration(10 * time.Millisecond)}
	cases := []struct {
		name      string
		statuses  []int
		retry     task.RetryPolicy
		want      task.Status
		calls     int
		retries   int
		errSubstr string
	}{
		{name: "RetryThenSuccess", statuses: []int{503, 503, 200}, retry: fast, want: task.StatusCompleted, calls: 3, retries: 2},
		{name: "RetryableExhausted", statuses: []int{503}, retry: fast, want: task.StatusFailed, calls: 3, retries: 2, errSubstr: "after 3 attempts"},
		{name: "NonRetryable", statuses: []int{500}, retry: fast, want: task.StatusFailed, calls: 1, errSubstr: "500"},
		{name: "NoRetryPolicy", statuses: []int{503}, want: task.StatusFailed, calls: 1, errSubstr: "503"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forBackends(t, func(t *testing.T, be redistest.Backend) {
				b := setup(t, be)
				b.target.script("t-1", "deploy", tc.statuses...)
				v := b.create(spec([]task.StageSpec{noopStage("prepare"), b.httpStage("deploy", tc.retry)}, "t-1"))
				b.waitPlan(b.coord, v.ID, plan.StatusCompleted, plan.StatusFailed)
				tv := b.waitTask(b.coord, "t-1", tc.want)
				if n := b.target.count("t-1", "deploy"); n != tc.calls {
					t.Fatalf("target calls %d, want %d", n, tc.calls)
				}
				keys := b.target.idempotencyKeys("t-1", "deploy")
				if len(slices.Compact(slices.Sorted(slices.Values(keys)))) != len(keys) {
					t.Fatalf("idempotency keys not distinct per attempt: %v", keys)
				}
				if tc.errSubstr != "" && !strings.Contains(tv.LastError, tc.errSubstr) {
					t.Fatalf("lastError %q, want it to mention %q", tv.LastError, tc.errSubstr)
				}
				if tc.want == task.StatusFailed && (tv.Checkpoint == nil || tv.Checkpoint.LastCompletedStageIndex != 0) {
					t.Fatalf("failed task checkpoint %+v, want the stage before", tv.Checkpoint)
				}
				tl, _ := b.coord.Timeline(context.Background(), "t-1", 0)
				evs := tl.Events
				retrying := 0
				for _, e := range evs {
					if e.Type == task.EventStageRetrying {
						retrying++
						if e.Delay <= 0 || e.StageAttempt == 0 || e.Reason == "" {
							t.Fatalf("retry entry without delay/attempt/reason: %+v", e)
						}
					}
				}
				if retrying != tc.retries {
					t.Fatalf("timeline has %d retry entries, want %d: %v", retrying, tc.retries, eventTypes(evs))
				}
			})
		})
	}
}

func TestRunnerTimeoutAndSkip(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		slow := task.StageSpec{Name: "wait", Kind: "sleep", Timeout: task.Duration(50 * time.Millisecond), Config: []byte(`{"duration": "10s"}`)}
		v := b.create(spec([]task.StageSpec{slow}, "t-timeout"))
		b.waitPlan(b.coord, v.ID, plan.StatusFailed)
		tv := b.waitTask(b.coord, "t-timeout", task.StatusFailed)
		if !strings.Contains(tv.LastError, "deadline") {
			t.Fatalf("timeout lastError %q", tv.LastError)
		}
		v = b.create(spec([]task.StageSpec{task.StageSpec{Name: "maybe", Kind: "skipper"}, noopStage("after")}, "t-skip"))
		b.waitPlan(b.coord, v.ID, plan.StatusCompleted)
		tv = b.waitTask(b.coord, "t-skip", task.StatusCompleted)
		if !slices.Equal(tv.Checkpoint.SkippedStages, []string{"maybe"}) || tv.Checkpoint.LastCompletedStageIndex != 1 {
			t.Fatalf("skip checkpoint %+v", tv.Checkpoint)
		}
	})
}

func TestPauseResumeCancelTask(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		v := b.create(spec([]task.StageSpec{b.httpStage("push", task.RetryPolicy{}), gateStage("hold"), b.httpStage("verify", task.RetryPolicy{})}, "t-p", "t-c"))
		b.gates.wait(t, "t-p", "hold")
		b.gates.wait(t, "t-c", "hold")

		pv, err := b.coord.PauseTask(ctx, "t-p", "INC-1 look first", anyone)
		if err != nil || !pv.PauseRequested {
			t.Fatalf("pause: %+v %v", pv.Task, err)
		}
		if _, err := b.coord.CancelTask(ctx, "t-c", "INC-1 not this one", anyone); err != nil {
			t.Fatal(err)
		}
		b.gates.release("t-p", "hold")
		b.gates.release("t-c", "hold")
		paused := b.waitTask(b.coord, "t-p", task.StatusPaused)
		cancelled := b.waitTask(b.coord, "t-c", task.StatusCancelled)
		if paused.Checkpoint.LastCompletedStageIndex != 1 || paused.Reason != "INC-1 look first" {
			t.Fatalf("paused: %+v ckpt %+v", paused.Task, paused.Checkpoint)
		}
		if cancelled.Checkpoint.LastCompletedStageIndex != 1 {
			t.Fatalf("cancelled ckpt %+v", cancelled.Checkpoint)
		}
		for _, tn := range []string{"t-p", "t-c"} {
			if info, _ := b.coord.Lock(ctx, tn); info.Held {
				t.Fatalf("%s lock still held: %+v", tn, info)
			}
			if n := b.target.count(tn, "verify"); n != 0 {
				t.Fatalf("%s: stage after the pause/cancel ran %d times", tn, n)
			}
		}
		// The plan waits for the paused task.
		if pv, _ := b.coord.Plan(ctx, v.ID); pv.Status != plan.StatusRunning || pv.Counts[task.StatusPaused] != 1 {
			t.Fatalf("plan with a paused task: %s %v", pv.Status, pv.Counts)
		}
		// Resume runs only what is left, on this instance.
		if _, err := b.coord.ResumeTask(ctx, "t-p", "INC-1 fine", anyone); err != nil {
			t.Fatal(err)
		}
		b.waitTask(b.coord, "t-p", task.StatusCompleted)
		if b.target.count("t-p", "push") != 1 || b.target.count("t-p", "verify") != 1 {
			t.Fatalf("resume re-ran stages: push %d verify %d", b.target.count("t-p", "push"), b.target.count("t-p", "verify"))
		}
		done := b.waitPlan(b.coord, v.ID, plan.StatusFailed)
		if done.Counts[task.StatusCompleted] != 1 || done.Counts[task.StatusCancelled] != 1 {
			t.Fatalf("plan counts %v", done.Counts)
		}
		// A completed task cannot be paused or resumed.
		_, err = b.coord.PauseTask(ctx, "t-p", "again", anyone)
		mustCode(t, err, facade.ErrTaskCompleted)
	})
}

func TestLockConflict(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		holder := tenantlock.Holder{PlanID: plan.NewID(time.Now()), TaskID: task.NewID(time.Now()), Instance: "coord-z"}
		lease, err := b.locks.Acquire(ctx, "t-busy", holder)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lease.Release(context.Background()) })

		t.Run("Fail", func(t *testing.T) {
			v := b.create(spec([]task.StageSpec{b.httpStage("push", task.RetryPolicy{})}, "t-busy", "t-free"))
			b.waitPlan(b.coord, v.ID, plan.StatusFailed)
			tv := b.waitTask(b.coord, "t-busy", task.StatusFailed)
			if !strings.Contains(tv.LastError, "TENANT_LOCKED") || !strings.Contains(tv.LastError, holder.TaskID) || !strings.Contains(tv.LastError, "coord-z") {
				t.Fatalf("lastError %q does not name the holder", tv.LastError)
			}
			if b.target.count("t-busy", "push") != 0 || b.target.count("t-free", "push") != 1 {
				t.Fatal("a locked tenant was deployed, or a free one was not")
			}
			if info, _ := b.coord.Lock(ctx, "t-busy"); info.Holder != holder {
				t.Fatalf("the holder lost its lock: %+v", info)
			}
		})
		t.Run("Wait", func(t *testing.T) {
			s := spec([]task.StageSpec{b.httpStage("push", task.RetryPolicy{})}, "t-busy")
			s.OnTenantLocked, s.LockWait = plan.LockWait, task.Duration(10*time.Second)
			v := b.create(s)
			time.Sleep(200 * time.Millisecond)
			if tv, _ := b.coord.TaskByTenant(ctx, "t-busy"); tv.Status != task.StatusPending {
				t.Fatalf("waiting task is %s", tv.Status)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			b.waitPlan(b.coord, v.ID, plan.StatusCompleted)
			if b.target.count("t-busy", "push") != 1 {
				t.Fatal("the task did not run after the lock was freed")
			}
		})
		t.Run("WaitLimit", func(t *testing.T) {
			other, err := b.locks.Acquire(ctx, "t-busy2", holder)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Release(ctx)
			s := spec([]task.StageSpec{noopStage("x")}, "t-busy2")
			s.OnTenantLocked, s.LockWait = plan.LockWait, task.Duration(100*time.Millisecond)
			v := b.create(s)
			b.waitPlan(b.coord, v.ID, plan.StatusFailed)
			tv := b.waitTask(b.coord, "t-busy2", task.StatusFailed)
			if !strings.Contains(tv.LastError, "TENANT_LOCKED") {
				t.Fatalf("lastError %q", tv.LastError)
			}
		})
	})
}

func TestPlanCountsAndThreshold(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		s := spec([]task.StageSpec{gateStage("hold")}, "t-a", "t-b")
		s.MaxConcurrency = 1
		v := b.create(s)
		counts := func() plan.Counts {
			pv, err := b.coord.Plan(ctx, v.ID)
			if err != nil {
				t.Fatal(err)
			}
			return pv.Counts
		}
		b.gates.wait(t, "t-a", "hold")
		if c := counts(); c[task.StatusRunning] != 1 || c[task.StatusPending] != 1 {
			t.Fatalf("one running: %v", c)
		}
		b.gates.release("t-a", "hold")
		b.gates.wait(t, "t-b", "hold")
		if c := counts(); c[task.StatusRunning] != 1 || c[task.StatusCompleted] != 1 || c[task.StatusPending] != 0 {
			t.Fatalf("second running: %v", c)
		}
		b.gates.release("t-b", "hold")
		if pv := b.waitPlan(b.coord, v.ID, plan.StatusCompleted); pv.Counts[task.StatusCompleted] != 2 {
			t.Fatalf("done: %v", pv.Counts)
		}

		// Failure threshold: more than one failure pauses the plan.
		fs := spec([]task.StageSpec{b.httpStage("deploy", task.RetryPolicy{})}, "t-f1", "t-f2", "t-f3", "t-f4")
		fs.MaxConcurrency = 1
		fs.FailureThreshold = &plan.FailureThreshold{MaxFailed: 1}
		for _, tn := range []string{"t-f1", "t-f2", "t-f3"} {
			b.target.script(tn, "deploy", 500)
		}
		fv := b.create(fs)
		pv := b.waitPlan(b.coord, fv.ID, plan.StatusPaused)
		if pv.Reason != plan.ReasonFailureThreshold || pv.Counts[task.StatusFailed] != 2 || pv.Counts[task.StatusPending] != 2 {
			t.Fatalf("threshold pause: %s %q %v", pv.Status, pv.Reason, pv.Counts)
		}
		b.idle(b.coord)
		if _, err := b.coord.ResumePlan(ctx, fv.ID, facade.ResumeOptions{Reason: "INC-2 accepted"}, anyone); err != nil {
			t.Fatal(err)
		}
		pv = b.waitPlan(b.coord, fv.ID, plan.StatusPaused, plan.StatusFailed)
		b.idle(b.coord)
		pv, _ = b.coord.Plan(ctx, fv.ID)
		if pv.Counts[task.StatusFailed] != 3 {
			t.Fatalf("after resume: %s %v", pv.Status, pv.Counts)
		}
	})
}

func TestCreatePlanRejectsBadInput(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		good := spec([]task.StageSpec{noopStage("a")}, "t-1")
		mutate := func(f func(*plan.Spec)) plan.Spec {
			s := good
			s.Tenants = slices.Clone(good.Tenants)
			s.Stages = slices.Clone(good.Stages)
			f(&s)
			return s
		}
		cases := map[string]plan.Spec{
			"BraceTenant":     mutate(func(s *plan.Spec) { s.Tenants[0].TenantID = "t-{1}" }),
			"ColonTenant":     mutate(func(s *plan.Spec) { s.Tenants[0].TenantID = "t:1" }),
			"GlobTenant":      mutate(func(s *plan.Spec) { s.Tenants[0].TenantID = "t-*" }),
			"NewlineTenant":   mutate(func(s *plan.Spec) { s.Tenants[0].TenantID = "t-1\nINFO forged" }),
			"DuplicateTenant": mutate(func(s *plan.Spec) { s.Tenants = append(s.Tenants, s.Tenants[0]) }),
			"DuplicateStage":  mutate(func(s *plan.Spec) { s.Stages = append(s.Stages, s.Stages[0]) }),
			"UnknownKind":     mutate(func(s *plan.Spec) { s.Stages[0].Kind = "teleport" }),
			"ExecInline": mutate(func(s *plan.Spec) {
				s.Stages[0] = task.StageSpec{Name: "x", Kind: "exec", Config: []byte(`{"argv":["/bin/true"]}`)}
			}),
			"HostNotAllowed": mutate(func(s *plan.Spec) {
				s.Stages[0] = task.StageSpec{Name: "x", Kind: "http", Config: []byte(`{"url":"http://example.com/x"}`)}
			}),
			"MetadataHost": mutate(func(s *plan.Spec) {
				s.Stages[0] = task.StageSpec{Name: "x", Kind: "http", Config: []byte(`{"url":"http://169.254.169.254/latest"}`)}
			}),
			"UnknownPipeline": mutate(func(s *plan.Spec) { s.Stages = nil; s.Pipeline = "nope" }),
			"NoTenants":       mutate(func(s *plan.Spec) { s.Tenants = nil }),
		}
		for name, s := range cases {
			_, err := b.coord.CreatePlan(context.Background(), s, anyone)
			if !errors.Is(err, facade.ErrInvalid) {
				t.Fatalf("%s: got %v, want ErrInvalid", name, err)
			}
		}
		keys, err := redistest.KeysUnder(context.Background(), b.client, b.prefix)
		if err != nil {
			t.Fatal(err)
		}
		// The instance registers itself and publishes to the feed; nothing
		// else may be written.
		var written []string
		for _, k := range keys {
			rest := strings.TrimPrefix(k, b.prefix)
			if !strings.HasPrefix(rest, "instance") && rest != "events" {
				written = append(written, k)
			}
		}
		if len(written) != 0 {
			t.Fatalf("bad input wrote keys: %v", written)
		}
	})
}

// TestStageTransitionRoundTrips checks the write budget end to end: a task
// of N stages costs one round trip to take the lock and its fence, one to
// mark it RUNNING and one per stage (the last also completes the task,
// moves the plan counts and releases the lock).
func TestStageTransitionRoundTrips(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, withConfig(func(c *facade.Config) { c.PlanPoll = time.Hour; c.Lease = time.Minute; c.Heartbeat = time.Hour }))
		// The feed is published in batches by its own goroutine, off the
		// task's path: count everything but its XADD pipelines.
		feed := &feedFilter{}
		b.client.AddHook(feed)
		const n = 10
		stages := make([]task.StageSpec, n)
		for i := range stages {
			stages[i] = noopStage("s" + string(rune('a'+i)))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		// Warm the script cache and the connection pool. On a cluster the
		// tenant lock's script is loaded (EVALSHA, NOSCRIPT, EVAL) per master
		// on first use there: warm it on every master, or t-run's lock,
		// when on another master than t-warm's, costs one more round trip.
		b.create(spec(stages, warmTenants(ctx, t, b)...))
		if err := b.coord.Idle(ctx); err != nil {
			t.Fatal(err)
		}
		created := spec(stages, "t-created")
		created.Start = new(bool)
		time.Sleep(100 * time.Millisecond) // let the warm-up's feed events go out
		feed.n.Store(0)
		createOnly := b.counter.Count(func() { b.create(created); time.Sleep(100 * time.Millisecond) }) - feed.n.Swap(0)
		run := b.counter.Count(func() {
			b.create(spec(stages, "t-run"))
			if err := b.coord.Idle(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		})
		if got, want := run-createOnly-feed.n.Load(), int64(1+n); got != want {
			t.Fatalf("running a task of %d stages took %d round trips, want %d (the start, which takes the lock, 1; one per stage)", n, got, want)
		}
		b.waitTask(b.coord, "t-run", task.StatusCompleted)
	})
}

// warmTenants returns "t-warm" and, on a cluster, a tenant whose lock key
// is on each master, so their runs load the lock scripts everywhere.
func warmTenants(ctx context.Context, t *testing.T, b *bundle) []string {
	t.Helper()
	warm := []string{"t-warm"}
	cc, ok := b.client.(*redis.ClusterClient)
	if !ok {
		return warm
	}
	var n atomic.Int64 // ForEachMaster calls its function concurrently
	if err := cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { n.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	masters := int(n.Load())
	keys := b.store.Keys()
	seen := map[string]bool{}
	for i := 0; len(seen) < masters; i++ {
		if i == 1000 {
			t.Fatalf("no warm-up tenant on %d of %d masters", masters-len(seen), masters)
		}
		tn := fmt.Sprintf("t-warm-%d", i)
		k, err := keys.Lock(tn)
		if err != nil {
			t.Fatal(err)
		}
		m, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if addr := m.Options().Addr; !seen[addr] {
			seen[addr] = true
			warm = append(warm, tn)
		}
	}
	return warm
}

// feedFilter counts the pipelines made only of XADD (the event feed).
type feedFilter struct{ n atomic.Int64 }

func (f *feedFilter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (f *feedFilter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (f *feedFilter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		// A feed append is append_events.lua on the events stream (an
		// XADD before the feed was batched).
		feed := len(cmds) > 0
		for _, c := range cmds {
			var key string
			if args := c.Args(); len(args) > 3 {
				key = asString(args[3])
			}
			if c.Name() != "xadd" && !((c.Name() == "evalsha" || c.Name() == "eval") && strings.HasSuffix(key, "events")) {
				feed = false
			}
		}
		if feed {
			f.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestRepairCounts: counts corrupted by hand in Redis are recomputed from
// the task records by the operator action, and the plan status follows.
func TestRepairCounts(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		v := b.create(spec([]task.StageSpec{noopStage("a")}, "t-1", "t-2", "t-3"))
		b.waitPlan(b.coord, v.ID, plan.StatusCompleted)
		key, err := b.store.Keys().PlanCounts(v.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.client.HSet(ctx, key, "COMPLETED", 1, "FAILED", 2).Err(); err != nil {
			t.Fatal(err)
		}
		if pv, _ := b.coord.Plan(ctx, v.ID); pv.Counts[task.StatusFailed] != 2 {
			t.Fatalf("corruption did not take: %v", pv.Counts)
		}
		_, err = b.coord.RepairCounts(ctx, v.ID, "", anyone)
		mustCode(t, err, facade.ErrInvalid)
		pv, err := b.coord.RepairCounts(ctx, v.ID, "counts disagree with the task list", anyone)
		if err != nil {
			t.Fatal(err)
		}
		if pv.Counts[task.StatusCompleted] != 3 || pv.Counts[task.StatusFailed] != 0 || pv.Status != plan.StatusCompleted {
			t.Fatalf("after repair: %s %v", pv.Status, pv.Counts)
		}
		_, err = b.coord.RepairCounts(ctx, plan.NewID(time.Now()), "x", anyone)
		mustCode(t, err, facade.ErrNotFound)
	})
}
