package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/tenantlock"
	"github.com/redis/go-redis/v9"
)

// modes are the two ways a Locker sends its script calls.
var modes = []struct {
	name      string
	unbatched bool
}{{"Batched", false}, {"Unbatched", true}}

// isAcquire reports whether cmd runs acquire_lock.lua.
func isAcquire(cmd redis.Cmder) bool {
	args := cmd.Args()
	return len(args) > 1 && (args[0] == "evalsha" && args[1] == acquireLockScript.Hash() || args[0] == "eval" && args[1] == acquireLockSrc)
}

// acquireHook is a go-redis hook for the acquire script's calls: sent
// alone or in a pipeline, each goes through before(ctx) first (which may
// block) and after(cmd) once answered (which may replace the answer).
type acquireHook struct {
	before func(ctx context.Context)
	after  func(cmd redis.Cmder)
}

func (h *acquireHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *acquireHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isAcquire(cmd) {
			return next(ctx, cmd)
		}
		if h.before != nil {
			h.before(ctx)
		}
		err := next(ctx, cmd)
		if h.after != nil {
			h.after(cmd)
			err = cmd.Err()
		}
		return err
	}
}

func (h *acquireHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, cmd := range cmds {
			if isAcquire(cmd) {
				n++
			}
		}
		if n > 0 && h.before != nil {
			h.before(ctx)
		}
		err := next(ctx, cmds)
		if n > 0 && h.after != nil {
			for _, cmd := range cmds {
				if isAcquire(cmd) {
					h.after(cmd)
				}
			}
		}
		return err
	}
}

// setupMode is setup with the mode's batching, the scripts loaded and a
// connection open, so that round trips can be counted.
func setupMode(t *testing.T, b redistest.Backend, unbatched bool, cfg Config) *testBundle {
	t.Helper()
	cfg.Unbatched = unbatched
	tb := setup(t, b, cfg)
	warm := tb.warmUp(t, "warm-up", holder("task-0"))
	if _, err := tb.locker.Acquire(context.Background(), "warm-up", holder("task-0")); !errors.Is(err, tenantlock.ErrLocked) {
		t.Fatalf("warm-up: Acquire of a held lock: %v", err)
	}
	if err := warm.Release(context.Background()); err != nil {
		t.Fatalf("warm-up: Release: %v", err)
	}
	return tb
}

// TestAcquireRoundTrips checks the round trips of an acquisition that
// Redis refuses (2: the SET NX script and the read of the holder; redsync's
// release after the failed attempt is answered locally) and of one whose
// answer is lost after the SET landed (2: the script and the release, which
// must go out and delete the lock).
func TestAcquireRoundTrips(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		for _, m := range modes {
			t.Run(b.Name+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				t.Run("ErrLockedTwoRoundTrips", func(t *testing.T) {
					t.Parallel()
					tb := setupMode(t, b, m.unbatched, Config{Lease: 10 * time.Second})
					first := tb.acquire(t, "acme", holder("task-1"))
					for i := range 3 {
						var err error
						before := tb.counter.Commands()
						n := tb.counter.Count(func() { _, err = tb.locker.Acquire(context.Background(), "acme", holder("task-2")) })
						var le *tenantlock.LockedError
						if !errors.As(err, &le) || le.Fence != first.Fence() || le.Value != first.Value() {
							t.Fatalf("Acquire of a held lock: err = %v, want a *tenantlock.LockedError naming the holder", err)
						}
						// SET NX script; MULTI, GET, PTTL, GET, EXEC.
						if cmds := tb.counter.Commands() - before; n != 2 || cmds != 1+5 {
							t.Errorf("refused Acquire #%d: %d round trips, %d commands; want 2 round trips, 6 commands (no release)", i, n, cmds)
						}
					}
					if got := tb.get(t, tb.lockKey("acme")); got != first.Value() {
						t.Errorf("lock key holds %q after refused Acquires, want the holder's value", got)
					}
				})
				t.Run("OKReleasedAfterLostAnswer", func(t *testing.T) {
					t.Parallel()
					tb := setupMode(t, b, m.unbatched, Config{Lease: 10 * time.Second})
					errLost := errors.New("injected: answer lost")
					var lost atomic.Bool
					lost.Store(true)
					tb.client.AddHook(&acquireHook{after: func(cmd redis.Cmder) {
						if lost.Load() && cmd.Err() == nil {
							cmd.SetErr(errLost)
						}
					}})
					var err error
					n := tb.counter.Count(func() { _, err = tb.locker.Acquire(context.Background(), "acme", holder("task-1")) })
					var re *RedisError
					if !errors.As(err, &re) || errors.Is(err, tenantlock.ErrLocked) {
						t.Fatalf("Acquire with its answer lost: err = %v, want a *RedisError", err)
					}
					if n != 2 {
						t.Errorf("Acquire with its answer lost: %d round trips, want 2 (SET NX script, release)", n)
					}
					if got := tb.get(t, tb.lockKey("acme")); got != "" {
						t.Errorf("lock key holds %q: the SET landed and the release did not delete it", got)
					}
					lost.Store(false)
					tb.acquire(t, "acme", holder("task-1"))
				})
				t.Run("OKReleasedAfterTimeout", func(t *testing.T) {
					t.Parallel()
					// The SET lands but its answer comes after the call's
					// deadline (lease/20 = 100ms): a timeout, not a refusal.
					tb := setupMode(t, b, m.unbatched, Config{Lease: 2 * time.Second})
					var slow atomic.Bool
					slow.Store(true)
					tb.client.AddHook(&acquireHook{after: func(cmd redis.Cmder) {
						if slow.Load() {
							time.Sleep(150 * time.Millisecond)
							cmd.SetErr(context.DeadlineExceeded)
						}
					}})
					var err error
					n := tb.counter.Count(func() { _, err = tb.locker.Acquire(context.Background(), "acme", holder("task-1")) })
					var re *RedisError
					if !errors.As(err, &re) || !re.Unavailable() {
						t.Fatalf("Acquire that timed out: err = %v, want an Unavailable *RedisError", err)
					}
					if n != 2 {
						t.Errorf("Acquire that timed out: %d round trips, want 2 (SET NX script, release)", n)
					}
					if got := tb.get(t, tb.lockKey("acme")); got != "" {
						t.Errorf("lock key holds %q: the release after the timeout did not delete it", got)
					}
				})
			})
		}
	}
}

