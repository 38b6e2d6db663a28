package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
)

func TestStatusAndTimeline(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.fail("t-s1")
	id := s.create(t, planJSON("status", s.pushStages(), "t-s1", "t-s2"))
	s.waitPlan(t, id, plan.StatusFailed)

	t.Run("OneTenant", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "status", "--tenant", "t-s1")
		must(t, r, 0, "stdout", "TENANT", "t-s1", "STATUS", "FAILED", "2/3 push", "HTTP 500", "completed: prepare", id)
		j := s.cli(t, "status", "--tenant", "t-s1", "-o", "json")
		m := decode(t, j.stdout)
		if m["status"] != "FAILED" || m["hasCheckpoint"] != true || m["planId"] != id || m["createdAt"] == nil {
			t.Fatalf("status -o json = %v", m)
		}
	})
	t.Run("ErrUnknownTenant", func(t *testing.T) {
		t.Parallel()
		must(t, s.cli(t, "status", "--tenant", "t-none"), 3, "stderr", "error: NOT_FOUND: ")
	})
	t.Run("TenantsFile", func(t *testing.T) {
		t.Parallel()
		f := writeFile(t, "tenants.txt", "t-s1\n# the healthy one\n\n  t-s2   # trailing comment\nt-none\nt-s1\n")
		r := s.cli(t, "status", "--tenants-file", f)
		must(t, r, 0, "stdout", "TENANT", "CHECKPOINT")
		rows := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(rows) != 4 {
			t.Fatalf("%d lines, want a header and 3 tenants (duplicate dropped)\n%s", len(rows), r)
		}
		for i, want := range [][]string{{"t-s1", "FAILED", "prepare"}, {"t-s2", "COMPLETED"}, {"t-none", "not found"}} {
			for _, w := range want {
				if !strings.Contains(rows[i+1], w) {
					t.Fatalf("row %d %q lacks %q\n%s", i+1, rows[i+1], w, r)
				}
			}
		}
		j := s.cli(t, "status", "--tenants-file", f, "-o", "json")
		tasks := decode(t, j.stdout)["tasks"].(map[string]any)
		if len(tasks) != 3 || tasks["t-none"] != nil || tasks["t-s2"].(map[string]any)["status"] != "COMPLETED" {
			t.Fatalf("tenants-file -o json = %v", tasks)
		}
		if _, ok := tasks["t-none"]; !ok {
			t.Fatal("t-none is missing instead of null")
		}
	})
	t.Run("TenantsFileStdin", func(t *testing.T) {
		t.Parallel()
		r := s.cliIn(t, "t-s2\n", "status", "--tenants-file", "-")
		must(t, r, 0, "stdout", "t-s2", "COMPLETED")
	})
	t.Run("TenantsFileChunks", func(t *testing.T) {
		t.Parallel()
		var b strings.Builder
		b.WriteString("t-s1\n")
		for i := range 1500 {
			fmt.Fprintf(&b, "t-x-%d\n", i)
		}
		before := len(s.requests("POST", "/v1/tenants:status"))
		r := s.cli(t, "status", "--tenants-file", writeFile(t, "many.txt", b.String()), "-o", "json")
		must(t, r, 0, "stdout")
		var m struct {
			Tasks map[string]json.RawMessage `json:"tasks"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
			t.Fatal(err)
		}
		if len(m.Tasks) != 1501 || string(m.Tasks["t-x-1499"]) != "null" || !strings.Contains(string(m.Tasks["t-s1"]), `"FAILED"`) {
			t.Fatalf("%d tenants; t-x-1499 = %s; t-s1 = %.80s", len(m.Tasks), m.Tasks["t-x-1499"], m.Tasks["t-s1"])
		}
		// Other subtests post too; at least this run's two chunks, each at
		// most 1000 ids.
		posts := s.requests("POST", "/v1/tenants:status")[before:]
		big := 0
		for _, p := range posts {
			var body struct {
				TenantIDs []string `json:"tenantIds"`
			}
			if err := json.Unmarshal([]byte(p.body), &body); err != nil {
				t.Fatal(err)
			}
			if len(body.TenantIDs) > 1000 {
				t.Fatalf("a chunk of %d ids", len(body.TenantIDs))
			}
			if len(body.TenantIDs) >= 501 {
				big++
			}
		}
		if big != 2 {
			t.Fatalf("%d large chunks, want 2 (1000 + 501)", big)
		}
	})
	t.Run("ErrBadIDInFile", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "status", "--tenants-file", writeFile(t, "bad.txt", "t-s1\nt s2\n"))
		must(t, r, 2, "stderr", "line 2: tenant id \"t s2\" is not valid")
	})
	t.Run("Timeline", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "timeline", "--tenant", "t-s1")
		must(t, r, 0, "stdout", "tenant t-s1, task task-", "AT", "TYPE", "task.started", "task.stage_succeeded", "prepare", "task.stage_failed", "push")
		j := s.cli(t, "timeline", "--tenant", "t-s1", "-o", "json")
		m := decode(t, j.stdout)
		evs := m["events"].([]any)
		if len(evs) < 3 || evs[0].(map[string]any)["type"] != "task.started" || evs[0].(map[string]any)["at"] == nil {
			t.Fatalf("timeline -o json = %v", m)
		}
		must(t, s.cli(t, "timeline", "--tenant", "t-none"), 3, "stderr", "NOT_FOUND")
		// -o wide adds the times themselves (an operator lining entries up
		// with logs read only "14m ago" on every row).
		w := s.cli(t, "timeline", "--tenant", "t-s1", "-o", "wide")
		if !regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \(`).MatchString(w.stdout) {
			t.Fatalf("timeline -o wide shows no times:\n%s", w)
		}
	})
}

