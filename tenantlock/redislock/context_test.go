package redislock

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/tenantlock"
	"github.com/redis/go-redis/v9"
)

// waitCtx waits for ctx to end and returns when it saw it, failing the test
// after within.
func waitCtx(t *testing.T, ctx context.Context, within time.Duration) time.Time {
	t.Helper()
	select {
	case <-ctx.Done():
		return time.Now()
	case <-time.After(within):
		t.Fatalf("lease context not cancelled after %s", within)
		return time.Time{}
	}
}

// notDone fails the test if ctx ended.
func notDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	if err := ctx.Err(); err != nil {
		t.Errorf("lease context ended %s: %v (cause %v)", what, err, context.Cause(ctx))
	}
}

// hookCount returns how many contexts are registered with l.
func hookCount(l *Lease) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.hooks)
}

func TestLeaseContext(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			t.Run("CancelledRefused", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second, RenewEvery: 50 * time.Millisecond})
				l := tb.acquire(t, "acme", holder("task-1"))
				ctx, cancel := l.Context(context.Background())
				defer cancel()
				notDone(t, ctx, "on a fresh lease")
				tb.client.Set(context.Background(), tb.lockKey("acme"), "other holder", 0)
				doneAt := waitCtx(t, ctx, 3*time.Second)
				select {
				case <-l.Lost():
				default:
					t.Errorf("context cancelled before the lease is lost")
				}
				if !doneAt.Before(l.Deadline()) {
					t.Errorf("context cancelled at %s, not before the deadline %s: the refusal was not noticed at once", doneAt, l.Deadline())
				}
				cause := context.Cause(ctx)
				if !errors.Is(cause, tenantlock.ErrLeaseRefused) || !errors.Is(cause, tenantlock.ErrLeaseLost) || cause != l.Err() {
					t.Errorf("cause = %v, want the lease's Err %v (tenantlock.ErrLeaseRefused and tenantlock.ErrLeaseLost)", cause, l.Err())
				}
				if !errors.Is(ctx.Err(), context.Canceled) {
					t.Errorf("ctx.Err() = %v, want context.Canceled", ctx.Err())
				}
				if n := hookCount(l); n != 0 {
					t.Errorf("%d contexts still registered after the loss, want none", n)
				}
				// A context asked for after the loss is born cancelled.
				late, cancelLate := l.Context(context.Background())
				defer cancelLate()
				if late.Err() == nil || context.Cause(late) != l.Err() {
					t.Errorf("Context after the loss: err %v, cause %v; want cancelled with %v", late.Err(), context.Cause(late), l.Err())
				}
				if n := hookCount(l); n != 0 {
					t.Errorf("a context made after the loss was registered")
				}
			})
			t.Run("NotCancelledReleased", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second, RenewEvery: 20 * time.Millisecond})
				l := tb.acquire(t, "acme", holder("task-1"))
				ctx, cancel := l.Context(context.Background())
				if err := l.Release(context.Background()); err != nil {
					t.Fatalf("Release: %v", err)
				}
				// Taken by another holder meanwhile: still not our loss.
				tb.acquire(t, "acme", holder("task-2"))
				time.Sleep(100 * time.Millisecond) // five renewal periods
				notDone(t, ctx, "after Release")
				cancel()
				if got := context.Cause(ctx); got != context.Canceled {
					t.Errorf("cause after the CancelFunc = %v, want context.Canceled", got)
				}
				if n := hookCount(l); n != 0 {
					t.Errorf("%d contexts still registered after their CancelFunc, want none", n)
				}
				cancel() // idempotent
			})
			t.Run("NotCancelledForgotten", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second, RenewEvery: 20 * time.Millisecond})
				l := tb.acquire(t, "acme", holder("task-1"))
				time.Sleep(50 * time.Millisecond) // the renewer is running
				ctx, cancel := l.Context(context.Background())
				defer cancel()
				l.Forget()
				waitDone(t, l, time.Second)
				// What a task's final write does after Forget.
				tb.client.Del(context.Background(), tb.lockKey("acme"))
				time.Sleep(100 * time.Millisecond)
				notDone(t, ctx, "after Forget")
				if l.Err() != nil {
					t.Errorf("Err after Forget = %v, want nil", l.Err())
				}
			})
			t.Run("NotCancelledReplaced", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second, RenewEvery: 20 * time.Millisecond})
				l := tb.acquire(t, "acme", holder("task-1"))
				ctx, cancel := l.Context(context.Background())
				defer cancel()
				next := reacquireOK(t, tb.locker, l)
				nctx, ncancel := next.Context(context.Background())
				defer ncancel()
				time.Sleep(100 * time.Millisecond)
				notDone(t, ctx, "when Reacquire replaced the lease")
				notDone(t, nctx, "on the re-acquired lease")
				tb.client.Del(context.Background(), tb.lockKey("acme"))
				waitCtx(t, nctx, 3*time.Second)
				if !errors.Is(context.Cause(nctx), tenantlock.ErrLeaseRefused) {
					t.Errorf("re-acquired lease's context cause = %v, want tenantlock.ErrLeaseRefused", context.Cause(nctx))
				}
				notDone(t, ctx, "when the lease's successor was lost")
			})
			t.Run("CancelledWithParent", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				l := tb.acquire(t, "acme", holder("task-1"))
				errStop := errors.New("instance stopping")
				parent, stop := context.WithCancelCause(context.Background())
				ctx, cancel := l.Context(parent)
				stop(errStop)
				waitCtx(t, ctx, time.Second)
				if got := context.Cause(ctx); got != errStop {
					t.Errorf("cause = %v, want the parent's %v", got, errStop)
				}
				cancel()
				if n := hookCount(l); n != 0 {
					t.Errorf("%d contexts still registered after their CancelFunc, want none", n)
				}
				if err := l.Check(0); err != nil {
					t.Errorf("lease after its context's parent ended: %v", err)
				}
			})
		})
	}
	t.Run("Local", func(t *testing.T) {
		t.Parallel()
		lk := newLocal(t, LocalConfig{Lease: 10 * time.Second, RenewEvery: 20 * time.Millisecond})
		l := acquireLocal(t, lk, "acme", holder("task-1"))
		ctx, cancel := l.Context(context.Background())
		defer cancel()
		if _, err := lk.ForceRelease(context.Background(), "acme", l.Fence()); err != nil {
			t.Fatal(err)
		}
		waitCtx(t, ctx, 2*time.Second)
		if cause := context.Cause(ctx); !errors.Is(cause, tenantlock.ErrLeaseRefused) || cause != l.Err() {
			t.Errorf("cause = %v, want the lease's Err %v", cause, l.Err())
		}
	})
}

