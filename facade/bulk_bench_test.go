package facade_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
)

// bulkBench is one coordinator as the server wires it (the Dual store, a
// Redis locker, shared plans) on a throwaway redis-server of its own, with
// two stage kinds: fail (fails at once, not retryable) and hold (50 ms).
type bulkBench struct {
	b       *testing.B
	client  *redis.Client
	counter *redistest.Counter
	coord   *facade.Coordinator
}

func newBulkBench(b *testing.B) *bulkBench {
	reg := stage.NewRegistry(stage.Options{InlineKinds: []string{"noop", "fail", "hold"}})
	if err := reg.Register("fail", stage.KindFunc(func(task.StageSpec, stage.Env) (stage.Runnable, error) {
		return stage.RunFunc(func(context.Context, stage.Input) task.Result { return task.Failure("bench: target down", false) }), nil
	})); err != nil {
		b.Fatal(err)
	}
	if err := reg.Register("hold", stage.KindFunc(func(task.StageSpec, stage.Env) (stage.Runnable, error) {
		return stage.RunFunc(func(ctx context.Context, _ stage.Input) task.Result {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			return task.Success(nil)
		}), nil
	})); err != nil {
		b.Fatal(err)
	}
	client, c := serverWired(b, reg, func(cfg *facade.Config) { cfg.MaxTenants = 100000 })
	counter := &redistest.Counter{}
	client.AddHook(counter)
	return &bulkBench{b: b, client: client, counter: counter, coord: c}
}

// benchTasks is the plan size: BULK_N, 2 000 by default.
func benchTasks() int {
	if n, err := strconv.Atoi(os.Getenv("BULK_N")); err == nil && n > 0 {
		return n
	}
	return 2000
}

func (bb *bulkBench) plan(name string, n int, stages []task.StageSpec, maxConcurrency int) string {
	s := plan.Spec{Name: name, Stages: stages, MaxConcurrency: maxConcurrency, FailureThreshold: &plan.FailureThreshold{MaxFailed: n}}
	for j := range n {
		s.Tenants = append(s.Tenants, plan.TenantSpec{TenantID: fmt.Sprintf("%s-%05d", name, j)})
	}
	v, err := bb.coord.CreatePlan(context.Background(), s, anyone)
	if err != nil {
		bb.b.Fatal(err)
	}
	return v.ID
}

func (bb *bulkBench) waitPlan(id string, want plan.Status) {
	ctx := context.Background()
	for {
		pv, err := bb.coord.Plan(ctx, id)
		if err != nil {
			bb.b.Fatal(err)
		}
		if pv.Status == want {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := bb.coord.Idle(ctx); err != nil {
		bb.b.Fatal(err)
	}
}

// BenchmarkBulkRetry retries the BULK_N FAILED tasks of a plan in one call
// (POST /v1/plans/{id}/retry) and reports rt/task, the round trips of the
// whole process per retried task (the retried tasks run and fail again
// meanwhile, as they would in production) and the Redis server's CPU per
// task. ns/op is one bulk retry.
//
//	go test ./facade -run XXX -bench BulkRetry -benchtime 3x -count 5
func BenchmarkBulkRetry(b *testing.B) {
	bb := newBulkBench(b)
	n := benchTasks()
	id := bb.plan("retry", n, []task.StageSpec{{Name: "s0", Kind: "fail"}}, 64)
	bb.waitPlan(id, plan.StatusFailed)
	req := facade.PlanRetryRequest{Statuses: []task.Status{task.StatusFailed}, Reason: "bench"}
	var rt int64
	cpu0 := redisCPU(b, bb.client)
	b.ResetTimer()
	for range b.N {
		var res facade.PlanRetryResult
		var err error
		rt += bb.counter.Count(func() { res, err = bb.coord.RetryPlan(context.Background(), id, req, anyone) })
		if err != nil || len(res.Retried) != n {
			b.Fatalf("retried %d of %d: %v (%v)", len(res.Retried), n, err, res.Skipped[:min(len(res.Skipped), 3)])
		}
		b.StopTimer()
		bb.waitPlan(id, plan.StatusFailed)
		b.StartTimer()
	}
	b.ReportMetric(float64(rt)/float64(b.N*n), "rt/task")
	// The retried tasks' runs included: they fail again meanwhile.
	b.ReportMetric(float64((redisCPU(b, bb.client)-cpu0).Microseconds())/float64(b.N*n), "redis-µs/task")
}

// BenchmarkBulkCancel cancels a RUNNING plan of BULK_N tasks (4 running,
// the rest PENDING on the shared queue) in one call and reports rt/task
// and the Redis server's CPU per task during the call.
// ns/op is one cancel.
//
//	go test ./facade -run XXX -bench BulkCancel -benchtime 3x -count 5
func BenchmarkBulkCancel(b *testing.B) {
	bb := newBulkBench(b)
	n := benchTasks()
	var (
		rt  int64
		cpu time.Duration
	)
	b.StopTimer()
	for i := range b.N {
		id := bb.plan(fmt.Sprintf("cancel%d", i), n, []task.StageSpec{{Name: "s0", Kind: "hold"}, {Name: "s1", Kind: "hold"}}, 4)
		time.Sleep(20 * time.Millisecond) // let the run start its first tasks
		cpu0 := redisCPU(b, bb.client)
		b.StartTimer()
		rt += bb.counter.Count(func() {
			if _, err := bb.coord.CancelPlan(context.Background(), id, "bench", anyone); err != nil {
				b.Fatal(err)
			}
		})
		b.StopTimer()
		cpu += redisCPU(b, bb.client) - cpu0
		bb.waitPlan(id, plan.StatusCancelled)
	}
	b.ReportMetric(float64(rt)/float64(b.N*n), "rt/task")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), "redis-µs/task")
}
