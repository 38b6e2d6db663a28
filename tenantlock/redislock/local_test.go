package redislock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/tenantlock"
)

// acquireLocal takes the tenant's in-process lock or fails the test, and
// watches the lease.
func acquireLocal(t *testing.T, lk *Locker, tenant string, h tenantlock.Holder) *Lease {
	t.Helper()
	l, err := lk.Acquire(context.Background(), tenant, h)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", tenant, err)
	}
	watch(t, l)
	return l
}

func TestNewLocal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  LocalConfig
	}{
		{"ErrInvalidLeaseTooShort", LocalConfig{Lease: time.Millisecond}},
		{"ErrInvalidRenewNotShorter", LocalConfig{Lease: time.Second, RenewEvery: time.Second}},
		{"ErrInvalidRenewNegative", LocalConfig{Lease: time.Second, RenewEvery: -time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := NewLocal(tt.cfg); !errors.Is(err, tenantlock.ErrInvalid) {
				t.Fatalf("NewLocal: err = %v, want tenantlock.ErrInvalid", err)
			}
		})
	}
	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		l := newLocal(t, LocalConfig{})
		if l.local.lease != LeaseDefault || l.local.renewEvery != LeaseDefault/3 || l.local.clock == nil {
			t.Fatalf("lease %s, renew every %s; want %s, %s and a clock", l.local.lease, l.local.renewEvery, LeaseDefault, LeaseDefault/3)
		}
	})
}

func TestLocalAcquire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("OK", func(t *testing.T) {
		t.Parallel()
		lk := newLocal(t, LocalConfig{Lease: 10 * time.Second})
		h := holder("task-1")
		before := time.Now().UnixMilli()
		l := acquireLocal(t, lk, "acme", h)
		if !l.Local() || l.TenantID() != "acme" || l.Holder() != h {
			t.Errorf("lease local=%v %s/%+v, want local acme/%+v", l.Local(), l.TenantID(), l.Holder(), h)
		}
		var v map[string]string
		if err := json.Unmarshal([]byte(l.Value()), &v); err != nil {
			t.Fatalf("lock value %q is not JSON: %v", l.Value(), err)
		}
		if v["planId"] != h.PlanID || v["taskId"] != h.TaskID || v["owner"] != h.Instance || v["nonce"] == "" || len(v) != 4 {
			t.Errorf("lock value %q does not name the holder with planId, taskId, owner and nonce", l.Value())
		}
		if l.Fence() < before {
			t.Errorf("fence %d below the clock floor %d", l.Fence(), before)
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
		info, err := lk.View(ctx, "acme")
		if err != nil || !info.Held || info.Holder != h || info.Fence != l.Fence() || info.Value != l.Value() ||
			info.TTL <= 9*time.Second || info.TTL > 10*time.Second {
			t.Errorf("View of a held lock = %+v, %v; want held by %+v with fence %d and a TTL", info, err, h, l.Fence())
		}

		_, err = lk.Acquire(ctx, "acme", holder("task-2"))
		var le *tenantlock.LockedError
		if !errors.As(err, &le) || le.Holder != h || le.Fence != l.Fence() || le.Value != l.Value() || le.TTL <= 0 {
			t.Errorf("Acquire of a held lock: err = %v, want a *tenantlock.LockedError naming %+v with fence %d", err, h, l.Fence())
		}
		other := acquireLocal(t, lk, "other-tenant", holder("task-3"))
		if other.Value() == l.Value() {
			t.Errorf("two acquisitions share the value %q", l.Value())
		}

		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		info, err = lk.View(ctx, "acme")
		if err != nil || info.Held || info.Fence != l.Fence() || info.Value != "" || info.TTL != 0 {
			t.Errorf("View after Release = %+v, %v; want not held, last fence %d", info, err, l.Fence())
		}
		l2 := acquireLocal(t, lk, "acme", holder("task-2"))
		if l2.Fence() <= l.Fence() {
			t.Errorf("fence %d after %d, want it to increase", l2.Fence(), l.Fence())
		}
		if err := l.Release(ctx); err != nil || l2.Check(0) != nil {
			t.Errorf("second Release of the first lease = %v, next lease %v; want nil, valid", err, l2.Check(0))
		}
	})
	t.Run("OKForgetFrees", func(t *testing.T) {
		t.Parallel()
		// The task's last write cannot delete an in-process lock: Forget
		// does, and only its own.
		lk := newLocal(t, LocalConfig{Lease: 10 * time.Second})
		l := acquireLocal(t, lk, "acme", holder("task-1"))
		l.Forget()
		if info, _ := lk.View(ctx, "acme"); info.Held {
			t.Errorf("View after Forget = %+v, want not held", info)
		}
		next := acquireLocal(t, lk, "acme", holder("task-2"))
		l.Forget()
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release after Forget: %v", err)
		}
		if info, _ := lk.View(ctx, "acme"); !info.Held || info.Value != next.Value() {
			t.Errorf("View = %+v after the old lease's Forget and Release, want the next holder", info)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		t.Parallel()
		lk := newLocal(t, LocalConfig{})
		for _, id := range []string{"", "acme}{x", "acme:x", "acme*", "acme x", strings.Repeat("a", 200)} {
			if _, err := lk.Acquire(ctx, id, holder("task-1")); !errors.Is(err, tenantlock.ErrInvalid) {
				t.Errorf("Acquire(%q): err = %v, want tenantlock.ErrInvalid", id, err)
			}
			if _, err := lk.Acquire(ctx, "acme", tenantlock.Holder{PlanID: "p", TaskID: id, Instance: "i"}); !errors.Is(err, tenantlock.ErrInvalid) {
				t.Errorf("Acquire with task id %q: err = %v, want tenantlock.ErrInvalid", id, err)
			}
			if _, err := lk.View(ctx, id); !errors.Is(err, tenantlock.ErrInvalid) {
				t.Errorf("View(%q): err = %v, want tenantlock.ErrInvalid", id, err)
			}
			if _, err := lk.ForceRelease(ctx, id, 1); !errors.Is(err, tenantlock.ErrInvalid) {
				t.Errorf("ForceRelease(%q): err = %v, want tenantlock.ErrInvalid", id, err)
			}
		}
		if _, err := lk.ForceRelease(ctx, "acme", 0); !errors.Is(err, tenantlock.ErrInvalid) {
			t.Errorf("ForceRelease with fence 0: err = %v, want tenantlock.ErrInvalid", err)
		}
		if _, err := lk.Reacquire(ctx, nil); !errors.Is(err, tenantlock.ErrInvalid) {
			t.Errorf("Reacquire(nil): err = %v, want tenantlock.ErrInvalid", err)
		}
		if info, err := lk.View(ctx, "never-locked"); err != nil || info != (tenantlock.Info{TenantID: "never-locked"}) {
			t.Errorf("View of a never-locked tenant = %+v, %v; want not held, fence 0", info, err)
		}
	})
}

