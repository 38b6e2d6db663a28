package facade_test

import (
	"context"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// TestTaskViewLockExpiresAt: a RUNNING task's view says when its tenant's
// lock frees unless renewed — within a lease from now — so that an operator
// (deployctl retry --wait-lock) knows when an orphaned task can be retried;
// a finished task's view has none.
func TestTaskViewLockExpiresAt(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be)
		b.create(spec([]task.StageSpec{gateStage("hold")}, "le-1"))
		b.gates.wait(t, "le-1", "hold")
		before := time.Now()
		v, err := b.coord.TaskByTenant(context.Background(), "le-1")
		if err != nil {
			t.Fatal(err)
		}
		if v.Status != task.StatusRunning || v.LockExpiresAt == nil {
			t.Fatalf("running task: status %s lockExpiresAt %v, want RUNNING with a time", v.Status, v.LockExpiresAt)
		}
		if !v.LockExpiresAt.After(before) || v.LockExpiresAt.After(time.Now().Add(b.cfg.Lease)) {
			t.Errorf("lockExpiresAt %s, want within a lease (%s) from now", v.LockExpiresAt, b.cfg.Lease)
		}
		b.gates.release("le-1", "hold")
		if v := b.waitTask(b.coord, "le-1", task.StatusCompleted); v.LockExpiresAt != nil {
			t.Errorf("completed task: lockExpiresAt %s, want none", v.LockExpiresAt)
		}
	})
}
