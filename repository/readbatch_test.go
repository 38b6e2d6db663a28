package repository

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// queryAll asks for every task of fx from queriers goroutines, rounds times
// each, by tenant and by id, checks every answer names the task asked for,
// and returns the round trips the queries took.
func queryAll(t *testing.T, e *env, fx fixture, queriers, rounds int) int {
	t.Helper()
	ctx := ctxT(t)
	before := e.counter.RoundTrips()
	concurrently(t, queriers, func(g int) error {
		for i := range rounds {
			want := fx.tasks[(g*rounds+i)%len(fx.tasks)]
			got, _, err := e.store.TaskByTenant(ctx, want.TenantID)
			if err == nil && (got.ID != want.ID || got.TenantID != want.TenantID) {
				err = errors.New("TaskByTenant(" + want.TenantID + ") answered " + got.TenantID + "/" + got.ID)
			}
			if err == nil {
				got, _, err = e.store.Task(ctx, want.ID)
				if err == nil && got.ID != want.ID {
					err = errors.New("Task(" + want.ID + ") answered " + got.ID)
				}
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	return int(e.counter.RoundTrips() - before)
}

// concurrently runs f(0) … f(n-1) in goroutines of their own and fails the
// test with the errors they return.
func concurrently(t *testing.T, n int, f func(g int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(g); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// batchState is what a group-commit batcher says about itself.
type batchState interface {
	busy() bool
	queued() int
}

// heldBatch runs op(0) … op(n-1) in goroutines of their own so that they
// meet in b: the first pipeline carrying a command named cmd is held in
// flight until the other n-1 ops have queued behind it. It returns the
// round trips the ops took (2 when the queued ones share one pipeline).
func heldBatch(t *testing.T, e *env, b batchState, cmd string, n int, op func(i int) error) int64 {
	t.Helper()
	hold := &holdFirst{name: cmd, release: make(chan struct{})}
	e.client.AddHook(hold)
	hold.armed.Store(true)
	before := e.counter.RoundTrips()
	errs := make(chan error, n)
	run := func(i int) { errs <- op(i) }
	go run(0)
	deadline := time.Now().Add(10 * time.Second)
	for !b.busy() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < n; i++ {
		go run(i)
	}
	for b.queued() < n-1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(hold.release)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return e.counter.RoundTrips() - before
}

// holdFirst holds the first pipeline holding a command named name sent
// once armed until release is closed, so that requests arrive while it is
// in flight.
type holdFirst struct {
	name    string
	armed   atomic.Bool
	release chan struct{}
}

func (h *holdFirst) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *holdFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *holdFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == h.name && h.armed.CompareAndSwap(true, false) {
				<-h.release
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestReadBatchSharesPipelines: queries made while a pipeline of reads is in
// flight share the next one — with the first query's pipeline held until 31
// more queries have queued, the 32 take exactly two round trips, and each
// gets its own answer; under a random concurrent load every answer is
// still its own; without batching each query takes its own round trips
// (TaskByTenant 1 with a hint, Task 2).
func TestReadBatchSharesPipelines(t *testing.T) {
	t.Parallel()
	const tenants, queriers, rounds = 32, 16, 20
	t.Run("batching", func(t *testing.T) {
		t.Parallel()
		eachRedis(t, Config{}, func(t *testing.T, e *env) {
			fx := createPlan(t, e, tenants, 0)
			queryAll(t, e, fx, 1, tenants) // fills the hints and kept records (PENDING tasks): one round trip, GET + HMGET, a query from now on
			ctx := ctxT(t)
			n := heldBatch(t, e, e.redis.reads, "hmget", tenants, func(i int) error {
				want := fx.tasks[i]
				got, _, err := e.store.TaskByTenant(ctx, want.TenantID)
				if err == nil && got.ID != want.ID {
					err = errors.New("TaskByTenant(" + want.TenantID + ") answered " + got.ID)
				}
				return err
			})
			if n != 2 {
				t.Errorf("%d queries, %d of them queued behind the first, took %d round trips, want 2 (the first's and one shared)", tenants, tenants-1, n)
			}
			n = int64(queryAll(t, e, fx, queriers, rounds))
			t.Logf("%d queries under random concurrent load in %d round trips", 2*queriers*rounds, n)
		})
	})
	t.Run("NoReadBatching", func(t *testing.T) {
		t.Parallel()
		eachRedis(t, Config{NoReadBatching: true}, func(t *testing.T, e *env) {
			fx := createPlan(t, e, tenants, 0)
			queryAll(t, e, fx, 1, tenants)
			if n := queryAll(t, e, fx, queriers, rounds); n != queriers*rounds*3 {
				t.Errorf("%d queries without batching took %d round trips, want 3 per pair", 2*queriers*rounds, n)
			}
		})
	})
}

// TestReadBatchCallerGivesUp: a query queued behind a pipeline of reads in
// flight whose context ends gets the context's error at once; the query in
// flight answers when Redis does, and queries go on.
func TestReadBatchCallerGivesUp(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	e := newRedisEnv(t, c, "x:", Config{})
	ctx := ctxT(t)
	fx := createPlan(t, e, 2, 0)

	srv.Stop()
	leaderDone := make(chan error, 1)
	go func() {
		got, _, err := e.store.TaskByTenant(ctx, fx.tasks[0].TenantID)
		if err == nil && got.ID != fx.tasks[0].ID {
			err = errors.New("wrong task " + got.ID)
		}
		leaderDone <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !e.redis.reads.busy() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	qctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, _, err := e.store.TaskByTenant(qctx, fx.tasks[1].TenantID)
	if !IsUnavailable(err) || !errors.Is(err, context.DeadlineExceeded) || time.Since(began) > 3*time.Second {
		srv.Cont()
		t.Fatalf("queued query whose deadline passed: %v after %s, want unavailable (deadline) at once", err, time.Since(began))
	}
	srv.Cont()
	if err := <-leaderDone; err != nil {
		t.Fatalf("query in flight: %v", err)
	}
	got, _, err := e.store.TaskByTenant(ctx, fx.tasks[1].TenantID)
	if err != nil || got.ID != fx.tasks[1].ID {
		t.Fatalf("query after Redis came back: %+v, %v", got, err)
	}
}

// TestReadBatchNotFoundAmongOthers: a tenant without a task answers
// task.ErrNotFound while the queries sharing its pipeline get their tasks.
func TestReadBatchNotFoundAmongOthers(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		fx := createPlan(t, e, 8, 0)
		ctx := ctxT(t)
		concurrently(t, 64, func(g int) error {
			if g%2 == 0 {
				if _, _, err := e.store.TaskByTenant(ctx, "nobody-"+tenantName(g)); !errors.Is(err, task.ErrNotFound) {
					return errors.New("missing tenant: " + errString(err))
				}
				return nil
			}
			want := fx.tasks[g%len(fx.tasks)]
			if got, _, err := e.store.TaskByTenant(ctx, want.TenantID); err != nil || got.ID != want.ID {
				return errors.New("tenant " + want.TenantID + ": " + errString(err))
			}
			return nil
		})
	})
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
