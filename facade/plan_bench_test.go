package facade_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// BenchmarkPlanNoop runs plans of 1 000 tenants × 1 noop stage through one
// coordinator as the server wires it (the Dual store, a Redis locker,
// shared plans) on a throwaway redis-server of its own, and reports per
// task: allocs/task and B/task (the whole process, background work
// included; they move little with the machine's load), go-µs/task (this
// process's CPU), redis-µs/task and redis-cmds/task. ns/op is a whole plan.
//
//	go test ./facade -run XXX -bench PlanNoop -benchtime 5x -count 5
func BenchmarkPlanNoop(b *testing.B) {
	const n = 1000
	client, c := serverWired(b, stage.NewRegistry(stage.Options{}), func(*facade.Config) {})
	ctx := context.Background()
	run := func(i int) {
		s := plan.Spec{Name: "bench", Stages: []task.StageSpec{{Name: "s0", Kind: "noop"}}, MaxConcurrency: 64}
		for j := range n {
			s.Tenants = append(s.Tenants, plan.TenantSpec{TenantID: fmt.Sprintf("b%d-%04d", i, j)})
		}
		v, err := c.CreatePlan(ctx, s, anyone)
		if err != nil {
			b.Fatal(err)
		}
		for {
			pv, err := c.Plan(ctx, v.ID)
			if err != nil {
				b.Fatal(err)
			}
			if pv.Status == plan.StatusCompleted {
				break
			}
			if pv.Status != plan.StatusRunning {
				b.Fatalf("plan %s", pv.Status)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	run(-1) // warm: scripts loaded, pools filled
	if err := c.Idle(ctx); err != nil {
		b.Fatal(err)
	}
	cpu0, cmds0, self0 := redisCPU(b, client), redisCmds(b, client), selfCPU(b)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	for i := range b.N {
		run(i)
	}
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	tasks := float64(b.N * n)
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/tasks, "allocs/task")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/tasks, "B/task")
	b.ReportMetric(float64((selfCPU(b)-self0).Microseconds())/tasks, "go-µs/task")
	b.ReportMetric(float64((redisCPU(b, client)-cpu0).Microseconds())/tasks, "redis-µs/task")
	b.ReportMetric(float64(redisCmds(b, client)-cmds0)/tasks, "redis-cmds/task")
}

// redisCPU returns the server's CPU time so far.
func redisCPU(b *testing.B, c *redis.Client) time.Duration {
	d, err := redistest.ServerCPU(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// redisCmds returns how many commands the server ran so far, those of
// scripts included, INFO left out (INFO commandstats).
func redisCmds(b *testing.B, c *redis.Client) int64 {
	calls, err := redistest.CommandCalls(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for name, k := range calls {
		if name != "info" {
			n += k
		}
	}
	return n
}

// selfCPU returns this process's CPU time so far.
func selfCPU(b *testing.B) time.Duration {
	d, err := redistest.SelfCPU()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// serverWired returns a coordinator wired as cmd/deploycoord wires it (the
// Dual store with shared work, a Redis locker, shared plans) on a
// throwaway redis-server of its own, with the stage kinds of reg and its
// client; mod may change the configuration.
func serverWired(b *testing.B, reg *stage.Registry, mod func(*facade.Config)) (*redis.Client, *facade.Coordinator) {
	srv := redistest.StartServer(b)
	client := srv.Client()
	rs, err := repository.NewRedis(client, repository.Config{Prefix: "bench:"})
	if err != nil {
		b.Fatal(err)
	}
	keys := rs.Keys()
	store := repository.NewDual(repository.NewMemory(repository.MemoryConfig{DropFinished: true}), rs, repository.DualConfig{SharedWork: true})
	locks, err := redislock.New(client, redislock.Config{
		LockKey:  func(t string) string { k, _ := keys.Lock(t); return k },
		FenceKey: func(t string) string { k, _ := keys.Fence(t); return k },
	})
	if err != nil {
		b.Fatal(err)
	}
	log := zerolog.Nop()
	cfg := facade.Config{Instance: "bench-1", Stages: reg, Logger: &log, SharedPlans: true}
	mod(&cfg)
	c, err := facade.New(store, locks, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = c.Shutdown(sctx)
	})
	return client, c
}
