package facade_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/repository"
)

// beforePause runs then once, just before the first UpdatePlan to PAUSED
// it is asked (after the pause read the plan).
type beforePause struct {
	*repository.Redis
	once sync.Once
	then func()
}

func (s *beforePause) UpdatePlan(ctx context.Context, p *plan.Plan, from ...plan.Status) error {
	if p.Status == plan.StatusPaused {
		s.once.Do(s.then)
	}
	return s.Redis.UpdatePlan(ctx, p, from...)
}

// TestPauseKeepsCancelledAt: a pause reads the plan RUNNING; meanwhile
// the plan is cancelled (on another instance) and a tenant written at that
// moment reopens it (RUNNING, cancelledAt kept). The pause's compare-and-set
// from RUNNING passes; it must not write the cancelledAt it read (none):
// the cancel would be erased, and a bulk retry that began before it would
// no longer see it (it did: a review).
func TestPauseKeepsCancelledAt(t *testing.T) {
	b := setup(t, redistest.Backends()[1], sharedMode)
	b.stopDefault()
	ctx := context.Background()
	other := newCoordinator(t, b, b.store, b.locks, "coord-b", nil)
	no := false
	s := spec(threeNoops(), "ca-1", "ca-2")
	s.Start = &no
	v, err := other.CreatePlan(ctx, s, anyone)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := b.store.Plan(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(time.Now(), "coord-gone"); err != nil {
		t.Fatal(err)
	}
	if err := b.store.UpdatePlan(ctx, p, plan.StatusCreated); err != nil {
		t.Fatal(err)
	}
	var cancelledAt time.Time
	store := &beforePause{Redis: b.store, then: func() {
		cv, err := other.CancelPlan(ctx, v.ID, "INC-9 stop", anyone)
		if err != nil {
			t.Error(err)
			return
		}
		cancelledAt = cv.Plan.CancelledAt
		// A tenant written at that moment reopens it (as the commit's test).
		rp, _, err := b.store.Plan(ctx, v.ID)
		if err != nil {
			t.Error(err)
			return
		}
		rp.Apply(time.Now(), plan.StatusRunning, "")
		if err := b.store.UpdatePlan(ctx, rp, plan.StatusCancelled); err != nil {
			t.Error(err)
		}
	}}
	c := newCoordinator(t, b, store, b.locks, "coord-a", nil)
	if _, err := c.PausePlan(ctx, v.ID, "maintenance", anyone); err != nil {
		t.Fatalf("pause: %v", err)
	}
	got, _, err := b.store.Plan(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cancelledAt.IsZero() || !got.CancelledAt.Equal(cancelledAt) {
		t.Fatalf("plan %s cancelledAt %v after a cancel at %v and a pause that read the plan before it; want the cancel kept", got.Status, got.CancelledAt, cancelledAt)
	}
}
