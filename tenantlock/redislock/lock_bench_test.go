package redislock_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/tenantlock"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// Benchmarks of the lock's hot path on a throwaway redis-server of their
// own. Besides ns/op each reports rtt/op (Redis round trips, counted by
// redistest.Counter) and redis-µs/op (the server's CPU time per operation,
// from INFO cpu) and go-µs/op (this process's CPU time per operation, from
// getrusage). TENANTLOCK_BENCH_UNBATCHED=1 runs them with Config.Unbatched.
// Compare runs with benchstat:
//
//	go test ./tenantlock/redislock/ -run XXX -bench . -count 6 > old.txt

func newBenchLocker(b *testing.B) (*redislock.Locker, *redistest.Counter, func() time.Duration) {
	b.Helper()
	srv := redistest.StartServer(b)
	c := srv.Client()
	counter := &redistest.Counter{}
	c.AddHook(counter)
	l, err := redislock.New(c, redislock.Config{
		Unbatched: os.Getenv("TENANTLOCK_BENCH_UNBATCHED") != "",
		LockKey:   func(t string) string { return "bench:lock:tenant:{" + t + "}" },
		FenceKey:  func(t string) string { return "bench:fence:tenant:{" + t + "}" },
	})
	if err != nil {
		b.Fatal(err)
	}
	redisCPU := func() time.Duration {
		d, err := redistest.ServerCPU(context.Background(), c)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	// Warm up: the scripts are loaded (NOSCRIPT once), a connection is open.
	lease, err := l.Acquire(context.Background(), "warm-up", tenantlock.Holder{PlanID: "p", TaskID: "t", Instance: "bench-1"})
	if err != nil {
		b.Fatal(err)
	}
	if err := lease.Release(context.Background()); err != nil {
		b.Fatal(err)
	}
	return l, counter, redisCPU
}

func report(b *testing.B, counter *redistest.Counter, redisCPU func() time.Duration, f func()) {
	b.Helper()
	cpu0, rtt0, self0 := redisCPU(), counter.RoundTrips(), selfCPU(b)
	b.ResetTimer()
	f()
	b.StopTimer()
	b.ReportMetric(float64(counter.RoundTrips()-rtt0)/float64(b.N), "rtt/op")
	b.ReportMetric(float64((selfCPU(b)-self0).Nanoseconds())/1e3/float64(b.N), "go-µs/op")
	// INFO cpu has 1 ms resolution: meaningful from a few thousand operations.
	b.ReportMetric(float64((redisCPU()-cpu0).Microseconds())/float64(b.N), "redis-µs/op")
}

// selfCPU returns the CPU time (user and system) of this process so far.
func selfCPU(b *testing.B) time.Duration {
	d, err := redistest.SelfCPU()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkAcquireRelease takes a tenant's lock with a new fencing token
// (acquire_lock.lua, 1 round trip) and releases it (redsync's
// compare-and-delete, 1 round trip), as a task run does when its last write
// does not release the lock itself.
func BenchmarkAcquireRelease(b *testing.B) {
	l, counter, redisCPU := newBenchLocker(b)
	ctx := context.Background()
	h := tenantlock.Holder{PlanID: "plan-1", TaskID: "task-1", Instance: "bench-1"}
	report(b, counter, redisCPU, func() {
		for i := range b.N {
			lease, err := l.Acquire(ctx, fmt.Sprintf("tenant-%d", i%1000), h)
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAcquire takes the lock of a new tenant each time and lets go of
// the lease without touching Redis (Forget), as a task run does when its
// final write deletes the lock: the cost of a task start's lock.
func BenchmarkAcquire(b *testing.B) {
	l, counter, redisCPU := newBenchLocker(b)
	ctx := context.Background()
	h := tenantlock.Holder{PlanID: "plan-1", TaskID: "task-1", Instance: "bench-1"}
	report(b, counter, redisCPU, func() {
		for i := range b.N {
			lease, err := l.Acquire(ctx, "tenant-"+strconv.Itoa(i), h)
			if err != nil {
				b.Fatal(err)
			}
			lease.Forget()
		}
	})
}

// BenchmarkAcquireParallel is BenchmarkAcquire from many goroutines: the
// lock's throughput of task starts.
func BenchmarkAcquireParallel(b *testing.B) { benchAcquireParallel(b, 1) }

// BenchmarkAcquireConcurrent is BenchmarkAcquireParallel from 64
// goroutines, the coordinator's default maxConcurrency: task starts as a
// plan run makes them.
func BenchmarkAcquireConcurrent(b *testing.B) {
	benchAcquireParallel(b, max(1, 64/runtime.GOMAXPROCS(0)))
}

// benchAcquireParallel acquires (and forgets) a lease of a new tenant in
// each iteration from parallelism × GOMAXPROCS goroutines.
func benchAcquireParallel(b *testing.B, parallelism int) {
	l, counter, redisCPU := newBenchLocker(b)
	ctx := context.Background()
	h := tenantlock.Holder{PlanID: "plan-1", TaskID: "task-1", Instance: "bench-1"}
	var next atomic.Int64
	b.SetParallelism(parallelism)
	report(b, counter, redisCPU, func() {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				lease, err := l.Acquire(ctx, "tenant-"+strconv.FormatInt(next.Add(1), 10), h)
				if err != nil {
					b.Error(err)
					return
				}
				lease.Forget()
			}
		})
	})
}

// BenchmarkAcquireLocked is a refused acquisition: the lock is held, so
// Acquire reads the holder (View) and returns a *tenantlock.LockedError.
func BenchmarkAcquireLocked(b *testing.B) {
	l, counter, redisCPU := newBenchLocker(b)
	ctx := context.Background()
	held, err := l.Acquire(ctx, "busy", tenantlock.Holder{PlanID: "plan-0", TaskID: "task-0", Instance: "other"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = held.Release(context.Background()) })
	h := tenantlock.Holder{PlanID: "plan-1", TaskID: "task-1", Instance: "bench-1"}
	report(b, counter, redisCPU, func() {
		for range b.N {
			if _, err := l.Acquire(ctx, "busy", h); err == nil {
				b.Fatal("acquired a held lock")
			}
		}
	})
}
