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

// TestLeaseRenewal runs on the real Redis only: miniredis moves TTLs only
// when a test fast-forwards it.
func TestLeaseRenewal(t *testing.T) {
	t.Parallel()
	c, prefix := redistest.Real(t)
	l0, err := New(c, withKeys(Config{Lease: 300 * time.Millisecond, RenewEvery: 100 * time.Millisecond}, prefix))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tb := &testBundle{client: c, prefix: prefix, cfg: withKeys(Config{}, prefix), locker: l0}
	l := tb.acquire(t, "acme", holder("task-1"))
	first, firstConfirmed := l.Deadline(), l.Confirmed()

	time.Sleep(time.Second) // more than three leases
	if err := l.Check(0); err != nil {
		t.Fatalf("lease after three lease periods: %v", err)
	}
	select {
	case <-l.Lost():
		t.Fatalf("lease lost: %v", l.Err())
	default:
	}
	if got := tb.get(t, tb.lockKey("acme")); got != l.Value() {
		t.Errorf("lock key holds %q after three lease periods, want the renewed lock", got)
	}
	if ttl := c.PTTL(context.Background(), tb.lockKey("acme")).Val(); ttl <= 0 {
		t.Errorf("lock PTTL %s, want a live lease", ttl)
	}
	if !l.Deadline().After(first.Add(500 * time.Millisecond)) {
		t.Errorf("deadline %s not moved on from %s by renewals", l.Deadline().Format(time.StampMilli), first.Format(time.StampMilli))
	}
	if !l.Confirmed().After(firstConfirmed.Add(500 * time.Millisecond)) {
		t.Errorf("last confirmation %s not moved on from the acquisition's %s by renewals",
			l.Confirmed().Format(time.StampMilli), firstConfirmed.Format(time.StampMilli))
	}

	// Without renewal the lock expires within one lease.
	l.Forget()
	time.Sleep(400 * time.Millisecond)
	if got := tb.get(t, tb.lockKey("acme")); got != "" {
		t.Errorf("lock key holds %q one lease after Forget, want it expired", got)
	}
}

func TestLeaseLost(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			tests := []struct {
				name   string
				tamper func(tb *testBundle, key string)
				// left is what the lock key holds after Release.
				left       string
				releaseErr error
			}{
				{"LockDeleted", func(tb *testBundle, key string) { tb.client.Del(context.Background(), key) }, "", nil},
				{"LockOverwritten", func(tb *testBundle, key string) {
					tb.client.Set(context.Background(), key, "other holder", 0)
				}, "other holder", tenantlock.ErrLeaseLost},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					tb := setup(t, b, Config{Lease: 10 * time.Second, RenewEvery: 50 * time.Millisecond})
					l := tb.acquire(t, "acme", holder("task-1"))
					tt.tamper(tb, tb.lockKey("acme"))
					lostAt := waitLost(t, l, 3*time.Second)
					if !lostAt.Before(l.Deadline()) {
						t.Errorf("lost at %s, not before the deadline %s: the refusal was not noticed", lostAt, l.Deadline())
					}
					var re *tenantlock.RefusedError
					if !errors.Is(l.Err(), tenantlock.ErrLeaseLost) || !errors.Is(l.Err(), tenantlock.ErrLeaseRefused) || !errors.As(l.Err(), &re) {
						t.Errorf("Err = %v, want a *tenantlock.RefusedError matching tenantlock.ErrLeaseLost and tenantlock.ErrLeaseRefused", l.Err())
					} else if re.TenantID != "acme" || re.Fence != l.Fence() {
						t.Errorf("RefusedError names tenant %s, fence %d; want acme, %d", re.TenantID, re.Fence, l.Fence())
					}
					if !l.Refused() {
						t.Errorf("Refused = false after a refused extension")
					}
					if err := l.Check(0); !errors.Is(err, tenantlock.ErrLeaseLost) || !errors.Is(err, tenantlock.ErrLeaseRefused) {
						t.Errorf("Check after loss = %v, want tenantlock.ErrLeaseLost and tenantlock.ErrLeaseRefused", err)
					}
					waitDone(t, l, time.Second)
					err := l.Release(context.Background())
					if (tt.releaseErr == nil && err != nil) || (tt.releaseErr != nil && !errors.Is(err, tt.releaseErr)) {
						t.Errorf("Release after loss: err = %v, want %v", err, tt.releaseErr)
					}
					if got := tb.get(t, tb.lockKey("acme")); got != tt.left {
						t.Errorf("lock key holds %q after Release, want %q", got, tt.left)
					}
				})
			}
		})
	}
}