func TestLocalFence(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: t0}
	lk := newLocal(t, LocalConfig{Lease: 10 * time.Second, Clock: clock.Now})
	var fences []int64
	for i := range 5 {
		l := acquireLocal(t, lk, "acme", holder(fmt.Sprintf("task-%d", i)))
		fences = append(fences, l.Fence())
		if err := l.Release(context.Background()); err != nil {
			t.Fatalf("Release: %v", err)
		}
		switch i {
		case 1:
			clock.Add(time.Hour)
		case 3:
			clock.Add(-2 * time.Hour) // a clock stepped back does not lower tokens
		}
	}
	floor, later := t0.UnixMilli(), t0.Add(time.Hour).UnixMilli()
	want := []int64{floor, floor + 1, later, later + 1, later + 2}
	if !slices.Equal(fences, want) {
		t.Errorf("fences %v, want %v (floor, +1, new floor after the clock moved, +1, +1 after it stepped back)", fences, want)
	}
	other := acquireLocal(t, lk, "other-tenant", holder("task-9"))
	if other.Fence() != t0.Add(-time.Hour).UnixMilli() {
		t.Errorf("first fence of another tenant %d, want its own floor %d", other.Fence(), t0.Add(-time.Hour).UnixMilli())
	}
}

// TestLocalLease checks renewal, expiry without renewal and loss on the
// in-process table.
func TestLocalLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("OKRenewed", func(t *testing.T) {
		t.Parallel()
		lk := newLocal(t, LocalConfig{Lease: 150 * time.Millisecond, RenewEvery: 50 * time.Millisecond})
		l := acquireLocal(t, lk, "acme", holder("task-1"))
		first := l.Confirmed()
		time.Sleep(500 * time.Millisecond) // more than three leases
		if err := l.Check(0); err != nil {
			t.Fatalf("lease after three lease periods: %v", err)
		}
		if !l.Confirmed().After(first.Add(300 * time.Millisecond)) {
			t.Errorf("last confirmation %s not moved on from %s by renewals", l.Confirmed().Format(time.StampMilli), first.Format(time.StampMilli))
		}
		if _, err := lk.Acquire(ctx, "acme", holder("task-2")); !errors.Is(err, tenantlock.ErrLocked) {
			t.Errorf("Acquire of a renewed lock: err = %v, want tenantlock.ErrLocked", err)
		}
	})
	t.Run("OKExpiresWithoutRenewal", func(t *testing.T) {
		t.Parallel()
		lk := newLocal(t, LocalConfig{Lease: 200 * time.Millisecond, RenewEvery: 50 * time.Millisecond})
		l := acquireLocal(t, lk, "acme", holder("task-1"))
		l.halt() // the holder stops renewing (paused or crashed) without releasing
		waitDone(t, l, time.Second)
		if _, err := lk.Acquire(ctx, "acme", holder("task-2")); !errors.Is(err, tenantlock.ErrLocked) {
			t.Errorf("Acquire within the lease: err = %v, want tenantlock.ErrLocked", err)
		}
		time.Sleep(250 * time.Millisecond)
		if info, _ := lk.View(ctx, "acme"); info.Held || info.Fence != l.Fence() {
			t.Errorf("View one lease after renewal stopped = %+v, want not held, fence %d", info, l.Fence())
		}
		next := acquireLocal(t, lk, "acme", holder("task-2"))
		if next.Fence() <= l.Fence() {
			t.Errorf("fence %d after %d, want it to increase", next.Fence(), l.Fence())
		}
		if err := l.Release(ctx); !errors.Is(err, tenantlock.ErrLeaseLost) {
			t.Errorf("Release of the expired lease with another holder in place: err = %v, want tenantlock.ErrLeaseLost", err)
		}
		if err := next.Check(0); err != nil {
			t.Errorf("next lease after the old one's Release: %v", err)
		}
	})
	t.Run("ErrLeaseRefusedForceReleased", func(t *testing.T) {
		t.Parallel()
		lk := newLocal(t, LocalConfig{Lease: 10 * time.Second, RenewEvery: 20 * time.Millisecond})
		l := acquireLocal(t, lk, "acme", holder("task-1"))
		info, err := lk.ForceRelease(ctx, "acme", l.Fence())
		if err != nil || !info.Held || info.Holder != l.Holder() || info.Fence != l.Fence() || info.Value != l.Value() {
			t.Fatalf("ForceRelease = %+v, %v; want the lock as it was", info, err)
		}
		waitLost(t, l, 2*time.Second)
		if !l.Refused() || !errors.Is(l.Err(), tenantlock.ErrLeaseRefused) || !errors.Is(l.Check(0), tenantlock.ErrLeaseLost) {
			t.Errorf("lease after ForceRelease: refused %v, Err %v; want refused, tenantlock.ErrLeaseLost", l.Refused(), l.Err())
		}
		if info, _ := lk.View(ctx, "acme"); info.Held || info.Fence != l.Fence()+1 {
			t.Errorf("View after ForceRelease = %+v, want not held, fence moved on to %d", info, l.Fence()+1)
		}
	})
}

func TestLocalForceRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lk := newLocal(t, LocalConfig{Lease: 10 * time.Second})
	l := acquireLocal(t, lk, "acme", holder("task-1"))

	info, err := lk.ForceRelease(ctx, "acme", l.Fence()-1)
	var me *tenantlock.MismatchError
	if !errors.As(err, &me) || me.Expected != l.Fence()-1 || me.Current.Fence != l.Fence() || me.Current.Holder != l.Holder() || info != me.Current {
		t.Errorf("ForceRelease with a stale fence = %+v, %v; want a *tenantlock.MismatchError naming fence %d", info, err, l.Fence())
	}
	if err := l.Check(0); err != nil {
		t.Errorf("lease after a refused ForceRelease: %v", err)
	}

	if _, err := lk.ForceRelease(ctx, "acme", l.Fence()); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	info, err = lk.ForceRelease(ctx, "acme", l.Fence())
	if !errors.Is(err, tenantlock.ErrNotHeld) || info.Held || info.Fence != l.Fence()+1 {
		t.Errorf("ForceRelease of a free lock = %+v, %v; want tenantlock.ErrNotHeld with the counter moved on by the release", info, err)
	}
	if _, err := lk.ForceRelease(ctx, "never-locked", 1); !errors.Is(err, tenantlock.ErrNotHeld) {
		t.Errorf("ForceRelease of a never-locked tenant: err = %v, want tenantlock.ErrNotHeld", err)
	}
}

