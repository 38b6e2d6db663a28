package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi/console"
)

// bulkRetryStub is the coordinator, except that a bulk retry selects ids
// (the failed tenants of a plan of tens of thousands, too many to make in
// a test) and a real one records the tenants it was given, refusing more
// than facade.MaxBulkTenants as the facade does.
type bulkRetryStub struct {
	*facade.Coordinator
	mu    sync.Mutex
	ids   []string
	calls [][]string
}

func (s *bulkRetryStub) RetryPlan(_ context.Context, planID string, req facade.PlanRetryRequest, _ facade.Actor) (facade.PlanRetryResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.DryRun {
		return facade.PlanRetryResult{PlanID: planID, Selected: len(s.ids), Retried: slices.Clone(s.ids), DryRun: true}, nil
	}
	if len(req.Tenants) > facade.MaxBulkTenants {
		return facade.PlanRetryResult{}, fmt.Errorf("%w: at most %d tenants, got %d", facade.ErrInvalid, facade.MaxBulkTenants, len(req.Tenants))
	}
	s.calls = append(s.calls, slices.Clone(req.Tenants))
	return facade.PlanRetryResult{PlanID: planID, Selected: len(req.Tenants), Retried: slices.Clone(req.Tenants)}, nil
}

func (s *bulkRetryStub) set(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = ids
}

func (s *bulkRetryStub) takeCalls() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls
	s.calls = nil
	return c
}

// TestRetryFailedLargeSelection: "retry failed" of 12 000 tenants with ids
// of the longest length. Their names do not fit a form (Go reads 10 000
// fields, the console 1 MiB, the facade takes 10 000 tenants a call): the
// dry run must still be confirmable, retry exactly its tenants, in calls
// the facade accepts, and refuse to act when the selection changed since.
func TestRetryFailedLargeSelection(t *testing.T) {
	t.Parallel()
	stub := &bulkRetryStub{}
	b := setup(t, bundleOpts{wrap: func(c *facade.Coordinator) console.Service { stub.Coordinator = c; return stub }})
	pv := b.createPlan(b.coord, "large", "t-real")
	ids := make([]string, 12_000)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%s%07d", strings.Repeat("x", 120), i) // 128 characters, the longest tenant id
	}
	stub.set(ids)
	op := b.signedIn(operatorSecret)
	csrf := op.csrf(b.ui("plans/" + pv.ID))
	ask := url.Values{"csrf": {csrf}, "scope": {"failed"}, "reason": {"INC-7 target fixed"}, "back": {b.ui("plans/" + pv.ID)}}
	dry := op.post(b.ui("plans/"+pv.ID+"/retry"), ask, nil).mustStatus(t, 200, "dry run")
	dry.mustContain(t, "dry run", "Retry 12000 failed tenants", "12000 selected, 12000 would be retried", "Retry 12000 tenants")
	if len(dry.body) > 64<<10 {
		t.Errorf("the dry run's page is %d bytes: it names every tenant", len(dry.body))
	}

	// The selection changes before the confirmation: nothing is retried,
	// the new dry run is shown.
	stub.set(ids[1:])
	again := op.post(b.ui("plans/"+pv.ID+"/retry"), confirmForm(t, dry), nil).mustStatus(t, 200, "confirm a changed selection")
	again.mustContain(t, "changed selection", "The selection changed since the dry run", "Retry 11999 failed tenants")
	if calls := stub.takeCalls(); len(calls) != 0 {
		t.Fatalf("a changed selection was retried: %d calls", len(calls))
	}

	done := op.post(b.ui("plans/"+pv.ID+"/retry"), confirmForm(t, again), nil).mustStatus(t, http.StatusSeeOther, "confirm")
	calls := stub.takeCalls()
	var got []string
	for _, c := range calls {
		if len(c) > facade.MaxBulkTenants {
			t.Errorf("a call of %d tenants", len(c))
		}
		got = append(got, c...)
	}
	if !slices.Equal(got, ids[1:]) {
		t.Fatalf("retried %d tenants in %d calls, want exactly the 11999 of the dry run", len(got), len(calls))
	}
	op.get(done.header.Get("Location")).mustContain(t, "after", "Retried 11999 of 11999 selected tenants.")
}
