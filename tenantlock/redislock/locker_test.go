package redislock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/tenantlock"
	"github.com/redis/go-redis/v9"
)

func TestNew(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	keys := withKeys(Config{}, "p:")
	tests := []struct {
		name string
		cfg  Config
	}{
		{"ErrInvalidNoKeys", Config{}},
		{"ErrInvalidLeaseTooShort", Config{Lease: time.Millisecond, LockKey: keys.LockKey, FenceKey: keys.FenceKey}},
		{"ErrInvalidRenewNotShorter", Config{Lease: time.Second, RenewEvery: time.Second, LockKey: keys.LockKey, FenceKey: keys.FenceKey}},
		{"ErrInvalidRenewNegative", Config{Lease: time.Second, RenewEvery: -time.Second, LockKey: keys.LockKey, FenceKey: keys.FenceKey}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := New(c, tt.cfg); !errors.Is(err, tenantlock.ErrInvalid) {
				t.Fatalf("New: err = %v, want tenantlock.ErrInvalid", err)
			}
		})
	}
	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		l, err := New(c, keys)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if l.lease != LeaseDefault || l.renewEvery != LeaseDefault/3 || l.clock == nil {
			t.Fatalf("lease %s, renew every %s; want %s, %s and a clock", l.lease, l.renewEvery, LeaseDefault, LeaseDefault/3)
		}
	})
}

func TestAcquire(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			t.Run("OK", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				ctx := context.Background()
				h := holder("task-1")
				l := tb.acquire(t, "acme", h)

				if l.TenantID() != "acme" || l.Holder() != h {
					t.Errorf("lease names %s/%+v, want acme/%+v", l.TenantID(), l.Holder(), h)
				}
				if got := tb.get(t, tb.lockKey("acme")); got != l.Value() {
					t.Errorf("lock key holds %q, want the lease value %q", got, l.Value())
				}
				var v map[string]string
				if err := json.Unmarshal([]byte(l.Value()), &v); err != nil {
					t.Fatalf("lock value %q is not JSON: %v", l.Value(), err)
				}
				if v["planId"] != h.PlanID || v["taskId"] != h.TaskID || v["owner"] != h.Instance || v["nonce"] == "" || len(v) != 4 {
					t.Errorf("lock value %q does not name the holder with planId, taskId, owner and nonce", l.Value())
				}
				ttl := tb.client.PTTL(ctx, tb.lockKey("acme")).Val()
				if ttl <= 0 || ttl > 10*time.Second {
					t.Errorf("lock PTTL %s, want (0, 10s]", ttl)
				}
				if tb.client.PTTL(ctx, tb.fenceKey("acme")).Val() != -1 {
					t.Errorf("fence key has a TTL, want none")
				}
				if until := time.Until(l.Deadline()); until <= 9*time.Second || until > 10*time.Second {
					t.Errorf("deadline in %s, want about the lease less 1%%", until)
				}
				if err := l.Check(time.Second); err != nil {
					t.Errorf("Check(1s) on a fresh 10s lease: %v", err)
				}
				if err := l.Check(20 * time.Second); !errors.Is(err, tenantlock.ErrLeaseLost) {
					t.Errorf("Check(20s) on a 10s lease: err = %v, want tenantlock.ErrLeaseLost", err)
				}

				if err := l.Release(ctx); err != nil {
					t.Fatalf("Release: %v", err)
				}
				if got := tb.get(t, tb.lockKey("acme")); got != "" {
					t.Errorf("lock key holds %q after Release, want it deleted", got)
				}
				l2 := tb.acquire(t, "acme", h)
				if l2.Value() == l.Value() {
					t.Errorf("two acquisitions share the value %q", l.Value())
				}
				if l2.Fence() <= l.Fence() {
					t.Errorf("fence %d after %d, want it to increase", l2.Fence(), l.Fence())
				}
			})
			t.Run("ErrLocked", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				first := tb.acquire(t, "acme", holder("task-1"))
				_, err := tb.secondLocker(t).Acquire(context.Background(), "acme", tenantlock.Holder{PlanID: "plan-02", TaskID: "task-2", Instance: "coord-b"})
				var le *tenantlock.LockedError
				if !errors.As(err, &le) || !errors.Is(err, tenantlock.ErrLocked) {
					t.Fatalf("Acquire of a held lock: err = %v, want a *tenantlock.LockedError matching tenantlock.ErrLocked", err)
				}
				if le.TenantID != "acme" || le.Holder != first.Holder() || le.Fence != first.Fence() || le.Value != first.Value() {
					t.Errorf("LockedError %+v, want tenant acme, holder %+v, fence %d", le, first.Holder(), first.Fence())
				}
				if le.TTL <= 0 || le.TTL > 10*time.Second {
					t.Errorf("LockedError TTL %s, want (0, 10s]", le.TTL)
				}
				if !strings.Contains(le.Error(), "task-1") {
					t.Errorf("LockedError message %q does not name the holder's task", le.Error())
				}
				if got := tb.get(t, tb.lockKey("acme")); got != first.Value() {
					t.Errorf("lock key holds %q after a refused Acquire, want the first holder's value", got)
				}
				if err := first.Check(0); err != nil {
					t.Errorf("first lease after a refused Acquire: %v", err)
				}
			})
			t.Run("ErrLockedForeignValue", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				tb.client.Set(context.Background(), tb.lockKey("acme"), "somebody else", 0)
				_, err := tb.locker.Acquire(context.Background(), "acme", holder("task-1"))
				var le *tenantlock.LockedError
				if !errors.As(err, &le) {
					t.Fatalf("Acquire of a foreign lock: err = %v, want a *tenantlock.LockedError", err)
				}
				if le.Holder != (tenantlock.Holder{}) || le.Value != "somebody else" || le.TTL != 0 {
					t.Errorf("LockedError %+v, want a zero holder, the raw value and no TTL", le)
				}
			})
		})
	}
}