// TestLeaseContextStoppedRedis pauses Redis (SIGSTOP): the lease runs out
// and its context must end by the deadline (plus scheduling slack), with a
// cause that is a loss but not a refusal.
func TestLeaseContextStoppedRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, ReadTimeout: -1, WriteTimeout: -1})
	t.Cleanup(func() { _ = c.Close() })
	prefix := redistest.Prefix(t)
	lk, err := New(c, withKeys(Config{Lease: 900 * time.Millisecond, RenewEvery: 300 * time.Millisecond}, prefix))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tb := &testBundle{client: c, prefix: prefix, cfg: withKeys(Config{}, prefix), locker: lk}
	l := tb.acquire(t, "acme", holder("task-1"))
	ctx, cancel := l.Context(context.Background())
	defer cancel()
	time.Sleep(350 * time.Millisecond) // one renewal on a healthy Redis
	srv.Stop()
	defer srv.Cont()

	const slack = 500 * time.Millisecond
	doneAt := waitCtx(t, ctx, 5*time.Second)
	if dl := l.Deadline(); doneAt.After(dl.Add(slack)) {
		t.Errorf("context cancelled at %s, more than %s after the deadline %s", doneAt.Format(time.StampMilli), slack, dl.Format(time.StampMilli))
	}
	cause := context.Cause(ctx)
	if !errors.Is(cause, tenantlock.ErrLeaseLost) || errors.Is(cause, tenantlock.ErrLeaseRefused) || cause != l.Err() {
		t.Errorf("cause = %v, want the lease's Err %v: tenantlock.ErrLeaseLost, not refused", cause, l.Err())
	}
}

