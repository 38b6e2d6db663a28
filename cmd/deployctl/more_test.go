package main

import (
	"testing"

	"github.com/deploycoord/deploycoord/plan"
)

// TestHistoryCheckpointInstancesVersion drives the commands an SRE reaches
// for in an incident against the real API: a tenant's history, its
// checkpoint, the instances and the versions.
func TestHistoryCheckpointInstancesVersion(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.fail("t-h")
	id := s.create(t, planJSON("hist", s.pushStages(), "t-h"))
	s.waitPlan(t, id, plan.StatusFailed)

	must(t, s.cli(t, "history", "--tenant", "t-h"), 0, "stdout", "TASK", "PLAN", "STATUS", id, "FAILED", "config server down")
	if m := decode(t, s.cli(t, "history", "--tenant", "t-h", "-o", "json").stdout); m["tenantId"] != "t-h" || len(m["tasks"].([]any)) != 1 {
		t.Errorf("history -o json = %v", m)
	}
	must(t, s.cli(t, "history", "--tenant", "t-{x}:*"), 2, "stderr", "is not valid")
	must(t, s.cli(t, "history", "--tenant", "t-h", "--limit", "100000"), 2, "stderr", "--limit")

	must(t, s.cli(t, "checkpoint", "--tenant", "t-h"), 0, "stdout", "TENANT", "t-h", "COMPLETED", "prepare", "ATTEMPT", "1", "SAVED")
	must(t, s.cli(t, "checkpoint", "--tenant", "t-nobody"), 3, "stderr", "NOT_FOUND")

	must(t, s.cli(t, "instances"), 0, "stdout", "INSTANCE", "ALIVE", "VERSION", "LAYOUT", "RUNNING")
	must(t, s.cli(t, "version"), 0, "stdout", "deployctl  dev")
	if m := decode(t, s.cli(t, "version", "-o", "json").stdout); m["deployctl"] != "dev" {
		t.Errorf("version -o json = %v", m)
	}
}