// TestBatch holds the acquisitions sent directly until the others are
// queued, then checks that the queued ones go out in one pipeline with the
// right answers each.
func TestBatch(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			t.Run("OKOnePipeline", func(t *testing.T) {
				t.Parallel()
				tb := setupMode(t, b, false, Config{Lease: time.Minute})
				open := gateDirect(t, tb)
				// Distinct tenants, and five acquisitions of one tenant.
				const n = 40
				tenants := make([]string, n)
				for i := range tenants {
					tenants[i] = fmt.Sprintf("tenant-%d", i)
					if i >= n-5 {
						tenants[i] = "shared"
					}
				}
				leases := make([]*Lease, n)
				errs := make([]error, n)
				var wg sync.WaitGroup
				rtt := tb.counter.RoundTrips()
				for i, tn := range tenants {
					wg.Go(func() {
						leases[i], errs[i] = tb.locker.Acquire(context.Background(), tn, holder(fmt.Sprintf("task-%d", i)))
					})
				}
				waitFor(t, "all but the direct calls queued", func() bool { return tb.locker.batch.queued() == n-batchLimit })
				open()
				wg.Wait()
				rtt = tb.counter.RoundTrips() - rtt
				won, refused := 0, 0
				for i, l := range leases {
					switch {
					case errs[i] == nil:
						watch(t, l)
						if got := tb.get(t, tb.lockKey(tenants[i])); got != l.Value() {
							t.Errorf("lock of %s holds %q, want the lease's value", tenants[i], got)
						}
						if tenants[i] == "shared" {
							won++
						}
					case tenants[i] == "shared" && errors.Is(errs[i], tenantlock.ErrLocked):
						refused++
					default:
						t.Errorf("Acquire(%s): %v", tenants[i], errs[i])
					}
				}
				if won != 1 || refused != 4 {
					t.Errorf("shared tenant: %d acquired, %d refused; want 1 and 4", won, refused)
				}
				// The direct calls, one pipeline, and a holder read per
				// refused acquisition (some may share the direct calls).
				if want := int64(batchLimit + 1 + refused); rtt != want {
					t.Errorf("%d acquisitions: %d round trips, want %d (%d direct, one pipeline, %d holder reads)", n, rtt, want, batchLimit, refused)
				}
			})
			t.Run("ErrDeadlineWhileQueued", func(t *testing.T) {
				t.Parallel()
				// A long lease: the direct calls' own deadlines (lease/20)
				// outlast the wait.
				tb := setupMode(t, b, false, Config{Lease: time.Minute})
				open := gateDirect(t, tb)
				var wg sync.WaitGroup
				for i := range batchLimit {
					wg.Go(func() {
						l, err := tb.locker.Acquire(context.Background(), fmt.Sprintf("direct-%d", i), holder("task-1"))
						if err != nil {
							t.Errorf("direct Acquire: %v", err)
							return
						}
						l.Forget()
					})
				}
				waitFor(t, "the direct calls in flight", func() bool { return tb.locker.batch.busy() == batchLimit })
				start := time.Now()
				_, err := tb.locker.Acquire(ctxTimeout(t, 200*time.Millisecond), "queued", holder("task-1"))
				took := time.Since(start)
				var re *RedisError
				if !errors.As(err, &re) || !re.Unavailable() || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("queued Acquire past its deadline: err = %v, want an Unavailable *RedisError matching DeadlineExceeded", err)
				}
				if took > time.Second {
					t.Errorf("queued Acquire returned after %s, want by its 200ms deadline", took)
				}
				// The direct calls were counted when they started.
				rtt := tb.counter.RoundTrips()
				open()
				wg.Wait()
				// The sender drops a call whose context ended (the SET NX and
				// the release after it): nothing is sent for them.
				waitFor(t, "the queue drained", func() bool { return tb.locker.batch.queued() == 0 && tb.locker.batch.busy() == 0 })
				if n := tb.counter.RoundTrips() - rtt; n != 0 {
					t.Errorf("%d round trips for the abandoned calls, want none", n)
				}
				if got := tb.get(t, tb.lockKey("queued")); got != "" {
					t.Errorf("lock of the abandoned acquisition holds %q, want nothing sent", got)
				}
			})
		})
	}
}