func TestFence(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			t.Run("AtLeastClockFloor", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				before := time.Now().UnixMilli()
				l := tb.acquire(t, "acme", holder("task-1"))
				if l.Fence() < before {
					t.Errorf("fence %d below the clock floor %d", l.Fence(), before)
				}
			})
			t.Run("StrictlyIncreasing", func(t *testing.T) {
				t.Parallel()
				clock := &fakeClock{now: t0}
				tb := setup(t, b, Config{Lease: 10 * time.Second, Clock: clock.Now})
				var fences []int64
				for i := range 4 {
					l := tb.acquire(t, "acme", holder(fmt.Sprintf("task-%d", i)))
					fences = append(fences, l.Fence())
					if err := l.Release(context.Background()); err != nil {
						t.Fatalf("Release: %v", err)
					}
					if i == 1 {
						clock.Add(time.Hour)
					}
				}
				floor := t0.UnixMilli()
				want := []int64{floor, floor + 1, t0.Add(time.Hour).UnixMilli(), t0.Add(time.Hour).UnixMilli() + 1}
				if !slices.Equal(fences, want) {
					t.Errorf("fences %v, want %v (floor, +1, new floor after the clock moved, +1)", fences, want)
				}
			})
			t.Run("LostCounterStillLarger", func(t *testing.T) {
				t.Parallel()
				clock := &fakeClock{now: t0}
				tb := setup(t, b, Config{Lease: 10 * time.Second, Clock: clock.Now})
				var last int64
				for range 3 {
					l := tb.acquire(t, "acme", holder("task-1"))
					last = l.Fence()
					_ = l.Release(context.Background())
				}
				tb.client.Del(context.Background(), tb.fenceKey("acme"))
				clock.Add(time.Second)
				l := tb.acquire(t, "acme", holder("task-2"))
				if l.Fence() <= last {
					t.Errorf("fence %d after the counter was lost, want above the last one %d", l.Fence(), last)
				}
			})
			t.Run("ErrorCounterNotInteger", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				tb.client.Set(context.Background(), tb.fenceKey("acme"), "seven", 0)
				_, err := tb.locker.Acquire(context.Background(), "acme", holder("task-1"))
				var re *RedisError
				if !errors.As(err, &re) || errors.Is(err, tenantlock.ErrLocked) || re.Unavailable() {
					t.Fatalf("Acquire with a corrupt counter: err = %v, want a *RedisError, not unavailable", err)
				}
				if got := tb.get(t, tb.lockKey("acme")); got != "" {
					t.Errorf("lock key holds %q, want nothing written", got)
				}
			})
		})
	}
}

