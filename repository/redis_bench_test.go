package repository_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
)

// Benchmarks of the store's hot paths on a throwaway redis-server of their
// own (so that Redis' CPU time is theirs alone). Besides ns/op each reports
// rtt/op (Redis round trips, counted by redistest.Counter) and redis-µs/op
// (the server's CPU time per operation, from INFO cpu). Compare runs with
// benchstat:
//
//	go test ./repository/ -run XXX -bench . -count 6 > old.txt

// benchEnv is a Redis store on a throwaway server.
type benchEnv struct {
	client  *redis.Client
	counter *redistest.Counter
	store   *repository.Redis
	keys    repository.Keys
}

func newBenchEnv(b testing.TB) *benchEnv {
	b.Helper()
	return newBenchEnvOn(b, redistest.StartServer(b).Client())
}

// newBenchEnvOn is newBenchEnv on the server of c.
func newBenchEnvOn(b testing.TB, c *redis.Client) *benchEnv {
	b.Helper()
	counter := &redistest.Counter{}
	c.AddHook(counter)
	store, err := repository.NewRedis(c, repository.Config{Prefix: "bench:"})
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Preload(context.Background()); err != nil {
		b.Fatal(err)
	}
	return &benchEnv{client: c, counter: counter, store: store, keys: store.Keys()}
}