// gateDirect makes the acquisitions sent directly by tb's Locker (the first
// batchLimit) wait until the returned open is called, so that the next ones
// queue for the sender.
func gateDirect(t *testing.T, tb *testBundle) (open func()) {
	t.Helper()
	gate := make(chan struct{})
	var gating atomic.Bool
	gating.Store(true)
	tb.client.AddHook(&acquireHook{before: func(context.Context) {
		if gating.Load() {
			<-gate
		}
	}})
	var once sync.Once
	open = func() {
		once.Do(func() {
			gating.Store(false)
			close(gate)
		})
	}
	t.Cleanup(open)
	return open
}

// TestBatchNoScript flushes Redis' script cache (on miniredis and on a
// throwaway server, never the shared one: other packages' tests count
// their round trips) and checks that batched calls answered NOSCRIPT are
// sent again with EVAL.
func TestBatchNoScript(t *testing.T) {
	t.Parallel()
	backends := []redistest.Backend{redistest.Backends()[0], {Name: "throwaway", New: func(t testing.TB) (redis.UniversalClient, string) {
		return redistest.StartServer(t).Client(), redistest.Prefix(t)
	}}}
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			tb := setupMode(t, b, false, Config{Lease: time.Minute})
			if err := tb.client.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatalf("SCRIPT FLUSH: %v", err)
			}
			open := gateDirect(t, tb)
			const n = 8
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					l, err := tb.locker.Acquire(context.Background(), fmt.Sprintf("tenant-%d", i), holder("task-1"))
					if err != nil {
						t.Errorf("Acquire after SCRIPT FLUSH: %v", err)
						return
					}
					watch(t, l)
					if got := tb.get(t, tb.lockKey(l.TenantID())); got != l.Value() || l.Fence() <= 0 {
						t.Errorf("lock holds %q, fence %d; want the lease's value and a token", got, l.Fence())
					}
				})
			}
			waitFor(t, "all but the direct calls queued", func() bool { return tb.locker.batch.queued() == n-batchLimit })
			open()
			wg.Wait()
		})
	}
}

// queued returns the calls waiting for the sender.
func (b *batcher) queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// busy returns the round trips in flight.
func (b *batcher) busy() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlight
}

// TestAcquireScriptIdempotent runs acquire_lock.lua twice with one value, as
// a client retry after a lost answer does: the second run answers the same
// token, moves no counter and gives the lock a whole lease again; with the
// counter gone it answers -1.
func TestAcquireScriptIdempotent(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, b, Config{Lease: 10 * time.Second})
			ctx := context.Background()
			run := func(value string) int64 {
				t.Helper()
				n, err := tb.runAcquire("acme", value, 5).Int64()
				if err != nil {
					t.Fatalf("acquire_lock.lua: %v", err)
				}
				return n
			}
			first := run("value-1")
			if first <= 0 {
				t.Fatalf("first run = %d, want a token", first)
			}
			// The first run's lease has partly gone by when the retry runs:
			// the retry gives the key a whole lease again (the caller counts
			// its lease from the retry's start).
			tb.client.PExpire(ctx, tb.lockKey("acme"), 2*time.Second)
			if again := run("value-1"); again != first {
				t.Errorf("second run with the same value = %d, want the same token %d", again, first)
			}
			if ttl := tb.client.PTTL(ctx, tb.lockKey("acme")).Val(); ttl <= 2*time.Second {
				t.Errorf("lock TTL after the second run = %s, want the lease (10s) again", ttl)
			}
			if other := run("value-2"); other != 0 {
				t.Errorf("run with another value = %d, want 0 (held)", other)
			}
			if got := tb.get(t, tb.fenceKey("acme")); got != itoa(first) {
				t.Errorf("fence counter %q after the reruns, want %d (unchanged)", got, first)
			}
			tb.client.Del(ctx, tb.fenceKey("acme"))
			if lostCounter := run("value-1"); lostCounter != -1 {
				t.Errorf("rerun with the counter gone = %d, want -1", lostCounter)
			}
		})
	}
}