func TestRetry(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.fail("t-r")
	id := s.create(t, planJSON("retry", s.pushStages(), "t-r"))
	s.waitPlan(t, id, plan.StatusFailed)
	bodies := func() []map[string]any {
		var out []map[string]any
		for _, r := range s.requests("POST", "/v1/tenants/t-r/retry") {
			var m map[string]any
			if err := json.Unmarshal([]byte(r.body), &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
		return out
	}
	lastBody := func() map[string]any { b := bodies(); return b[len(b)-1] }
	retried := func(attempt int) {
		t.Helper()
		s.idle(t)
		if v := s.waitTask(t, "t-r", task.StatusFailed); v.Attempt != attempt {
			t.Fatalf("attempt %d, want %d", v.Attempt, attempt)
		}
	}

	r := s.cli(t, "retry", "--tenant", "t-r", "--from-checkpoint", "--dry-run", "--reason", "check")
	must(t, r, 0, "stdout", "dry run: tenant t-r would run push, settle; nothing changed")
	if b := lastBody(); b["dryRun"] != true || b["fromCheckpoint"] != true || b["reason"] != "check" {
		t.Fatalf("dry-run body = %v", b)
	}
	if v := s.waitTask(t, "t-r", task.StatusFailed); v.Attempt != 1 {
		t.Fatalf("a dry run changed the task: %+v", v)
	}

	r = s.cli(t, "retry", "--tenant", "t-r", "--from-checkpoint", "--expected-attempt", "5", "--reason", "stale")
	must(t, r, 4, "stderr", "error: ATTEMPT_MISMATCH: ")

	r = s.cli(t, "retry", "--tenant", "t-r", "--from-checkpoint", "--expected-attempt", "1", "--idempotency-key", "inc-1234-a", "--reason", "INC-1234 fixed")
	must(t, r, 0, "stdout", "retry accepted: tenant t-r, task task-", "attempt 2")
	if b := lastBody(); b["expectedAttempt"] != 1.0 || b["fromCheckpoint"] != true {
		t.Fatalf("retry body = %v", b)
	}
	if got := s.requests("POST", "/v1/tenants/t-r/retry"); got[len(got)-1].idempotencyKey != "inc-1234-a" {
		t.Fatalf("Idempotency-Key = %q", got[len(got)-1].idempotencyKey)
	}
	retried(2)

	must(t, s.cli(t, "retry", "--tenant", "t-r", "--from-stage", "prepare", "--reason", "again"), 0, "stdout", "attempt 3")
	if b := lastBody(); b["fromStage"] != "prepare" || b["fromCheckpoint"] != nil {
		t.Fatalf("from-stage body = %v", b)
	}
	retried(3)

	r = s.cli(t, "retry", "--tenant", "t-r", "--from-start", "--reason", "from scratch", "-o", "json")
	must(t, r, 0, "stdout")
	if m := decode(t, r.stdout); m["attempt"] != 4.0 || m["tenantId"] != "t-r" {
		t.Fatalf("retry -o json = %v", m)
	}
	if b := lastBody(); b["fromCheckpoint"] != false {
		t.Fatalf("from-start body = %v", b)
	}
	retried(4)

	must(t, s.cli(t, "retry", "--tenant", "t-r", "--skip", "--outputs", `{"pushed": false}`, "--reason", "pushed by hand"), 0, "stdout", "attempt 5")
	if b := lastBody(); b["skipStage"] != true || fmt.Sprint(b["outputs"]) != "map[pushed:false]" {
		t.Fatalf("skip body = %v", b)
	}
	s.idle(t)
	s.waitTask(t, "t-r", task.StatusCompleted)
	must(t, s.cli(t, "timeline", "--tenant", "t-r"), 0, "stdout", "pushed by hand", "task.completed")
	must(t, s.cli(t, "status", "--tenant", "t-r"), 0, "stdout", "COMPLETED", "skipped: push")
	must(t, s.cli(t, "retry", "--tenant", "t-r", "--from-checkpoint", "--reason", "once more"), 4, "stderr", "error: TASK_COMPLETED: ",
		"create a new plan for it", "tenants [t-r]")
	must(t, s.cli(t, "retry", "--tenant", "t-none", "--from-checkpoint", "--reason", "r"), 3, "stderr", "error: NOT_FOUND: ")
}

func TestLock(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	// A tenant never locked has no fence yet: 0 is not one handed out.
	never := s.cli(t, "lock", "show", "--tenant", "t-lock")
	must(t, never, 0, "stdout", "HELD", "no", "FENCE", "none handed out yet")
	if strings.Contains(never.stdout, "last one handed out") {
		t.Fatalf("lock show of a tenant never locked calls fence 0 the last one handed out:\n%s", never.stdout)
	}
	must(t, s.cli(t, "lock", "release", "--tenant", "t-lock", "--expected-fence", "1", "--reason", "r"), 3, "stderr", "NOT_FOUND")

	lease := s.holdLock(t, "t-lock", tenantlock.Holder{
		PlanID: "plan-01JDQZV5X8M7R2K9C3B4N6P0QS", TaskID: "task-01JDQZV5X8M7R2K9C3B4N6P0QS", Instance: "coord-b"})
	defer func() { _ = lease.Release(context.Background()) }()
	fence := strconv.FormatInt(lease.Fence(), 10)

	must(t, s.cli(t, "lock", "show", "--tenant", "t-lock"), 0, "stdout", "HELD", "yes", "OWNER", "coord-b", "TTL", "FENCE", fence, "task-01JDQZV5X8M7R2K9C3B4N6P0QS")
	j := s.cli(t, "lock", "show", "--tenant", "t-lock", "-o", "json")
	if m := decode(t, j.stdout); m["held"] != true || m["fence"] != float64(lease.Fence()) || m["ttlMs"].(float64) <= 0 {
		t.Fatalf("lock show -o json = %v", m)
	}
	must(t, s.cli(t, "lock", "release", "--tenant", "t-lock", "--reason", "r"), 2, "stderr", "--expected-fence N is required")
	must(t, s.cli(t, "lock", "release", "--tenant", "t-lock", "--expected-fence", strconv.FormatInt(lease.Fence()+1, 10), "--reason", "r"),
		4, "stderr", "error: LOCK_MISMATCH: ", "the lock's fence is "+fence+", expectedFence given is "+strconv.FormatInt(lease.Fence()+1, 10),
		"check the digits", "held by coord-b for task task-01JDQZV5X8M7R2K9C3B4N6P0QS")
	must(t, s.cli(t, "lock", "release", "--tenant", "t-lock", "--expected-fence", fence, "--reason", "INC-9 coord-b gone"),
		0, "stdout", "released the lock of tenant t-lock held by coord-b", "fence "+fence)
	must(t, s.cli(t, "lock", "show", "--tenant", "t-lock"), 0, "stdout", "no")
}

func TestTaskActions(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	stages := `[{"name": "one", "kind": "sleep", "sleep": {"duration": "400ms"}},
		{"name": "two", "kind": "sleep", "sleep": {"duration": "2s"}}, {"name": "three", "kind": "noop"}]`
	s.create(t, planJSON("task-actions", stages, "t-ta"))
	s.waitTask(t, "t-ta", task.StatusRunning)

	must(t, s.cli(t, "task", "pause", "--tenant", "t-ta"), 2, "stderr", "--reason is required")
	must(t, s.cli(t, "task", "pause", "--tenant", "t-ta", "--reason", "hold for INC-9"), 0, "stdout", "TENANT", "t-ta")
	// Paused before a stage: "one" if the request beat the first stage.
	if v := s.waitTask(t, "t-ta", task.StatusPaused); v.StageName != "one" && v.StageName != "two" {
		t.Fatalf("paused at %q, want before one or two", v.StageName)
	}
	r := s.cli(t, "task", "resume", "--tenant", "t-ta", "--reason", "INC-9 over", "-o", "json")
	must(t, r, 0, "stdout")
	if m := decode(t, r.stdout); m["tenantId"] != "t-ta" {
		t.Fatalf("task resume -o json = %v", m)
	}
	s.waitTask(t, "t-ta", task.StatusRunning)
	// The run must be registered here too, or the coordinator takes the
	// RUNNING task for an orphan of a dead process and refuses the cancel.
	eventually(t, func() error {
		if s.coord.Running() == 0 {
			v, err := s.coord.TaskByTenant(context.Background(), "t-ta")
			return fmt.Errorf("the resumed task does not run on the coordinator yet (%s at %q, %v)", v.Status, v.StageName, err)
		}
		return nil
	})
	must(t, s.cli(t, "task", "cancel", "--tenant", "t-ta", "--reason", "tenant offboarded"), 0, "stdout", "t-ta")
	s.waitTask(t, "t-ta", task.StatusCancelled)
	must(t, s.cli(t, "task", "resume", "--tenant", "t-ta", "--reason", "no"), 4, "stderr", "error: ")
	must(t, s.cli(t, "task", "cancel", "--tenant", "t-none", "--reason", "r"), 3, "stderr", "NOT_FOUND")
	s.idle(t)
}
