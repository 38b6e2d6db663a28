package plan_test

import (
	"fmt"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Derive turns a plan's task counts into its next status. Stores call it
// whenever a task's status changes and apply the answer with Plan.Apply.
func ExampleDerive() {
	const total, maxFailed = 4, 1
	steps := []struct {
		current plan.Status
		counts  plan.Counts
	}{
		{plan.StatusRunning, plan.Counts{task.StatusRunning: 2, task.StatusPending: 2}},
		{plan.StatusRunning, plan.Counts{task.StatusFailed: 2, task.StatusRunning: 1, task.StatusPending: 1}},
		{plan.StatusPaused, plan.Counts{task.StatusFailed: 2, task.StatusCompleted: 1, task.StatusCancelled: 1}},
		{plan.StatusFailed, plan.Counts{task.StatusFailed: 1, task.StatusRunning: 1, task.StatusCompleted: 1, task.StatusCancelled: 1}},
		{plan.StatusRunning, plan.Counts{task.StatusCompleted: 4}},
	}
	for _, s := range steps {
		next, reason := plan.Derive(s.current, s.counts, total, maxFailed)
		fmt.Printf("%-9s → %-9s %q\n", s.current, next, reason)
	}
	// Output:
	// RUNNING   → RUNNING   ""
	// RUNNING   → PAUSED    "failure threshold exceeded"
	// PAUSED    → FAILED    "3 of 4 tasks did not complete"
	// FAILED    → RUNNING   ""
	// RUNNING   → COMPLETED ""
}

// Validate refuses a spec with a precise, safe message.
func ExampleSpec_Validate() {
	s := plan.Spec{
		Name:     "rollout 1.2",
		Pipeline: "std-rollout",
		Tenants:  []plan.TenantSpec{{TenantID: "acme"}, {TenantID: "{evil}:*\n"}},
	}
	fmt.Println(s.Validate(0))
	// Output:
	// plan: invalid: tenants[1]: tenant id "{evil}:*\n" must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$
}
