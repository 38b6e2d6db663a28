package redislock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// takeClaim does what a store's start script does with a Claim: the lock
// with the claim's value for its lease, the counter set to its fence.
func (tb *testBundle) takeClaim(t *testing.T, tenant string, c tenantlock.Claim) {
	t.Helper()
	ctx := context.Background()
	if ok, err := tb.client.SetNX(ctx, tb.lockKey(tenant), c.Value, c.Lease).Result(); !ok || err != nil {
		t.Fatalf("take the claimed lock: %v, %v", ok, err)
	}
	if err := tb.client.Set(ctx, tb.fenceKey(tenant), c.Fence, 0).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestClaimAndAdopt(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			now := time.UnixMilli(1_800_000_000_000)
			tb := setup(t, b, Config{Lease: 3 * time.Second, RenewEvery: 200 * time.Millisecond, Clock: func() time.Time { return now }})
			h := holder("task-1")

			// The fence is the clock's ms, or above the task's last fence.
			c, err := tb.locker.Claim("acme", h, 0)
			if err != nil {
				t.Fatal(err)
			}
			if c.Fence != now.UnixMilli() || c.Lease != 3*time.Second || time.Since(c.Sent) > time.Second {
				t.Fatalf("claim %+v", c)
			}
			if got, ok := decodeValue(c.Value); !ok || got != h {
				t.Fatalf("claim value %q decodes to %+v, %v; want the holder", c.Value, got, ok)
			}
			if c2, _ := tb.locker.Claim("acme", h, now.UnixMilli()+7); c2.Fence != now.UnixMilli()+8 || c2.Value == c.Value {
				t.Fatalf("claim after a later fence %+v (first value %q): want fence above it and a fresh value", c2, c.Value)
			}

			tb.takeClaim(t, "acme", c)
			l, err := tb.locker.Adopt("acme", h, c)
			if err != nil {
				t.Fatal(err)
			}
			if l.Value() != c.Value || l.Fence() != c.Fence || l.Holder() != h || l.TenantID() != "acme" {
				t.Fatalf("lease %q %d %+v", l.Value(), l.Fence(), l.Holder())
			}
			// It renews like an acquired lease: past the first lease, still held.
			first := l.Deadline()
			time.Sleep(500 * time.Millisecond)
			if !l.Deadline().After(first) || l.Err() != nil {
				t.Fatalf("deadline %s → %s, err %v: want renewed", first, l.Deadline(), l.Err())
			}
			info, err := tb.locker.View(ctx, "acme")
			if err != nil || !info.Held || info.Holder != h || info.Fence != c.Fence {
				t.Fatalf("View %+v, %v", info, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if got := tb.get(t, tb.lockKey("acme")); got != "" {
				t.Fatalf("lock holds %q after Release", got)
			}
		})
	}
}

// TestAdoptLate: a claim adopted after its lease ran out is a lost lease
// (not refused), and Reacquire takes the lock back when nobody took the
// tenant since.
func TestAdoptLate(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, b, Config{Lease: 2 * time.Second})
			h := holder("task-1")
			c, err := tb.locker.Claim("acme", h, 0)
			if err != nil {
				t.Fatal(err)
			}
			c.Sent = c.Sent.Add(-time.Minute) // the script was answered long after it was sent
			tb.takeClaim(t, "acme", c)
			l, err := tb.locker.Adopt("acme", h, c)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-l.Lost():
			case <-time.After(5 * time.Second):
				t.Fatal("a lease adopted after its deadline is not lost")
			}
			if !errors.Is(l.Err(), tenantlock.ErrLeaseLost) || errors.Is(l.Err(), tenantlock.ErrLeaseRefused) {
				t.Fatalf("lease error %v, want lost, not refused", l.Err())
			}
			next := reacquireOK(t, tb.locker, l)
			if next.Fence() != c.Fence || next.Value() != c.Value {
				t.Fatalf("re-acquired %d %q", next.Fence(), next.Value())
			}
			next.Forget()
		})
	}
}

func TestClaimBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t, redistest.Backends()[0], Config{})
	good := holder("task-1")
	for name, f := range map[string]func() error{
		"tenant with braces": func() error { _, err := tb.locker.Claim("a{b}", good, 0); return err },
		"tenant with glob":   func() error { _, err := tb.locker.Claim("a*", good, 0); return err },
		"empty tenant":       func() error { _, err := tb.locker.Claim("", good, 0); return err },
		"holder with a quote": func() error {
			_, err := tb.locker.Claim("acme", tenantlock.Holder{PlanID: "p\"", TaskID: "t", Instance: "i"}, 0)
			return err
		},
		"adopt a foreign claim": func() error {
			_, err := tb.locker.Adopt("acme", good, tenantlock.Claim{Value: "x", Fence: 1, Lease: time.Hour, Sent: time.Now()})
			return err
		},
		"adopt without fence": func() error {
			_, err := tb.locker.Adopt("acme", good, tenantlock.Claim{Value: "x", Lease: tb.locker.lease, Sent: time.Now()})
			return err
		},
		"adopt for a bad tenant": func() error {
			_, err := tb.locker.Adopt("a:b\n", good, tenantlock.Claim{Value: "x", Fence: 1, Lease: tb.locker.lease, Sent: time.Now()})
			return err
		},
	} {
		if err := f(); !errors.Is(err, tenantlock.ErrInvalid) {
			t.Errorf("%s: err = %v, want tenantlock.ErrInvalid", name, err)
		}
	}
	if keys := tb.keys(t); len(keys) != 0 {
		t.Errorf("keys written by refused input: %v", keys)
	}
	lk, fk := tb.locker.LockKeys("acme")
	if lk != tb.lockKey("acme") || fk != tb.fenceKey("acme") {
		t.Errorf("LockKeys = %q, %q", lk, fk)
	}

	local, err := NewLocal(LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := local.Claim("acme", good, 0); !errors.Is(err, tenantlock.ErrInvalid) {
		t.Errorf("Claim on an in-process Locker: %v, want tenantlock.ErrInvalid", err)
	}
	if lk, fk := local.LockKeys("acme"); lk != "" || fk != "" {
		t.Errorf("LockKeys of an in-process Locker = %q, %q; want none", lk, fk)
	}
}
