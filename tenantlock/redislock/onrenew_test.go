package redislock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
)

// renewals counts the outcomes reported to Config.OnRenew.
type renewals struct{ ok, failed atomic.Int64 }

func (r *renewals) hook(ok bool) {
	if ok {
		r.ok.Add(1)
	} else {
		r.failed.Add(1)
	}
}

// waitFor polls cond every 10ms for up to 3s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 3s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOnRenew checks that the renewer reports each extension: confirmed
// ones as ok, the refused one (lock overwritten or force-released) as
// failed, on Redis and in process. (An attempt may also fail by timing out
// on a loaded machine; only the ones the test provokes are counted.)
func TestOnRenew(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			var r renewals
			tb := setup(t, b, Config{Lease: 10 * time.Second, RenewEvery: 100 * time.Millisecond, OnRenew: r.hook})
			l := tb.acquire(t, "acme", holder("task-1"))
			waitFor(t, "two confirmed renewals", func() bool { return r.ok.Load() >= 2 })
			failed := r.failed.Load()
			tb.client.Set(context.Background(), tb.lockKey("acme"), "other holder", 0)
			waitLost(t, l, 3*time.Second)
			if !l.Refused() || r.failed.Load() <= failed {
				t.Fatalf("lease refused %t, failed renewals %d → %d: the refusal was not reported", l.Refused(), failed, r.failed.Load())
			}
		})
	}
	t.Run("Local", func(t *testing.T) {
		t.Parallel()
		var r renewals
		lk := newLocal(t, LocalConfig{Lease: 10 * time.Second, RenewEvery: 50 * time.Millisecond, OnRenew: r.hook})
		l := acquireLocal(t, lk, "acme", holder("task-1"))
		waitFor(t, "two confirmed renewals", func() bool { return r.ok.Load() >= 2 })
		if _, err := lk.ForceRelease(context.Background(), "acme", l.Fence()); err != nil {
			t.Fatal(err)
		}
		waitLost(t, l, 3*time.Second)
		if r.failed.Load() != 1 {
			t.Fatalf("failed renewals = %d after the force-release, want 1", r.failed.Load())
		}
	})
	t.Run("NoHookOK", func(t *testing.T) {
		t.Parallel()
		lk := newLocal(t, LocalConfig{Lease: 10 * time.Second, RenewEvery: 20 * time.Millisecond})
		l := acquireLocal(t, lk, "acme", holder("task-1"))
		confirmed := l.Confirmed()
		waitFor(t, "a renewal without a hook", func() bool { return l.Confirmed().After(confirmed) })
	})
}
