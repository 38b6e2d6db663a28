package plan_test

import (
	"fmt"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Derive turns a plan's task counts, after the status move of the task that
// moved them, into the plan's next status. Stores call it whenever a task's
// status changes and apply the answer with Plan.Apply.
func ExampleDerive() {
	const total, maxFailed = 4, 1
	steps := []struct {
		current  plan.Status
		counts   plan.Counts
		from, to task.Status
	}{
		{plan.StatusRunning, plan.Counts{task.StatusRunning: 2, task.StatusPending: 2}, task.StatusPending, task.StatusRunning},
		// A second failure is over the threshold of 1: the plan pauses.
		{plan.StatusRunning, plan.Counts{task.StatusFailed: 2, task.StatusRunning: 1, task.StatusPending: 1}, task.StatusRunning, task.StatusFailed},
		// A person resumed it: starting a task does not pause it again.
		{plan.StatusRunning, plan.Counts{task.StatusFailed: 2, task.StatusRunning: 2}, task.StatusPending, task.StatusRunning},
		// A new failure does.
		{plan.StatusRunning, plan.Counts{task.StatusFailed: 3, task.StatusRunning: 1}, task.StatusRunning, task.StatusFailed},
		{plan.StatusPaused, plan.Counts{task.StatusFailed: 3, task.StatusCancelled: 1}, task.StatusRunning, task.StatusCancelled},
		// A person retries a failed task: the finished plan runs again.
		{plan.StatusFailed, plan.Counts{task.StatusFailed: 2, task.StatusRunning: 1, task.StatusCancelled: 1}, task.StatusFailed, task.StatusRunning},
		{plan.StatusRunning, plan.Counts{task.StatusFailed: 2, task.StatusCompleted: 1, task.StatusCancelled: 1}, task.StatusRunning, task.StatusCompleted},
		// A cancelled plan stays cancelled while its last task finishes its
		// stage and another is cancelled.
		{plan.StatusCancelled, plan.Counts{task.StatusRunning: 1, task.StatusCancelled: 3}, task.StatusPending, task.StatusCancelled},
	}
	for _, s := range steps {
		next, reason := plan.Derive(s.current, s.counts, total, maxFailed, s.from, s.to)
		fmt.Printf("task %-7s → %-9s  plan %-9s → %-9s %q\n", s.from, s.to, s.current, next, reason)
	}
	// Output:
	// task PENDING → RUNNING    plan RUNNING   → RUNNING   ""
	// task RUNNING → FAILED     plan RUNNING   → PAUSED    "failure threshold exceeded"
	// task PENDING → RUNNING    plan RUNNING   → RUNNING   ""
	// task RUNNING → FAILED     plan RUNNING   → PAUSED    "failure threshold exceeded"
	// task RUNNING → CANCELLED  plan PAUSED    → FAILED    "4 of 4 tasks did not complete"
	// task FAILED  → RUNNING    plan FAILED    → RUNNING   ""
	// task RUNNING → COMPLETED  plan RUNNING   → FAILED    "3 of 4 tasks did not complete"
	// task PENDING → CANCELLED  plan CANCELLED → CANCELLED ""
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