func TestLeaseRelease(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			t.Run("OK", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				l := tb.acquire(t, "acme", holder("task-1"))
				if err := l.Release(context.Background()); err != nil {
					t.Fatalf("Release: %v", err)
				}
				waitDone(t, l, time.Second)
				if got := tb.get(t, tb.lockKey("acme")); got != "" {
					t.Errorf("lock key holds %q after Release", got)
				}
				if err := l.Check(0); !errors.Is(err, tenantlock.ErrLeaseLost) {
					t.Errorf("Check after Release = %v, want tenantlock.ErrLeaseLost", err)
				}
				if l.Err() != nil {
					t.Errorf("Err after Release = %v, want nil (released, not lost)", l.Err())
				}
				// Idempotent, and it cannot delete the next holder's lock.
				next := tb.acquire(t, "acme", holder("task-2"))
				var err error
				if n := tb.counter.Count(func() { err = l.Release(context.Background()) }); n != 0 || err != nil {
					t.Errorf("second Release = %v with %d round trips, want nil and none", err, n)
				}
				if got := tb.get(t, tb.lockKey("acme")); got != next.Value() {
					t.Errorf("lock key holds %q, want the next holder's value", got)
				}
			})
			t.Run("OKDuringRenewal", func(t *testing.T) {
				t.Parallel()
				// Renewing all the time, so that Release often meets an
				// extension in flight: it must stop the renewer before it
				// deletes the lock, or the extension finds the lock gone and
				// reports the lease lost.
				tb := setup(t, b, Config{Lease: 10 * time.Second, RenewEvery: time.Millisecond})
				for i := range 30 {
					l := tb.acquire(t, "acme", holder("task-1"))
					time.Sleep(time.Duration(i%5) * time.Millisecond)
					if err := l.Release(context.Background()); err != nil {
						t.Fatalf("Release: %v", err)
					}
					if n := tb.counter.Count(func() { time.Sleep(3 * time.Millisecond) }); n != 0 {
						t.Errorf("%d round trips after Release, want none", n)
					}
					if l.Err() != nil {
						t.Fatalf("lease lost while released: %v", l.Err())
					}
				}
			})
			t.Run("OKLockGone", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				l := tb.acquire(t, "acme", holder("task-1"))
				// Stand-in for expiry on both backends: the key is gone.
				tb.client.Del(context.Background(), tb.lockKey("acme"))
				if err := l.Release(context.Background()); err != nil {
					t.Errorf("Release of an expired lock: %v, want nil", err)
				}
			})
			t.Run("ErrLeaseLostOtherHolder", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				l := tb.acquire(t, "acme", holder("task-1"))
				tb.client.Del(context.Background(), tb.lockKey("acme"))
				other := tb.acquire(t, "acme", holder("task-2"))
				if err := l.Release(context.Background()); !errors.Is(err, tenantlock.ErrLeaseLost) {
					t.Errorf("Release with another holder's lock in place: err = %v, want tenantlock.ErrLeaseLost", err)
				}
				if got := tb.get(t, tb.lockKey("acme")); got != other.Value() {
					t.Errorf("lock key holds %q, want the other holder's value left in place", got)
				}
			})
		})
	}
	t.Run("OKAfterTTLMiniredis", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, redistest.Backends()[0], Config{Lease: 10 * time.Second})
		l := tb.acquire(t, "acme", holder("task-1"))
		tb.mini.FastForward(11 * time.Second)
		if err := l.Release(context.Background()); err != nil {
			t.Errorf("Release of a lock past its TTL: %v, want nil", err)
		}
	})
}

func TestLeaseForget(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, b, Config{Lease: 10 * time.Second, RenewEvery: 30 * time.Millisecond})
			l := tb.acquire(t, "acme", holder("task-1"))
			if n := tb.counter.Count(func() { time.Sleep(150 * time.Millisecond) }); n < 2 {
				t.Fatalf("%d round trips in five renewal periods: the renewer is not renewing", n)
			}
			l.Forget()
			waitDone(t, l, time.Second)
			n := tb.counter.Count(func() {
				time.Sleep(150 * time.Millisecond)
				l.Forget()
				if err := l.Release(context.Background()); err != nil {
					t.Errorf("Release after Forget: %v", err)
				}
			})
			if n != 0 {
				t.Errorf("five renewal periods after Forget, Forget and Release: %d round trips, want none", n)
			}
			if got := tb.get(t, tb.lockKey("acme")); got != l.Value() {
				t.Errorf("lock key holds %q after Forget, want it untouched", got)
			}
			if err := l.Check(0); !errors.Is(err, tenantlock.ErrLeaseLost) {
				t.Errorf("Check after Forget = %v, want tenantlock.ErrLeaseLost", err)
			}
			select {
			case <-l.Lost():
				t.Errorf("Lost closed by Forget")
			default:
			}
		})
	}
}