func TestRoundTrips(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, b, Config{Lease: 10 * time.Second})
			ctx := context.Background()
			// Load the scripts into Redis's cache first (the first EVALSHA
			// on a fresh server costs a second round trip: NOSCRIPT, EVAL)
			// and open the client's connections (a new connection's
			// handshake goes through the counting hook too).
			warm := tb.acquire(t, "warm-up", holder("task-0"))
			_ = warm.Release(ctx)
			_, _ = tb.locker.ForceRelease(ctx, "warm-up", 1)
			_, _ = tb.locker.View(ctx, "warm-up")
			warm = tb.acquire(t, "warm-up", holder("task-0"))
			warm.Forget()
			if next, err := tb.locker.Reacquire(ctx, warm); err == nil {
				watch(t, next)
				_ = next.Release(ctx)
			}

			var l *Lease
			if n := tb.counter.Count(func() { l = tb.acquire(t, "acme", holder("task-1")) }); n != 1 {
				t.Errorf("Acquire took %d round trips, want 1", n)
			}
			if n := tb.counter.Count(func() { _, _ = tb.locker.View(ctx, "acme") }); n != 1 {
				t.Errorf("View took %d round trips, want 1", n)
			}
			l.Forget() // no renewals in the counts below
			if n := tb.counter.Count(func() {
				next, err := tb.locker.Reacquire(ctx, l)
				if err != nil {
					t.Errorf("Reacquire: %v", err)
					return
				}
				watch(t, next)
				next.Forget()
			}); n != 1 {
				t.Errorf("Reacquire took %d round trips, want 1", n)
			}
			if n := tb.counter.Count(func() { _, _ = tb.locker.ForceRelease(ctx, "acme", l.Fence()) }); n != 1 {
				t.Errorf("ForceRelease took %d round trips, want 1", n)
			}
		})
	}
}

func TestView(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, b, Config{Lease: 10 * time.Second})
			ctx := context.Background()

			info, err := tb.locker.View(ctx, "acme")
			if err != nil || info != (tenantlock.Info{TenantID: "acme"}) {
				t.Errorf("View of a never-locked tenant = %+v, %v; want not held, fence 0", info, err)
			}

			l := tb.acquire(t, "acme", holder("task-1"))
			info, err = tb.locker.View(ctx, "acme")
			if err != nil {
				t.Fatalf("View: %v", err)
			}
			if !info.Held || info.Holder != l.Holder() || info.Fence != l.Fence() || info.Value != l.Value() ||
				info.TTL <= 0 || info.TTL > 10*time.Second {
				t.Errorf("View of a held lock = %+v, want held by %+v with fence %d and a TTL", info, l.Holder(), l.Fence())
			}

			_ = l.Release(ctx)
			info, err = tb.locker.View(ctx, "acme")
			if err != nil || info.Held || info.Fence != l.Fence() || info.Value != "" {
				t.Errorf("View after Release = %+v, %v; want not held, last fence %d", info, err, l.Fence())
			}

			tb.client.Set(ctx, tb.lockKey("acme"), `{"planId":"x"}`, 0)
			info, err = tb.locker.View(ctx, "acme")
			if err != nil || !info.Held || info.Holder != (tenantlock.Holder{}) || info.Value != `{"planId":"x"}` || info.TTL != 0 {
				t.Errorf("View of a foreign value = %+v, %v; want held, zero holder, raw value, no TTL", info, err)
			}
		})
	}
}

func TestForceRelease(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			t.Run("OK", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second, RenewEvery: 50 * time.Millisecond})
				l := tb.acquire(t, "acme", holder("task-1"))
				info, err := tb.locker.ForceRelease(context.Background(), "acme", l.Fence())
				if err != nil {
					t.Fatalf("ForceRelease: %v", err)
				}
				if !info.Held || info.Holder != l.Holder() || info.Fence != l.Fence() || info.Value != l.Value() {
					t.Errorf("ForceRelease returned %+v, want the lock as it was", info)
				}
				if got := tb.get(t, tb.lockKey("acme")); got != "" {
					t.Errorf("lock key holds %q after ForceRelease", got)
				}
				waitLost(t, l, 2*time.Second)
				if !errors.Is(l.Err(), tenantlock.ErrLeaseLost) || !l.Refused() {
					t.Errorf("lease Err after ForceRelease = %v, want tenantlock.ErrLeaseLost and refused", l.Err())
				}
			})
			t.Run("ErrFenceMismatch", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				l := tb.acquire(t, "acme", holder("task-1"))
				info, err := tb.locker.ForceRelease(context.Background(), "acme", l.Fence()-1)
				var me *tenantlock.MismatchError
				if !errors.As(err, &me) || !errors.Is(err, tenantlock.ErrFenceMismatch) {
					t.Fatalf("ForceRelease with a stale fence: err = %v, want *tenantlock.MismatchError", err)
				}
				if me.Expected != l.Fence()-1 || me.Current.Fence != l.Fence() || me.Current.Holder != l.Holder() || info != me.Current {
					t.Errorf("MismatchError %+v, want expected %d and the current holder with fence %d", me, l.Fence()-1, l.Fence())
				}
				if got := tb.get(t, tb.lockKey("acme")); got != l.Value() {
					t.Errorf("lock key holds %q after a refused ForceRelease, want the holder's value", got)
				}
			})
			t.Run("ErrNotHeld", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				l := tb.acquire(t, "acme", holder("task-1"))
				_ = l.Release(context.Background())
				info, err := tb.locker.ForceRelease(context.Background(), "acme", l.Fence())
				if !errors.Is(err, tenantlock.ErrNotHeld) || info.Held || info.Fence != l.Fence() {
					t.Errorf("ForceRelease of a free lock = %+v, %v; want tenantlock.ErrNotHeld with the last fence", info, err)
				}
			})
			t.Run("ErrInvalidFence", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				if _, err := tb.locker.ForceRelease(context.Background(), "acme", 0); !errors.Is(err, tenantlock.ErrInvalid) {
					t.Errorf("ForceRelease with fence 0: err = %v, want tenantlock.ErrInvalid", err)
				}
			})
		})
	}
}

