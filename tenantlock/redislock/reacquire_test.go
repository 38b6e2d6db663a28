package redislock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/tenantlock"
	"github.com/redis/go-redis/v9"
)

// reacquireOK re-acquires l, fails the test otherwise, watches the new lease
// and checks that it is l's successor: same tenant, holder, value and fence,
// a fresh deadline, l retired.
func reacquireOK(t *testing.T, lk *Locker, l *Lease) *Lease {
	t.Helper()
	before := time.Now()
	next, err := lk.Reacquire(context.Background(), l)
	if err != nil {
		t.Fatalf("Reacquire: %v", err)
	}
	watch(t, next)
	if next == l || next.TenantID() != l.TenantID() || next.Holder() != l.Holder() || next.Value() != l.Value() || next.Fence() != l.Fence() {
		t.Errorf("re-acquired lease %s/%+v/%q/%d, want a new lease with %s/%+v/%q/%d",
			next.TenantID(), next.Holder(), next.Value(), next.Fence(), l.TenantID(), l.Holder(), l.Value(), l.Fence())
	}
	if err := next.Check(0); err != nil {
		t.Errorf("re-acquired lease: %v", err)
	}
	if !next.Deadline().After(before) || next.Confirmed().Before(before) {
		t.Errorf("re-acquired lease: deadline %s, confirmed %s; want both after the call at %s",
			next.Deadline().Format(time.StampMilli), next.Confirmed().Format(time.StampMilli), before.Format(time.StampMilli))
	}
	if next.Local() != l.Local() {
		t.Errorf("re-acquired lease Local() = %v, want %v", next.Local(), l.Local())
	}
	// The old lease is retired: its renewer stops.
	waitDone(t, l, time.Second)
	return next
}

// refusedAs checks that err is a *tenantlock.RefusedError for l, matching
// tenantlock.ErrLeaseRefused and tenantlock.ErrLeaseLost, and returns it.
func refusedAs(t *testing.T, err error, l *Lease) *tenantlock.RefusedError {
	t.Helper()
	var re *tenantlock.RefusedError
	if !errors.As(err, &re) || !errors.Is(err, tenantlock.ErrLeaseRefused) || !errors.Is(err, tenantlock.ErrLeaseLost) {
		t.Fatalf("err = %v, want a *tenantlock.RefusedError matching tenantlock.ErrLeaseRefused and tenantlock.ErrLeaseLost", err)
	}
	if re.TenantID != l.TenantID() || re.Fence != l.Fence() {
		t.Errorf("RefusedError names tenant %s, fence %d; want %s, %d", re.TenantID, re.Fence, l.TenantID(), l.Fence())
	}
	return re
}

// checkGuardPasses checks what a fenced write guarded by l checks in
// Redis: the lock key holds l's value with a TTL, and the fence counter is
// still l's token (no newer token was handed out).
func (tb *testBundle) checkGuardPasses(t *testing.T, l *Lease) {
	t.Helper()
	if got := tb.get(t, tb.lockKey(l.TenantID())); got != l.Value() {
		t.Errorf("lock key holds %q, want the lease value %q", got, l.Value())
	}
	if ttl := tb.client.PTTL(context.Background(), tb.lockKey(l.TenantID())).Val(); ttl <= 0 {
		t.Errorf("lock PTTL %s, want a live lease", ttl)
	}
	if got := tb.get(t, tb.fenceKey(l.TenantID())); got != itoa(l.Fence()) {
		t.Errorf("fence counter %q, want the lease's token %d", got, l.Fence())
	}
}