// TestLeaseRedisErrors makes every extension fail (miniredis answers with an
// error that go-redis does not retry) and checks that the lease is lost at its deadline, not before, and
// survives when Redis answers again in time.
func TestLeaseRedisErrors(t *testing.T) {
	t.Parallel()
	b := redistest.Backends()[0]
	t.Run("ErrLeaseLostAtDeadline", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, b, Config{Lease: 500 * time.Millisecond, RenewEvery: 100 * time.Millisecond})
		l := tb.acquire(t, "acme", holder("task-1"))
		tb.mini.SetError("ERR injected failure")
		lostAt := waitLost(t, l, 3*time.Second)
		if lostAt.Before(l.Deadline()) {
			t.Errorf("lost at %s, before the deadline %s", lostAt.Format(time.StampMilli), l.Deadline().Format(time.StampMilli))
		}
		if err := l.Err(); !errors.Is(err, tenantlock.ErrLeaseLost) || !strings.Contains(err.Error(), "injected failure") {
			t.Errorf("Err = %v, want tenantlock.ErrLeaseLost naming the last failure", err)
		}
		if l.Refused() || errors.Is(l.Err(), tenantlock.ErrLeaseRefused) {
			t.Errorf("lease lost by its deadline reported as refused: %v", l.Err())
		}
	})
	t.Run("OKRecovered", func(t *testing.T) {
		t.Parallel()
		tb := setup(t, b, Config{Lease: 600 * time.Millisecond, RenewEvery: 100 * time.Millisecond})
		l := tb.acquire(t, "acme", holder("task-1"))
		time.Sleep(50 * time.Millisecond)
		tb.mini.SetError("ERR injected failure")
		time.Sleep(150 * time.Millisecond)
		tb.mini.SetError("")
		time.Sleep(800 * time.Millisecond)
		if err := l.Check(0); err != nil {
			t.Errorf("lease after a short Redis failure: %v", err)
		}
		if l.Refused() {
			t.Errorf("Refused = true for a lease that is not lost")
		}
	})
}

// TestLeaseStoppedRedis pauses Redis (SIGSTOP): extensions hang, so only
// their context deadlines end them. The client has no read or write timeout
// of its own, so a missing deadline would hang the renewer for good.
func TestLeaseStoppedRedis(t *testing.T) {
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
	time.Sleep(350 * time.Millisecond) // one renewal on a healthy Redis

	stoppedAt := time.Now()
	srv.Stop()
	const slack = 500 * time.Millisecond
	lostAt := waitLost(t, l, 5*time.Second)
	if lostAt.After(l.Deadline().Add(slack)) {
		t.Errorf("lost at %s, more than %s after the deadline %s", lostAt.Format(time.StampMilli), slack, l.Deadline().Format(time.StampMilli))
	}
	if !errors.Is(l.Err(), tenantlock.ErrLeaseLost) {
		t.Errorf("Err = %v, want tenantlock.ErrLeaseLost", l.Err())
	}
	if l.Refused() || errors.Is(l.Err(), tenantlock.ErrLeaseRefused) {
		t.Errorf("lease lost while Redis was stopped reported as refused: %v", l.Err())
	}
	if c := l.Confirmed(); !c.Before(stoppedAt) {
		t.Errorf("last confirmation %s after Redis was stopped at %s", c.Format(time.StampMilli), stoppedAt.Format(time.StampMilli))
	}
	waitDone(t, l, slack) // the renewer ends with the lease, its calls have returned

	start := time.Now()
	err = l.Release(ctxTimeout(t, 200*time.Millisecond))
	var u interface{ Unavailable() bool }
	if !errors.As(err, &u) || !u.Unavailable() {
		t.Errorf("Release on a stopped Redis: err = %v, want Unavailable", err)
	}
	if took := time.Since(start); took > 200*time.Millisecond+slack {
		t.Errorf("Release on a stopped Redis took %s, want its 200ms deadline", took)
	}

	srv.Cont()
	// The key expired meanwhile; a retried Release finds it gone.
	if err := l.Release(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Errorf("Release retried once Redis is back: %v", err)
	}
}
