package facade_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// minRoundTrips returns the fewest round trips f made over a few tries: the
// coordinator's own background work (heartbeats, the run-id check, the
// plan poll every 50 ms) may add to a try, never take away. Ten tries: under
// -race on a busy machine a try of a 1 000-tenant read lasts long enough
// that three in a row each met some background round trip.
func minRoundTrips(t *testing.T, b *bundle, f func() error) int64 {
	t.Helper()
	best := int64(-1)
	for range 10 {
		var err error
		n := b.counter.Count(func() { err = f() })
		if err != nil {
			t.Fatal(err)
		}
		if best < 0 || n < best {
			best = n
		}
	}
	return best
}

// TestTenantQueryRoundTrips: the tenant status of 1 000 tenants
// (POST /v1/tenants:status) takes at most 3 round trips, and the tenant
// query (GET /v1/tenants/{id}/task) 1 once asked before.
func TestTenantQueryRoundTrips(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		tenants := make([]string, 1000)
		for i := range tenants {
			tenants[i] = fmt.Sprintf("rt-%04d", i)
		}
		s := spec(threeNoops(), tenants[:990]...)
		no := false
		s.Start = &no
		b.create(s)
		var views int
		n := minRoundTrips(t, b, func() error {
			vs, err := b.coord.TasksByTenant(ctx, tenants)
			views = len(vs)
			return err
		})
		if n > 3 {
			t.Errorf("TasksByTenant of 1 000 tenants: %d round trips, want at most 3", n)
		}
		if views != 990 {
			t.Errorf("TasksByTenant: %d tasks, want 990 (10 tenants have none)", views)
		}
		n = minRoundTrips(t, b, func() error {
			v, err := b.coord.TaskByTenant(ctx, tenants[5])
			if err == nil && (v.TenantID != tenants[5] || v.Status != task.StatusPending) {
				err = fmt.Errorf("TaskByTenant = %s %s", v.TenantID, v.Status)
			}
			return err
		})
		if n != 1 {
			t.Errorf("TaskByTenant asked before: %d round trips, want 1", n)
		}
	})
}

func threeNoops() []task.StageSpec {
	return []task.StageSpec{noopStage("a"), noopStage("b"), noopStage("c")}
}
