package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// memResult is the Go heap in use (after a GC) around one big plan run.
type memResult struct {
	tenants int
	// idle is measured once the coordinator has run a warm-up plan (pools
	// open, scripts loaded); during is the largest sample while the big plan
	// is created and runs, running the largest once CreatePlan returned;
	// after is measured once it finished.
	idle, during, running, after uint64
	samples                      int
	goroutinesIdle               int
	goroutinesAfter              int
	took                         time.Duration
}

// heapInUse collects garbage and returns HeapInuse.
func heapInUse() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// measureMemory runs a plan of n tenants × 1 noop stage and samples the heap
// before, during (every -mem-sample) and after it. After it, the memory half
// of the store must no longer hold the plan or its tasks.
func (e *env) measureMemory(ctx context.Context, n int) (memResult, error) {
	res := memResult{tenants: n}
	prefix := newPrefix("mem")
	defer func() { _ = e.reset(context.Background(), prefix) }()
	in, err := e.newInstance(e.client, prefix)
	if err != nil {
		return res, err
	}
	defer in.shutdown()
	if _, err := runOn(ctx, in, 10*n, 1000, 1, e.cfg.Concurrency, nil); err != nil {
		return res, err
	}
	res.idle = heapInUse()
	res.goroutinesIdle = runtime.NumGoroutine()

	var mu sync.Mutex
	var created atomic.Bool
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(e.cfg.MemSample)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			h := heapInUse()
			mu.Lock()
			if h > res.during && e.cfg.MemProfile != "" {
				_ = writeProfile("heap", e.cfg.MemProfile+".during")
			}
			res.during = max(res.during, h)
			if created.Load() {
				if h > res.running && e.cfg.MemProfile != "" {
					_ = writeProfile("heap", e.cfg.MemProfile+".running")
				}
				res.running = max(res.running, h)
			}
			res.samples++
			mu.Unlock()
		}
	}()
	start := time.Now()
	planID, err := runBig(ctx, in, n, e.cfg.Concurrency, func() { created.Store(true) })
	close(stop)
	<-sampled
	if err != nil {
		return res, err
	}
	res.took = time.Since(start)
	res.after = heapInUse()
	res.goroutinesAfter = runtime.NumGoroutine()
	if e.cfg.MemProfile != "" {
		if err := writeProfile("heap", e.cfg.MemProfile); err != nil {
			return res, err
		}
	}
	// Finished aggregates must have left memory (DropFinished): the memory
	// half knows neither the plan nor its tasks; Redis still does.
	if _, _, err := in.dual.Memory().Plan(ctx, planID); !errors.Is(err, plan.ErrNotFound) {
		return res, fmt.Errorf("finished plan %s still in memory (err %v)", planID, err)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		if _, _, err := in.dual.Memory().TaskByTenant(ctx, tenantID(i)); !errors.Is(err, task.ErrNotFound) {
			return res, fmt.Errorf("finished task of %s still in memory (err %v)", tenantID(i), err)
		}
	}
	return res, nil
}

// runBig creates and runs the big plan, leaving no reference to its spec or
// tasks behind, and checks it; created is called when CreatePlan returned.
func runBig(ctx context.Context, in *instance, n, concurrency int, created func()) (string, error) {
	pv, err := in.coord.CreatePlan(ctx, planSpec(0, n, 1, concurrency, true), facade.Actor{Name: "bench"})
	if err != nil {
		return "", fmt.Errorf("create plan: %w", err)
	}
	created()
	if err := in.coord.Idle(ctx); err != nil {
		return "", fmt.Errorf("wait for plan %s: %w", pv.ID, err)
	}
	return pv.ID, verifyCompleted(ctx, in, pv.ID, 0, n, 1)
}