func TestReacquire(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			t.Run("OKStillOurs", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				l := tb.acquire(t, "acme", holder("task-1"))
				if b.Mini != nil {
					tb.mini.FastForward(5 * time.Second) // half the lease gone
				}
				next := reacquireOK(t, tb.locker, l)
				tb.checkGuardPasses(t, next)
				if ttl := tb.client.PTTL(ctx, tb.lockKey("acme")).Val(); ttl <= 9*time.Second {
					t.Errorf("lock PTTL %s after Reacquire, want pushed out to the lease", ttl)
				}
				// The old lease is retired: Forget and Release do nothing.
				var err error
				n := tb.counter.Count(func() {
					l.Forget()
					err = l.Release(ctx)
				})
				if n != 0 || err != nil {
					t.Errorf("old lease Forget and Release: %v with %d round trips, want nil and none", err, n)
				}
				tb.checkGuardPasses(t, next)
				if err := next.Release(ctx); err != nil {
					t.Fatalf("Release of the re-acquired lease: %v", err)
				}
				if got := tb.get(t, tb.lockKey("acme")); got != "" {
					t.Errorf("lock key holds %q after Release of the re-acquired lease", got)
				}
			})
			t.Run("OKLapsedNobodyTook", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				l := tb.acquire(t, "acme", holder("task-1"))
				l.Forget() // no renewal, as when Redis is unreachable
				if b.Mini != nil {
					tb.mini.FastForward(11 * time.Second)
				} else {
					tb.client.Del(ctx, tb.lockKey("acme")) // stand-in for expiry
				}
				if got := tb.get(t, tb.lockKey("acme")); got != "" {
					t.Fatalf("lock key holds %q, want it expired", got)
				}
				next := reacquireOK(t, tb.locker, l)
				tb.checkGuardPasses(t, next)
				if ttl := tb.client.PTTL(ctx, tb.lockKey("acme")).Val(); ttl <= 9*time.Second || ttl > 10*time.Second {
					t.Errorf("lock PTTL %s after Reacquire, want the lease", ttl)
				}
				info, err := tb.locker.View(ctx, "acme")
				if err != nil || !info.Held || info.Holder != l.Holder() || info.Fence != l.Fence() {
					t.Errorf("View after Reacquire = %+v, %v; want held by %+v with fence %d", info, err, l.Holder(), l.Fence())
				}
				// A second Reacquire of the retired lease is refused, of the
				// new one it succeeds.
				_, err = tb.locker.Reacquire(ctx, l)
				if re := refusedAs(t, err, l); !strings.Contains(re.Reason, "re-acquired already") {
					t.Errorf("second Reacquire of the old lease: reason %q, want re-acquired already", re.Reason)
				}
				third := reacquireOK(t, tb.locker, next)
				tb.checkGuardPasses(t, third)
			})
			t.Run("ErrLeaseRefusedTakenMeanwhile", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				l := tb.acquire(t, "acme", holder("task-1"))
				l.Forget()
				tb.client.Del(ctx, tb.lockKey("acme"))
				other, err := tb.secondLocker(t).Acquire(ctx, "acme", tenantlock.Holder{PlanID: "plan-02", TaskID: "task-2", Instance: "coord-b"})
				if err != nil {
					t.Fatalf("Acquire by another instance: %v", err)
				}
				watch(t, other)
				_, err = tb.locker.Reacquire(ctx, l)
				re := refusedAs(t, err, l)
				if !re.Current.Held || re.Current.Holder != other.Holder() || re.Current.Fence != other.Fence() || re.Current.Value != other.Value() {
					t.Errorf("RefusedError.Current = %+v, want the other holder %+v with fence %d", re.Current, other.Holder(), other.Fence())
				}
				if !strings.Contains(err.Error(), "task-2") {
					t.Errorf("error %q does not name the holder's task", err)
				}
				tb.checkGuardPasses(t, other)
			})
			t.Run("ErrLeaseRefusedFenceMovedLockFree", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				l := tb.acquire(t, "acme", holder("task-1"))
				l.Forget()
				tb.client.Del(ctx, tb.lockKey("acme"))
				other := tb.acquire(t, "acme", holder("task-2"))
				if err := other.Release(ctx); err != nil {
					t.Fatalf("Release: %v", err)
				}
				_, err := tb.locker.Reacquire(ctx, l)
				re := refusedAs(t, err, l)
				if re.Current.Held || re.Current.Fence != other.Fence() {
					t.Errorf("RefusedError.Current = %+v, want free with the other holder's fence %d", re.Current, other.Fence())
				}
				if got := tb.get(t, tb.lockKey("acme")); got != "" {
					t.Errorf("lock key holds %q after a refused Reacquire, want nothing written", got)
				}
			})
			t.Run("ErrLeaseRefusedForeignValue", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				l := tb.acquire(t, "acme", holder("task-1"))
				l.Forget()
				tb.client.Set(ctx, tb.lockKey("acme"), "somebody else", 0)
				_, err := tb.locker.Reacquire(ctx, l)
				re := refusedAs(t, err, l)
				if !re.Current.Held || re.Current.Value != "somebody else" || re.Current.Holder != (tenantlock.Holder{}) || re.Current.Fence != l.Fence() {
					t.Errorf("RefusedError.Current = %+v, want the foreign value, fence unchanged", re.Current)
				}
				if got := tb.get(t, tb.lockKey("acme")); got != "somebody else" {
					t.Errorf("lock key holds %q after a refused Reacquire, want the foreign value left", got)
				}
			})
			t.Run("ErrLeaseRefusedAfterRefusedExtension", func(t *testing.T) {
				t.Parallel()
				// A force-release must not be undone: the lock is free and
				// the counter unchanged, yet Reacquire refuses.
				tb := setup(t, b, Config{Lease: 10 * time.Second, RenewEvery: 30 * time.Millisecond})
				l := tb.acquire(t, "acme", holder("task-1"))
				if _, err := tb.locker.ForceRelease(ctx, "acme", l.Fence()); err != nil {
					t.Fatalf("ForceRelease: %v", err)
				}
				waitLost(t, l, 3*time.Second)
				var err error
				if n := tb.counter.Count(func() { _, err = tb.locker.Reacquire(ctx, l) }); n != 0 {
					t.Errorf("Reacquire of a refused lease made %d round trips, want none", n)
				}
				refusedAs(t, err, l)
				if got := tb.get(t, tb.lockKey("acme")); got != "" {
					t.Errorf("lock key holds %q, want the force-release left in place", got)
				}
			})
			t.Run("ErrLeaseRefusedAfterRelease", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				l := tb.acquire(t, "acme", holder("task-1"))
				if err := l.Release(ctx); err != nil {
					t.Fatalf("Release: %v", err)
				}
				var err error
				if n := tb.counter.Count(func() { _, err = tb.locker.Reacquire(ctx, l) }); n != 0 {
					t.Errorf("Reacquire of a released lease made %d round trips, want none", n)
				}
				refusedAs(t, err, l)
				if got := tb.get(t, tb.lockKey("acme")); got != "" {
					t.Errorf("lock key holds %q, want the released lock left deleted", got)
				}
			})
			t.Run("ErrInvalid", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				if _, err := tb.locker.Reacquire(ctx, nil); !errors.Is(err, tenantlock.ErrInvalid) {
					t.Errorf("Reacquire(nil): err = %v, want tenantlock.ErrInvalid", err)
				}
				ll := newLocal(t, LocalConfig{})
				l, err := ll.Acquire(ctx, "acme", holder("task-1"))
				if err != nil {
					t.Fatalf("local Acquire: %v", err)
				}
				watch(t, l)
				if n := tb.counter.Count(func() { _, err = tb.locker.Reacquire(ctx, l) }); n != 0 || !errors.Is(err, tenantlock.ErrInvalid) {
					t.Errorf("Reacquire of an in-process lease on Redis: err = %v with %d round trips, want tenantlock.ErrInvalid and none", err, n)
				}
			})
		})
	}
}

