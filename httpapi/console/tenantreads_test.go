package console_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi/console"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// barrierStub is the coordinator, except that the tenant page's four
// independent reads (plan, timeline, history, lock) each wait until all
// four were asked, or until a second passed: read one after the other,
// each waits out the second and the page notes it.
type barrierStub struct {
	*facade.Coordinator
	mu      sync.Mutex
	arrived int
	all     chan struct{}
	late    int
}

func (s *barrierStub) meet() {
	s.mu.Lock()
	s.arrived++
	if s.arrived == 4 {
		close(s.all)
	}
	s.mu.Unlock()
	select {
	case <-s.all:
	case <-time.After(time.Second):
		s.mu.Lock()
		s.late++
		s.mu.Unlock()
	}
}

func (s *barrierStub) Plan(ctx context.Context, id string) (facade.PlanView, error) {
	s.meet()
	return s.Coordinator.Plan(ctx, id)
}

func (s *barrierStub) Timeline(ctx context.Context, tenantID string, limit int) (facade.TimelineView, error) {
	s.meet()
	return s.Coordinator.Timeline(ctx, tenantID, limit)
}

func (s *barrierStub) History(ctx context.Context, tenantID string, limit int) ([]facade.TaskView, error) {
	s.meet()
	return s.Coordinator.History(ctx, tenantID, limit)
}

func (s *barrierStub) Lock(ctx context.Context, tenantID string) (tenantlock.Info, error) {
	s.meet()
	return s.Coordinator.Lock(ctx, tenantID)
}

// TestTenantPageReadsAtOnce: the tenant page reads the plan, timeline,
// history and lock at once, not one after the other — with Redis 50 ms
// away the page took 468 ms, nine round trips of latency, four of them
// these reads in a row. The stub holds each read until all four were
// asked: read in turn, each would wait out its second.
func TestTenantPageReadsAtOnce(t *testing.T) {
	t.Parallel()
	stub := &barrierStub{all: make(chan struct{})}
	b := setup(t, bundleOpts{wrap: func(c *facade.Coordinator) console.Service { stub.Coordinator = c; return stub }})
	b.createPlan(b.coord, "reads", "t-reads")
	op := b.signedIn(operatorSecret)
	stub.mu.Lock()
	stub.arrived, stub.late = 0, 0
	stub.all = make(chan struct{})
	stub.mu.Unlock()
	op.get(b.ui("tenants/t-reads")).mustStatus(t, 200, "tenant page").mustContain(t, "tenant page", "t-reads")
	stub.mu.Lock()
	defer stub.mu.Unlock()
	if stub.arrived != 4 || stub.late != 0 {
		t.Fatalf("tenant page: %d of the 4 reads asked, %d of them waited for the others in vain: read one after the other", stub.arrived, stub.late)
	}
}
