package facade_test

import (
	"context"
	"testing"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestPlanTasksTenantPrefix: the web console's tenant filter lists the
// tasks whose tenant starts with the prefix, alone or with a status; a
// prefix no tenant id could start with is refused.
func TestPlanTasksTenantPrefix(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		ctx := context.Background()
		b.target.script("eu-2", "push", 500)
		v := b.create(spec([]task.StageSpec{b.httpStage("push", task.RetryPolicy{})}, "eu-1", "eu-2", "us-1"))
		b.waitPlan(b.coord, v.ID, plan.StatusFailed)

		tenants := func(f plan.TaskFilter) []string {
			t.Helper()
			vs, next, err := b.coord.PlanTasks(ctx, v.ID, f)
			if err != nil || next != "" {
				t.Fatalf("PlanTasks(%+v): next %q, %v", f, next, err)
			}
			var out []string
			for _, tv := range vs {
				out = append(out, tv.TenantID)
			}
			return out
		}
		if got := tenants(plan.TaskFilter{TenantPrefix: "eu-"}); len(got) != 2 || got[0] != "eu-1" || got[1] != "eu-2" {
			t.Fatalf("prefix eu-: %v, want [eu-1 eu-2]", got)
		}
		if got := tenants(plan.TaskFilter{TenantPrefix: "eu-", Status: task.StatusFailed}); len(got) != 1 || got[0] != "eu-2" {
			t.Fatalf("prefix eu- FAILED: %v, want [eu-2]", got)
		}
		if got := tenants(plan.TaskFilter{TenantPrefix: "ap-"}); len(got) != 0 {
			t.Fatalf("prefix ap-: %v, want none", got)
		}
		_, _, err := b.coord.PlanTasks(ctx, v.ID, plan.TaskFilter{TenantPrefix: "eu-<script>"})
		mustCode(t, err, facade.ErrInvalid)
	})
}