// TestReacquireAfterOutage pauses Redis (SIGSTOP) until the lease is lost by
// its deadline: the loss is not refused, Reacquire reports Redis
// unavailable while it is paused, and once Redis is back and the lock has
// expired, Reacquire takes it back with the same value and fence.
func TestReacquireAfterOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, ReadTimeout: -1, WriteTimeout: -1})
	t.Cleanup(func() { _ = c.Close() })
	prefix := redistest.Prefix(t)
	cfg := withKeys(Config{Lease: 600 * time.Millisecond, RenewEvery: 200 * time.Millisecond}, prefix)
	lk, err := New(c, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tb := &testBundle{client: c, prefix: prefix, cfg: cfg, locker: lk}
	l := tb.acquire(t, "acme", holder("task-1"))
	time.Sleep(250 * time.Millisecond) // one renewal on a healthy Redis
	confirmed := l.Confirmed()

	srv.Stop()
	waitLost(t, l, 5*time.Second)
	if l.Refused() || errors.Is(l.Err(), tenantlock.ErrLeaseRefused) || !errors.Is(l.Err(), tenantlock.ErrLeaseLost) {
		t.Errorf("Err = %v, want tenantlock.ErrLeaseLost, not refused", l.Err())
	}
	if !l.Confirmed().Equal(confirmed) {
		t.Errorf("last confirmation moved from %s to %s while Redis was stopped", confirmed.Format(time.StampMilli), l.Confirmed().Format(time.StampMilli))
	}

	_, err = tb.locker.Reacquire(ctxTimeout(t, 200*time.Millisecond), l)
	var u interface{ Unavailable() bool }
	if !errors.As(err, &u) || !u.Unavailable() || errors.Is(err, tenantlock.ErrLeaseRefused) {
		t.Errorf("Reacquire on a stopped Redis: err = %v, want Unavailable, not refused", err)
	}

	srv.Cont()
	// Wait for the lock to expire in Redis, so that Reacquire takes the
	// "free, fence unchanged" path.
	for end := time.Now().Add(3 * time.Second); tb.get(t, tb.lockKey("acme")) != ""; {
		if time.Now().After(end) {
			t.Fatalf("lock key still holds the value 3s after the lease was lost")
		}
		time.Sleep(20 * time.Millisecond)
	}
	next := reacquireOK(t, tb.locker, l)
	tb.checkGuardPasses(t, next)
	time.Sleep(time.Second) // more than a lease: the new lease renews
	if err := next.Check(0); err != nil {
		t.Errorf("re-acquired lease one lease later: %v", err)
	}
	tb.checkGuardPasses(t, next)
	l.Forget()
	if err := next.Release(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Errorf("Release of the re-acquired lease: %v", err)
	}
}

