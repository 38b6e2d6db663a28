package facade_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// TestRecordRefusalReachesTheFeed: a refused operator action is an
// operator.refused event of the feed, with who, what, on what, why and how
// it ended, filterable by tenant.
func TestRecordRefusalReachesTheFeed(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		b.coord.RecordRefusal(facade.Refusal{
			Actor:  facade.Actor{Name: "alice", Role: "operator", RequestID: "req-9", Addr: "192.0.2.7"},
			Action: "POST /v1/tenants/{tenantId}/retry", TenantID: "t-refused", Reason: "INC-9 again", Status: 409, Code: "TASK_RUNNING",
		})
		var got task.FeedEvent
		eventually(t, 5*time.Second, func() error {
			evs, _, err := b.coord.Events(context.Background(), task.FeedFilter{TenantID: "t-refused", Type: facade.EventOperatorRefused, Limit: 10}, 0)
			if err != nil {
				return err
			}
			if len(evs) != 1 {
				return fmt.Errorf("%d operator.refused events of t-refused, want 1", len(evs))
			}
			got = evs[0]
			return nil
		})
		want := map[string]any{"actor": "alice", "role": "operator", "requestId": "req-9", "clientAddr": "192.0.2.7",
			"action": "POST /v1/tenants/{tenantId}/retry", "reason": "INC-9 again", "code": "TASK_RUNNING", "instance": "coord-a"}
		for k, v := range want {
			if got.Data[k] != v {
				t.Errorf("data.%s = %#v, want %#v (%+v)", k, got.Data[k], v, got)
			}
		}
		if s := fmt.Sprint(got.Data["status"]); s != "409" {
			t.Errorf("data.status = %s, want 409", s)
		}
	})
}