// redisCPU returns the server's CPU time so far (INFO cpu, user + sys).
func (e *benchEnv) redisCPU(tb testing.TB) time.Duration {
	tb.Helper()
	d, err := redistest.ServerCPU(context.Background(), e.client)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// redisCommands returns how many times Redis has run each command so far,
// by name, those run by scripts included and INFO itself left out (INFO
// commandstats).
func (e *benchEnv) redisCommands(tb testing.TB) map[string]int64 {
	tb.Helper()
	out, err := redistest.CommandCalls(context.Background(), e.client)
	if err != nil {
		tb.Fatal(err)
	}
	delete(out, "info")
	return out
}

// redisCalls returns how many commands Redis has run so far, those run by
// scripts included (INFO commandstats).
func (e *benchEnv) redisCalls(tb testing.TB) int64 {
	var n int64
	for _, c := range e.redisCommands(tb) {
		n += c
	}
	return n
}

// measure runs the benchmark loop f and reports rtt/op, redis-µs/op and
// redis-cmds/op (commands Redis ran, those of scripts and the scripts
// themselves included: a measure of its work that does not depend on the
// machine's load).
func (e *benchEnv) measure(b *testing.B, f func()) {
	b.Helper()
	cpu0 := e.redisCPU(b)
	calls0 := e.redisCalls(b)
	rtt0 := e.counter.RoundTrips()
	b.ResetTimer()
	f()
	b.StopTimer()
	rtt := e.counter.RoundTrips() - rtt0
	cpu := e.redisCPU(b) - cpu0
	calls := e.redisCalls(b) - calls0
	b.ReportMetric(float64(rtt)/float64(b.N), "rtt/op")
	// INFO cpu has 1 ms resolution; the metric means something from a few
	// thousand operations on.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "redis-µs/op")
	b.ReportMetric(float64(calls-1)/float64(b.N), "redis-cmds/op")
}

var benchStages = []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"}

// createPlan stores a RUNNING plan of n PENDING tasks (tenants b-000000..)
// with the benchmark's ten stages.
func (e *benchEnv) createPlan(b *testing.B, n int) (*plan.Plan, []*task.Task) {
	b.Helper()
	p, tasks := newPlan(n, 0)
	if err := e.store.CreatePlan(context.Background(), p, tasks); err != nil {
		b.Fatalf("CreatePlan: %v", err)
	}
	return p, tasks
}

// newPlan returns a RUNNING plan of n PENDING tasks for tenants from first on.
func newPlan(n, first int) (*plan.Plan, []*task.Task) {
	now := time.Now()
	specs := make([]task.StageSpec, len(benchStages))
	for i, s := range benchStages {
		specs[i] = task.StageSpec{Name: s, Kind: "noop"}
	}
	p := &plan.Plan{
		ID: plan.NewID(now), Name: "bench", Status: plan.StatusCreated, Stages: specs, MaxConcurrency: 64,
		OnTenantLocked: plan.LockFail, TotalTasks: n, CreatedAt: now, UpdatedAt: now,
	}
	_ = p.Start(now, "bench-1")
	tasks := make([]*task.Task, n)
	for i := range tasks {
		tasks[i] = task.New(task.NewID(now), p.ID, fmt.Sprintf("b-%06d", first+i), nil, benchStages, now)
	}
	return p, tasks
}

// lock sets the tenant's lock as tenantlock would and returns the guard.
func (e *benchEnv) lock(b *testing.B, tenantID string, fence int64) task.Guard {
	b.Helper()
	k, err := e.keys.Lock(tenantID)
	if err != nil {
		b.Fatal(err)
	}
	g := task.Guard{LockValue: `{"planId":"p","taskId":"t","owner":"bench-1","nonce":"` + tenantID + `"}`, Fence: fence}
	if err := e.client.Set(context.Background(), k, g.LockValue, time.Hour).Err(); err != nil {
		b.Fatal(err)
	}
	return g
}

// start moves t PENDING → RUNNING under g, as the runner's first write does.
func (e *benchEnv) start(b *testing.B, t *task.Task, g task.Guard) {
	b.Helper()
	now := time.Now()
	if err := t.Start(now, "bench-1", g.Fence); err != nil {
		b.Fatal(err)
	}
	res, err := e.store.WriteTask(context.Background(), task.Write{
		Task: t, PrevStatus: task.StatusPending, ExpectSeq: t.Seq, Guard: g,
		Events: []task.Event{{At: now, Type: task.EventStarted, Instance: "bench-1", Fence: g.Fence}},
	})
	if err != nil {
		b.Fatalf("start: %v", err)
	}
	t.Seq = res.Seq
}

// BenchmarkWriteTaskStage is one stage transition of a RUNNING task: record,
// checkpoint (five stages done) and two timeline entries in write_task.lua,
// the counts left alone. Budget: 1 round trip. writes=delta sends the
// fields that changed (the default), writes=full every field
// (Config.FullWrites).
func BenchmarkWriteTaskStage(b *testing.B) {
	for _, full := range []bool{false, true} {
		name := "writes=delta"
		if full {
			name = "writes=full"
		}
		b.Run(name, func(b *testing.B) { benchWriteTaskStage(b, full) })
	}
}

func benchWriteTaskStage(b *testing.B, full bool) {
	e := newBenchEnv(b)
	store, err := repository.NewRedis(e.client, repository.Config{Prefix: "bench:", FullWrites: full})
	if err != nil {
		b.Fatal(err)
	}
	e.store = store
	_, tasks := e.createPlan(b, 1)
	t := tasks[0]
	g := e.lock(b, t.TenantID, 1)
	e.start(b, t, g)
	ck := checkpoint.Empty()
	for i := range 5 {
		var err error
		if ck, err = ck.Complete(i, benchStages[i], map[string]any{"version": "1.2.3"}); err != nil {
			b.Fatal(err)
		}
	}
	ck = ck.Stamp(time.Now(), 1, g.Fence)
	ctx := context.Background()
	e.measure(b, func() {
		for i := range b.N {
			now := time.Now()
			t.EnterStage(i%len(benchStages), benchStages[i%len(benchStages)], now)
			res, err := e.store.WriteTask(ctx, task.Write{
				Task: t, PrevStatus: task.StatusRunning, ExpectSeq: t.Seq, Guard: g, Checkpoint: &ck,
				Events: []task.Event{
					task.Event{At: now, Type: task.EventStageStarted}.AtStage(4, "s4"),
					task.Event{At: now, Type: task.EventStageSucceeded}.AtStage(4, "s4"),
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			t.Seq = res.Seq
		}
	})
}

// BenchmarkWriteTaskStart is the first write of a task's run, PENDING →
// RUNNING: write_task.lua and move_plan_counts.lua in one pipeline. Budget: 1
// round trip.
func BenchmarkWriteTaskStart(b *testing.B) {
	e := newBenchEnv(b)
	_, tasks := e.createPlan(b, b.N)
	guards := make([]task.Guard, b.N)
	for i, t := range tasks {
		guards[i] = e.lock(b, t.TenantID, 1)
	}
	e.measure(b, func() {
		for i, t := range tasks {
			e.start(b, t, guards[i])
		}
	})
}

// BenchmarkWriteTaskStageParallel is BenchmarkWriteTaskStage from many
// goroutines, each on a task of its own: the store's throughput of stage
// transitions.
func BenchmarkWriteTaskStageParallel(b *testing.B) {
	e := newBenchEnv(b)
	const tasks = 256
	_, ts := e.createPlan(b, tasks)
	guards := make([]task.Guard, tasks)
	for i, t := range ts {
		guards[i] = e.lock(b, t.TenantID, 1)
		e.start(b, t, guards[i])
	}
	next := make(chan int, tasks)
	for i := range tasks {
		next <- i
	}
	ctx := context.Background()
	e.measure(b, func() {
		b.RunParallel(func(pb *testing.PB) {
			i := <-next
			t, g := ts[i], guards[i]
			for pb.Next() {
				now := time.Now()
				res, err := e.store.WriteTask(ctx, task.Write{
					Task: t, PrevStatus: task.StatusRunning, ExpectSeq: t.Seq, Guard: g,
					Events: []task.Event{task.Event{At: now, Type: task.EventStageSucceeded}.AtStage(0, "s0")},
				})
				if err != nil {
					b.Error(err)
					return
				}
				t.Seq = res.Seq
			}
		})
	})
}

// BenchmarkTaskByTenant is the tenant query: the index, then the record and
// checkpoint in one pipeline. Budget: at most 2 round trips.
func BenchmarkTaskByTenant(b *testing.B) {
	e := newBenchEnv(b)
	_, tasks := e.createPlan(b, 100)
	for _, t := range tasks {
		e.start(b, t, e.lock(b, t.TenantID, 1))
	}
	ctx := context.Background()
	e.measure(b, func() {
		for i := range b.N {
			t, _, err := e.store.TaskByTenant(ctx, tasks[i%len(tasks)].TenantID)
			if err != nil || t.Status != task.StatusRunning {
				b.Fatalf("TaskByTenant: %v, %v", t, err)
			}
		}
	})
}

// BenchmarkPlan is the plan status query on plans of growing size: its cost
// must not grow with the plan (1 round trip).
func BenchmarkPlan(b *testing.B) {
	for _, n := range []int{1_000, 20_000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			e := newBenchEnv(b)
			p, _ := e.createPlan(b, n)
			ctx := context.Background()
			e.measure(b, func() {
				for range b.N {
					_, counts, err := e.store.Plan(ctx, p.ID)
					if err != nil || counts[task.StatusPending] != n {
						b.Fatalf("Plan: %v, %v", counts, err)
					}
				}
			})
		})
	}
}

// BenchmarkCreatePlan creates a plan of 1 000 tasks per operation: the plan
// record, then pipelines of 500 tasks. Budget: 1 + ⌈1000/500⌉ = 3 round trips.
func BenchmarkCreatePlan(b *testing.B) {
	const n = 1000
	e := newBenchEnv(b)
	plans := make([]*plan.Plan, b.N)
	tasks := make([][]*task.Task, b.N)
	for i := range plans {
		plans[i], tasks[i] = newPlan(n, i*n)
	}
	ctx := context.Background()
	e.measure(b, func() {
		for i, p := range plans {
			if err := e.store.CreatePlan(ctx, p, tasks[i]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/task")
}

// BenchmarkWriteTaskRunParallel is the storage work of a plan's tasks as
// the runner does it, from 64 goroutines: per operation one task's start
// (PENDING → RUNNING) and final write (COMPLETED with a checkpoint, the
// lock released). Concurrent writes share pipelines (group commit), so
// rtt/op is below 2 (2 without it); redis-µs/op is Redis' CPU per task.
func BenchmarkWriteTaskRunParallel(b *testing.B) {
	for _, batching := range []bool{true, false} {
		b.Run(fmt.Sprintf("batching=%v", batching), func(b *testing.B) {
			e := newBenchEnv(b)
			store, err := repository.NewRedis(e.client, repository.Config{Prefix: "bench:", NoWriteBatching: !batching})
			if err != nil {
				b.Fatal(err)
			}
			e.store = store
			_, tasks := e.createPlan(b, b.N)
			guards := make([]task.Guard, b.N)
			for i, t := range tasks {
				guards[i] = e.lock(b, t.TenantID, 1)
			}
			var next atomic.Int64
			ctx := context.Background()
			e.measure(b, func() {
				var wg sync.WaitGroup
				for range 64 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := int(next.Add(1)) - 1
							if i >= len(tasks) {
								return
							}
							t, g := tasks[i], guards[i]
							e.start(b, t, g)
							now := time.Now()
							ck, _ := checkpoint.Empty().Complete(0, "s0", nil)
							ck = ck.Stamp(now, 1, g.Fence)
							t.EnterStage(0, "s0", now)
							if err := t.Complete(now); err != nil {
								b.Error(err)
								return
							}
							if _, err := e.store.WriteTask(ctx, task.Write{
								Task: t, PrevStatus: task.StatusRunning, ExpectSeq: t.Seq, Guard: g, Checkpoint: &ck, ReleaseLock: true,
								Events: []task.Event{
									task.Event{At: now, Type: task.EventStageSucceeded, Attempt: 1}.AtStage(0, "s0"),
									{At: now, Type: task.EventCompleted, Attempt: 1, Instance: "bench-1"},
								},
							}); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			})
		})
	}
}

// BenchmarkBackfillLegacyKeys times a backfill of the storage-layout-1 keys
// (legacy.go) of a store holding one plan of 100 000 tasks, each of its own
// tenant, on a throwaway redis-server. The first backfill writes every
// tenant index and taskref; later ones only the taskrefs (-benchtime 1x
// for the first alone).
func BenchmarkBackfillLegacyKeys(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	const n = 100_000
	p, tasks := newPlan(n, 0)
	if err := e.store.CreatePlan(ctx, p, tasks); err != nil {
		b.Fatal(err)
	}
	cpu0 := e.redisCPU(b)
	for b.Loop() {
		res, err := e.store.BackfillLegacyKeys(ctx)
		if err != nil || res.Tasks != n {
			b.Fatalf("backfill = %+v, %v; want %d taskrefs", res, err, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/task")
	b.ReportMetric(float64((e.redisCPU(b)-cpu0).Microseconds())/float64(b.N*n), "redis-µs/task")
}