func TestLocalReacquire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("OKStillOurs", func(t *testing.T) {
		t.Parallel()
		lk := newLocal(t, LocalConfig{Lease: 10 * time.Second})
		l := acquireLocal(t, lk, "acme", holder("task-1"))
		next := reacquireOK(t, lk, l)
		// Retired: the old lease's Forget and Release leave the new lock.
		l.Forget()
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release of the retired lease: %v", err)
		}
		info, _ := lk.View(ctx, "acme")
		if !info.Held || info.Value != next.Value() || info.Fence != next.Fence() {
			t.Errorf("View = %+v after the retired lease's Forget and Release, want held with the same value and fence", info)
		}
		// Even the retired lease's own backend (a Forget racing with
		// Reacquire) cannot free the successor's lock, which holds the
		// same value.
		l.backend.forget()
		if err := l.backend.release(ctx); !errors.Is(err, errRefused) {
			t.Errorf("retired backend release: err = %v, want refused", err)
		}
		if _, err := l.backend.extend(ctx); !errors.Is(err, errRefused) {
			t.Errorf("retired backend extend: err = %v, want refused", err)
		}
		if info, _ := lk.View(ctx, "acme"); !info.Held || info.Value != next.Value() {
			t.Errorf("View = %+v after the retired backend's forget, want still held", info)
		}
		if err := next.Check(0); err != nil {
			t.Errorf("re-acquired lease: %v", err)
		}
		if _, err := lk.Reacquire(ctx, l); !errors.Is(err, tenantlock.ErrLeaseRefused) {
			t.Errorf("second Reacquire of the retired lease: err = %v, want tenantlock.ErrLeaseRefused", err)
		}
		next.Forget()
		if info, _ := lk.View(ctx, "acme"); info.Held {
			t.Errorf("View after the re-acquired lease's Forget = %+v, want not held", info)
		}
	})
	t.Run("OKLapsedNobodyTook", func(t *testing.T) {
		t.Parallel()
		lk := newLocal(t, LocalConfig{Lease: 100 * time.Millisecond, RenewEvery: 30 * time.Millisecond})
		l := acquireLocal(t, lk, "acme", holder("task-1"))
		l.halt()
		time.Sleep(150 * time.Millisecond)
		if info, _ := lk.View(ctx, "acme"); info.Held {
			t.Fatalf("View one lease after renewal stopped = %+v, want expired", info)
		}
		next := reacquireOK(t, lk, l)
		info, _ := lk.View(ctx, "acme")
		if !info.Held || info.Value != l.Value() || info.Fence != l.Fence() {
			t.Errorf("View after Reacquire = %+v, want held with value and fence %d", info, l.Fence())
		}
		time.Sleep(250 * time.Millisecond) // the new lease renews
		if err := next.Check(0); err != nil {
			t.Errorf("re-acquired lease after more than two leases: %v", err)
		}
	})
	t.Run("ErrLeaseRefusedTakenMeanwhile", func(t *testing.T) {
		t.Parallel()
		lk := newLocal(t, LocalConfig{Lease: 100 * time.Millisecond, RenewEvery: 30 * time.Millisecond})
		l := acquireLocal(t, lk, "acme", holder("task-1"))
		l.halt()
		time.Sleep(150 * time.Millisecond)
		other := acquireLocal(t, lk, "acme", holder("task-2"))
		_, err := lk.Reacquire(ctx, l)
		re := refusedAs(t, err, l)
		if !re.Current.Held || re.Current.Holder != other.Holder() || re.Current.Fence != other.Fence() {
			t.Errorf("RefusedError.Current = %+v, want the other holder with fence %d", re.Current, other.Fence())
		}
		// Released again: the lock is free but the fence moved.
		if err := other.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		_, err = lk.Reacquire(ctx, l)
		if re := refusedAs(t, err, l); re.Current.Held || re.Current.Fence != other.Fence() {
			t.Errorf("RefusedError.Current = %+v, want free with fence %d", re.Current, other.Fence())
		}
		if info, _ := lk.View(ctx, "acme"); info.Held {
			t.Errorf("View after a refused Reacquire = %+v, want nothing taken", info)
		}
	})
	t.Run("ErrLeaseRefusedForceReleased", func(t *testing.T) {
		t.Parallel()
		lk := newLocal(t, LocalConfig{Lease: 10 * time.Second, RenewEvery: 20 * time.Millisecond})
		l := acquireLocal(t, lk, "acme", holder("task-1"))
		if _, err := lk.ForceRelease(ctx, "acme", l.Fence()); err != nil {
			t.Fatalf("ForceRelease: %v", err)
		}
		waitLost(t, l, 2*time.Second)
		_, err := lk.Reacquire(ctx, l)
		refusedAs(t, err, l)
		if info, _ := lk.View(ctx, "acme"); info.Held {
			t.Errorf("View after Reacquire of a force-released lease = %+v, want the force-release left in place", info)
		}
	})
	t.Run("ErrInvalidRedisLease", func(t *testing.T) {
		t.Parallel()
		lk := newLocal(t, LocalConfig{})
		l := &Lease{tenantID: "acme", backend: &redsyncBackend{}}
		if _, err := lk.Reacquire(ctx, l); !errors.Is(err, tenantlock.ErrInvalid) {
			t.Errorf("Reacquire of a Redis lease on the in-process locker: err = %v, want tenantlock.ErrInvalid", err)
		}
	})
}

// TestLocalConcurrentHolders runs the contention history check on the
// in-process locker.
func TestLocalConcurrentHolders(t *testing.T) {
	t.Parallel()
	contend(t, []*Locker{newLocal(t, LocalConfig{Lease: 5 * time.Second})})
}