func TestInvalidIDs(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		"Empty":     "",
		"Braces":    "acme}{x",
		"Colon":     "acme:x",
		"Glob":      "acme*",
		"Space":     "acme x",
		"Newline":   "acme\nx",
		"NUL":       "acme\x00",
		"Leading.":  ".acme",
		"TooLong":   strings.Repeat("a", 200),
		"NonASCII":  "acmé",
		"Backslash": `acme\x`,
	}
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, b, Config{Lease: 10 * time.Second})
			ctx := context.Background()
			for name, id := range bad {
				calls := map[string]func() error{
					"AcquireTenant": func() error { _, err := tb.locker.Acquire(ctx, id, holder("task-1")); return err },
					"AcquirePlan": func() error {
						_, err := tb.locker.Acquire(ctx, "acme", tenantlock.Holder{PlanID: id, TaskID: "task-1", Instance: "coord-a"})
						return err
					},
					"AcquireTask": func() error {
						_, err := tb.locker.Acquire(ctx, "acme", tenantlock.Holder{PlanID: "plan-1", TaskID: id, Instance: "coord-a"})
						return err
					},
					"AcquireInstance": func() error {
						_, err := tb.locker.Acquire(ctx, "acme", tenantlock.Holder{PlanID: "plan-1", TaskID: "task-1", Instance: id})
						return err
					},
					"View":         func() error { _, err := tb.locker.View(ctx, id); return err },
					"ForceRelease": func() error { _, err := tb.locker.ForceRelease(ctx, id, 1); return err },
				}
				for call, f := range calls {
					var err error
					if n := tb.counter.Count(func() { err = f() }); n != 0 {
						t.Errorf("%s with %s id made %d round trips, want none", call, name, n)
					}
					if !errors.Is(err, tenantlock.ErrInvalid) {
						t.Errorf("%s with %s id %q: err = %v, want tenantlock.ErrInvalid", call, name, id, err)
					}
				}
			}
			if ks := tb.keys(t); len(ks) != 0 {
				t.Errorf("keys written for invalid ids: %q", ks)
			}
			// The allowlist's edges are accepted.
			for _, id := range []string{"a", "A-b_c.9", strings.Repeat("z", 128)} {
				if _, err := tb.locker.View(ctx, id); err != nil {
					t.Errorf("View(%q): %v, want the id accepted", id, err)
				}
			}
		})
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	// No command retries and one dial attempt: a killed server answers at
	// once, without go-redis logging a line per attempt.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	tb := setup(t, redistest.Backend{Name: "throwaway", New: func(testing.TB) (redis.UniversalClient, string) {
		return c, redistest.Prefix(t)
	}}, Config{Lease: 10 * time.Second})
	held := tb.acquire(t, "held", holder("task-1"))
	_, err := tb.locker.Acquire(ctxTimeout(t, 5*time.Second), "held", holder("task-2")) // open connections
	if !errors.Is(err, tenantlock.ErrLocked) {
		t.Fatalf("Acquire of a held lock: %v", err)
	}
	held.Forget()
	calls := map[string]func(ctx context.Context) error{
		"Acquire": func(ctx context.Context) error {
			_, err := tb.locker.Acquire(ctx, "acme", holder("task-1"))
			return err
		},
		"View":         func(ctx context.Context) error { _, err := tb.locker.View(ctx, "acme"); return err },
		"ForceRelease": func(ctx context.Context) error { _, err := tb.locker.ForceRelease(ctx, "acme", 7); return err },
		// held is forgotten, its lock still in place: Reacquire would
		// succeed on a healthy Redis.
		"Reacquire": func(ctx context.Context) error {
			next, err := tb.locker.Reacquire(ctx, held)
			if err == nil {
				next.Forget()
			}
			return err
		},
	}
	check := func(t *testing.T, call string, err error, wantUnavailable bool) {
		t.Helper()
		var u interface{ Unavailable() bool }
		if !errors.As(err, &u) || u.Unavailable() != wantUnavailable || errors.Is(err, tenantlock.ErrLocked) {
			t.Errorf("%s: err = %v, want Unavailable() = %v and not tenantlock.ErrLocked", call, err, wantUnavailable)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for call, f := range calls {
		err := f(ctx)
		check(t, call+"Canceled", err, false)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: err = %v, want it to match context.Canceled", call, err)
		}
	}

	srv.Stop()
	for call, f := range calls {
		start := time.Now()
		err := f(ctxTimeout(t, 300*time.Millisecond))
		check(t, call+"Stopped", err, true)
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("%s on a stopped Redis returned after %s, want by its 300ms deadline", call, took)
		}
	}
	srv.Kill()
	for call, f := range calls {
		check(t, call+"Killed", f(ctxTimeout(t, 2*time.Second)), true)
	}
}