// TestForceReleaseBlocksReacquire: a holder cut off from Redis while an
// operator force-released its lock cannot take it back when Redis returns.
func TestForceReleaseBlocksReacquire(t *testing.T) {
	t.Parallel()
	for _, be := range redistest.Backends() {
		t.Run(be.Name, func(t *testing.T) {
			t.Parallel()
			client, prefix := be.New(t)
			l, err := New(client, Config{Lease: time.Minute,
				LockKey:  func(tn string) string { return prefix + "lock:tenant:{" + tn + "}" },
				FenceKey: func(tn string) string { return prefix + "fence:tenant:{" + tn + "}" }})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			lease, err := l.Acquire(ctx, "t-1", tenantlock.Holder{PlanID: "p", TaskID: "t", Instance: "i"})
			if err != nil {
				t.Fatal(err)
			}
			defer lease.Forget()
			if _, err := l.ForceRelease(ctx, "t-1", lease.Fence()); err != nil {
				t.Fatal(err)
			}
			info, err := l.View(ctx, "t-1")
			if err != nil || info.Held || info.Fence != lease.Fence()+1 {
				t.Fatalf("after force-release: %+v %v (want free, fence %d)", info, err, lease.Fence()+1)
			}
			if _, err := l.Reacquire(ctx, lease); !errors.Is(err, tenantlock.ErrLeaseRefused) {
				t.Fatalf("reacquire after force-release: %v, want tenantlock.ErrLeaseRefused", err)
			}
			next, err := l.Acquire(ctx, "t-1", tenantlock.Holder{PlanID: "p", TaskID: "t2", Instance: "i"})
			if err != nil {
				t.Fatal(err)
			}
			defer next.Forget()
			if next.Fence() <= lease.Fence()+1 {
				t.Fatalf("next fence %d not above %d", next.Fence(), lease.Fence()+1)
			}
		})
	}
}

func TestLocalForceReleaseBlocksReacquire(t *testing.T) {
	t.Parallel()
	l, err := NewLocal(LocalConfig{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lease, err := l.Acquire(ctx, "t-1", tenantlock.Holder{PlanID: "p", TaskID: "t", Instance: "i"})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Forget()
	if _, err := l.ForceRelease(ctx, "t-1", lease.Fence()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reacquire(ctx, lease); !errors.Is(err, tenantlock.ErrLeaseRefused) {
		t.Fatalf("reacquire after force-release: %v, want tenantlock.ErrLeaseRefused", err)
	}
}
