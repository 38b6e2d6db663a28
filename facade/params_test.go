package facade_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestCreatePlanChecksTemplateParams: a stage template naming .Params.x that
// neither a tenant's params nor the plan's provide is refused at creation,
// naming the stage, the tenant and the key (it used to be accepted, and every
// such tenant failed at run time); nothing is stored.
func TestCreatePlanChecksTemplateParams(t *testing.T) {
	t.Parallel()
	b := setup(t, redistest.Backends()[0])
	st := b.httpStage("push", task.RetryPolicy{}) // its body uses .Params.version
	tests := []struct {
		name string
		spec plan.Spec
		want []string // nil: accepted
	}{
		{"OKPlanDefault", plan.Spec{Name: "p", Stages: []task.StageSpec{st}, Params: map[string]any{"version": "1"},
			Tenants: []plan.TenantSpec{{TenantID: "pa-1"}}}, nil},
		{"OKEveryTenant", plan.Spec{Name: "p", Stages: []task.StageSpec{st},
			Tenants: []plan.TenantSpec{{TenantID: "pb-1", Params: map[string]any{"version": "1"}}}}, nil},
		{"ErrOneTenantLacks", plan.Spec{Name: "p", Stages: []task.StageSpec{st}, Tenants: []plan.TenantSpec{
			{TenantID: "pc-1", Params: map[string]any{"version": "1"}}, {TenantID: "pc-2", Params: map[string]any{"Version": "1"}}}},
			[]string{`stage "push" uses .Params.version`, "tenant pc-2 has no param", "add it to the plan's params"}},
		{"ErrManyLack", plan.Spec{Name: "p", Stages: []task.StageSpec{st}, Tenants: []plan.TenantSpec{
			{TenantID: "pd-1"}, {TenantID: "pd-2"}, {TenantID: "pd-3"}}},
			[]string{"tenant pd-1 (and 2 other tenants) has no param \"version\""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := false
			tt.spec.Start = &start
			_, err := b.coord.CreatePlan(context.Background(), tt.spec, anyone)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("CreatePlan: %v", err)
				}
				return
			}
			if !errors.Is(err, facade.ErrInvalid) {
				t.Fatalf("CreatePlan: %v, want ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if _, err := b.coord.TaskByTenant(context.Background(), tt.spec.Tenants[0].TenantID); !errors.Is(err, facade.ErrNotFound) {
				t.Errorf("a refused plan stored a task for %s: %v", tt.spec.Tenants[0].TenantID, err)
			}
		})
	}
}
