package facade_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// gatedLocks holds the first Acquire until open is closed, after telling
// entered.
type gatedLocks struct {
	*redislock.Locker
	once          sync.Once
	entered, open chan struct{}
}

// LockKeys hides the Locker's claims (no keys): every start takes the lock
// with Acquire, the gated call, instead of in its start write.
func (g *gatedLocks) LockKeys(string) (string, string) { return "", "" }

func (g *gatedLocks) Acquire(ctx context.Context, tenantID string, h tenantlock.Holder) (*redislock.Lease, error) {
	g.once.Do(func() {
		close(g.entered)
		<-g.open
	})
	return g.Locker.Acquire(ctx, tenantID, h)
}

// TestSharedShutdownRequeuesClaimedEntry: an instance that claimed a
// plan's entry and shuts down before the task started puts the entry back
// at the head of the queue and frees its permit, so another instance runs
// the task (it used to drop the entry: the task stayed PENDING for good).
func TestSharedShutdownRequeuesClaimedEntry(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		ctx := context.Background()
		// Only the gated instance runs at first.
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := b.coord.Shutdown(sctx); err != nil {
			t.Fatal(err)
		}
		g := &gatedLocks{Locker: b.locks, entered: make(chan struct{}), open: make(chan struct{})}
		cfg := b.cfg
		cfg.Instance = "coord-x"
		x, err := facade.New(b.store, g, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			select {
			case <-g.open:
			default:
				close(g.open)
			}
		}()
		s := spec([]task.StageSpec{noopStage("only")}, "tenant-q")
		s.MaxConcurrency = 1
		v, err := x.CreatePlan(ctx, s, anyone)
		if err != nil {
			t.Fatal(err)
		}
		<-g.entered // x claimed the entry and is taking the tenant lock
		done := make(chan error, 1)
		go func() { done <- x.Shutdown(sctx) }()
		missing := plan.NewID(time.Now())
		eventually(t, 5*time.Second, func() error {
			_, err := x.ResumePlan(ctx, missing, facade.ResumeOptions{Reason: "probe"}, anyone)
			if errors.Is(err, facade.ErrShuttingDown) {
				return nil
			}
			return errf("x not closing yet: %v", err)
		})
		close(g.open)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		queued, held := queueState(t, b, v.ID)
		if len(queued) != 1 || queued[0].TenantID != "tenant-q" || queued[0].Kind != plan.QueueStart || len(held) != 0 {
			t.Fatalf("after shutdown: queued %v, held %v; want the entry queued and no permit", queued, held)
		}
		if got := b.waitTask(b.coord, "tenant-q", task.StatusPending); got.Owner != "" {
			t.Fatalf("task owner %q", got.Owner)
		}
		y := b.second("coord-y")
		b.waitPlan(y, v.ID, plan.StatusCompleted)
		if got := b.waitTask(y, "tenant-q", task.StatusCompleted); got.Owner != "coord-y" {
			t.Fatalf("owner %s", got.Owner)
		}
	})
}