// TestConcurrentHolders has goroutines of two instances (two clients)
// contend for a few tenants and checks mutual exclusion and fence order.
func TestConcurrentHolders(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, b, Config{Lease: 5 * time.Second})
			contend(t, []*Locker{tb.locker, tb.secondLocker(t)})
		})
	}
}

// contend has 8 goroutines spread over lockers (coordinator instances)
// contend for a few tenants for a second, each holding a lock for about a
// millisecond, and checks the history: never two holders of a tenant at
// once, holds that do not overlap, and fences strictly increasing in
// acquisition order.
func contend(t *testing.T, lockers []*Locker) {
	t.Helper()
	tenants := []string{"t0", "t1", "t2"}
	type hold struct {
		acquired, released time.Time
		fence              int64
	}
	var (
		mu      sync.Mutex
		holds   = map[string][]hold{}
		inside  = map[string]*atomic.Int32{}
		refused atomic.Int64
	)
	for _, tn := range tenants {
		inside[tn] = new(atomic.Int32)
	}
	ctx := context.Background()
	stopAt := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			lk := lockers[g%len(lockers)]
			for i := 0; time.Now().Before(stopAt); i++ {
				tn := tenants[(g+i)%len(tenants)]
				h := tenantlock.Holder{PlanID: "plan-1", TaskID: fmt.Sprintf("task-%d-%d", g, i), Instance: fmt.Sprintf("coord-%d", g%len(lockers))}
				l, err := lk.Acquire(ctx, tn, h)
				if errors.Is(err, tenantlock.ErrLocked) {
					refused.Add(1)
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				acquired := time.Now()
				if n := inside[tn].Add(1); n != 1 {
					t.Errorf("tenant %s: %d holders at once", tn, n)
				}
				time.Sleep(time.Millisecond)
				inside[tn].Add(-1)
				released := time.Now()
				if err := l.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
				mu.Lock()
				holds[tn] = append(holds[tn], hold{acquired, released, l.Fence()})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if refused.Load() == 0 {
		t.Errorf("no Acquire was refused: the test did not contend")
	}
	for _, tn := range tenants {
		hs := holds[tn]
		if len(hs) < 5 {
			t.Errorf("tenant %s held only %d times", tn, len(hs))
		}
		sort.Slice(hs, func(i, j int) bool { return hs[i].acquired.Before(hs[j].acquired) })
		for i := 1; i < len(hs); i++ {
			if !hs[i].acquired.After(hs[i-1].released) {
				t.Errorf("tenant %s: hold %d (acquired %s) overlaps hold %d (released %s)",
					tn, i, hs[i].acquired.Format(time.StampMicro), i-1, hs[i-1].released.Format(time.StampMicro))
			}
			if hs[i].fence <= hs[i-1].fence {
				t.Errorf("tenant %s: fence %d after %d, want strictly increasing in acquisition order", tn, hs[i].fence, hs[i-1].fence)
			}
		}
	}
}
