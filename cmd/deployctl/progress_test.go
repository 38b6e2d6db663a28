package main

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestFitLine: the terminal progress line of a watch fits the terminal's
// width, carries an ETA from the pace so far, and names the failing
// tenants (with +N for those not named).
func TestFitLine(t *testing.T) {
	t.Parallel()
	p := httpapi.Plan{PlanID: "plan-01JDQZV5X8M7R2K9C3B4N6P0QS", Status: plan.StatusRunning, TotalTasks: 100,
		Counts: map[task.Status]int{task.StatusCompleted: 40, task.StatusFailed: 5, task.StatusRunning: 10, task.StatusPending: 45}}
	left := eta(0, 45, 100, 90*time.Second) // 45 done in 90s: 2s a task, 55 to go
	if left != 110*time.Second {
		t.Fatalf("eta = %s, want 1m50s", left)
	}
	for _, tt := range []struct {
		width int
		want  []string
	}{
		{200, []string{"RUNNING", "45%", "45/100", "failed 5", "ETA 1m50s", "failing: t-1,t-2,t-3 +2", "["}},
		{100, []string{"RUNNING", "ETA 1m50s", "failing: t-1,t-2,t-3 +2"}},
		{60, []string{"RUNNING", "45%"}},
		{20, []string{"…"}},
	} {
		line := fitLine(p, tt.width, left, []string{"t-1", "t-2", "t-3"}, 5)
		if n := utf8.RuneCountInString(line); n > tt.width {
			t.Errorf("width %d: line of %d: %q", tt.width, n, line)
		}
		for _, w := range tt.want {
			if !strings.Contains(line, w) {
				t.Errorf("width %d: %q lacks %q", tt.width, line, w)
			}
		}
	}
	if got := eta(10, 10, 100, time.Minute); got != 0 {
		t.Errorf("eta with nothing done since the start = %s, want 0 (unknown)", got)
	}
}