// TestLeaseContextRace makes and cancels contexts from many goroutines
// while the lease is lost (for -race), and checks that every context made
// and not cancelled by its caller ends with the loss.
func TestLeaseContextRace(t *testing.T) {
	t.Parallel()
	lk := newLocal(t, LocalConfig{Lease: 10 * time.Second, RenewEvery: time.Millisecond})
	l := acquireLocal(t, lk, "acme", holder("task-1"))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		kept []context.Context
	)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				if i == 100 && g == 0 {
					if _, err := lk.ForceRelease(context.Background(), "acme", l.Fence()); err != nil {
						t.Errorf("ForceRelease: %v", err)
					}
				}
				ctx, cancel := l.Context(context.Background())
				if (g+i)%2 == 0 {
					cancel()
					continue
				}
				// Not cancelled by the caller: the loss must end it.
				mu.Lock()
				kept = append(kept, ctx)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	waitLost(t, l, 2*time.Second)
	for _, ctx := range kept {
		if context.Cause(ctx) != l.Err() {
			t.Fatalf("a context not cancelled by its caller ended with %v, want the loss %v", context.Cause(ctx), l.Err())
		}
	}
}

// TestLeaseContextNoGoroutine checks that neither a lease nor its contexts
// cost a goroutine before the first renewal, and that everything ends
// after Forget. It does not run in parallel: it counts the process's
// goroutines (only tests that have not started their parallel part run
// meanwhile).
func TestLeaseContextNoGoroutine(t *testing.T) {
	lk := newLocal(t, LocalConfig{Lease: time.Minute})
	const n = 50
	// Slack for goroutines of other tests ending or starting meanwhile.
	const slack = 5
	before := runtime.NumGoroutine()
	leases := make([]*Lease, n)
	cancels := make([]context.CancelFunc, n)
	for i := range leases {
		l, err := lk.Acquire(context.Background(), "tenant-"+itoa(int64(i)), holder("task-1"))
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		leases[i] = l
		_, cancels[i] = l.Context(context.Background())
	}
	if d := runtime.NumGoroutine() - before; d > slack {
		t.Errorf("%d leases with a context each: %d more goroutines, want none (at most %d of other tests)", n, d, slack)
	}
	for i, l := range leases {
		cancels[i]()
		l.Forget()
		waitDone(t, l, time.Second)
		if hookCount(l) != 0 {
			t.Errorf("lease %d: a context still registered after its CancelFunc", i)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine()-before > slack {
		if time.Now().After(deadline) {
			t.Fatalf("%d more goroutines than before the leases, 3s after Forget", runtime.NumGoroutine()-before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLeaseOnLost: f is told of a loss once, with Err, before Lost closes;
// at once when the lease is lost already; never after stop, nor for
// Release or Forget.
func TestLeaseOnLost(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, b, Config{Lease: 10 * time.Second, RenewEvery: 50 * time.Millisecond})
			l := tb.acquire(t, "acme", holder("task-1"))
			type call struct {
				cause    error
				lostDone bool
			}
			calls := make(chan call, 4)
			stop := l.OnLost(func(cause error) {
				select {
				case <-l.lost: // under the lease's lock: read the field, not Lost()
					calls <- call{cause, true}
				default:
					calls <- call{cause, false}
				}
			})
			defer stop()
			stopped := l.OnLost(func(error) { t.Error("a stopped OnLost was called") })
			stopped()
			if n := hookCount(l); n != 1 {
				t.Errorf("%d hooks registered, want 1", n)
			}
			tb.client.Set(context.Background(), tb.lockKey("acme"), "other holder", 0)
			select {
			case c := <-calls:
				if c.cause == nil || c.cause != l.Err() || !errors.Is(c.cause, tenantlock.ErrLeaseRefused) {
					t.Errorf("cause %v, want the lease's Err %v", c.cause, l.Err())
				}
				if c.lostDone {
					t.Error("f was called after Lost closed")
				}
			case <-time.After(3 * time.Second):
				t.Fatal("f not called after the lease was lost")
			}
			// Lost already: at once, with the same cause.
			var late error
			l.OnLost(func(cause error) { late = cause })()
			if late == nil || late != l.Err() {
				t.Errorf("OnLost after the loss: %v, want %v at once", late, l.Err())
			}
			select {
			case c := <-calls:
				t.Errorf("f called twice (%v)", c.cause)
			case <-time.After(100 * time.Millisecond):
			}

			// Release and Forget are not losses.
			for _, end := range []string{"release", "forget"} {
				l2 := tb.acquire(t, "acme-"+end, holder("task-2"))
				called := false
				defer l2.OnLost(func(error) { called = true })()
				if end == "release" {
					if err := l2.Release(context.Background()); err != nil {
						t.Fatal(err)
					}
				} else {
					l2.Forget()
				}
				time.Sleep(150 * time.Millisecond)
				if called {
					t.Errorf("%s called OnLost's f", end)
				}
			}
		})
	}
}
