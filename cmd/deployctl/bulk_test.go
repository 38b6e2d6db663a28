//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// openPTY opens a pseudo-terminal pair: what is written to master is read
// from slave as typed on a terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlock pty: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatalf("pty number: %v", e)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty slave: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// cliTyping runs deployctl with stdin a terminal on which typed was typed.
func (s *stack) cliTyping(t *testing.T, typed string, args ...string) result {
	t.Helper()
	master, slave := openPTY(t)
	if _, err := master.WriteString(typed); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DEPLOYCTL_SERVER": s.url, "DEPLOYCTL_TOKEN": testToken}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := runWithInput(ctx, args, slave, &out, &errb, func(k string) string { return env[k] })
	r := result{code: code, stdout: out.String(), stderr: errb.String()}
	if strings.Contains(r.stdout+r.stderr, testToken) {
		t.Errorf("deployctl %q printed the token:\n%s", args, r)
	}
	return r
}

func TestPlanRetry(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	for _, tn := range []string{"t-r1", "t-r2", "t-r3"} {
		s.fail(tn)
	}
	id := s.create(t, planJSON("bulk", s.pushStages(), "t-r1", "t-r2", "t-r3", "t-rok"))
	s.waitPlan(t, id, plan.StatusFailed)
	s.idle(t)
	path := "/v1/plans/" + id + "/retry"
	sent := func() int { return len(s.requests("POST", path)) }
	reason := "INC-11 config server back"

	// Refused before any request (exit 2).
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"NoSelection", []string{"--reason", reason}, "--status FAILED"},
		{"StatusCompleted", []string{"--status", "COMPLETED", "--reason", reason}, "--status"},
		{"StatusRunning", []string{"--status", "RUNNING", "--reason", reason}, "--orphaned"},
		{"StatusTwice", []string{"--status", "FAILED", "--status", "failed", "--reason", reason}, "twice"},
		{"StatusGlob", []string{"--status", "FAIL*", "--reason", reason}, "--status"},
		{"TenantBraces", []string{"--status", "FAILED", "--tenant", "t-{r1}", "--reason", reason}, "not valid"},
		{"TenantColon", []string{"--status", "FAILED", "--tenant", "t-r1:x", "--reason", reason}, "not valid"},
		{"TenantControl", []string{"--status", "FAILED", "--tenant", "t-r1\x1b[31m", "--reason", reason}, "not valid"},
		{"TenantTwice", []string{"--status", "FAILED", "--tenant", "t-r1,t-r2", "--tenant", "t-r1", "--reason", reason}, "twice"},
		{"TwoModes", []string{"--status", "FAILED", "--from-stage", "push", "--from-start", "--reason", reason}, "choose one"},
		{"FromStageGlob", []string{"--status", "FAILED", "--from-stage", "pu*", "--reason", reason}, "not a valid stage"},
		{"NoReason", []string{"--status", "FAILED"}, "--reason is required"},
		{"ReasonControl", []string{"--status", "FAILED", "--reason", "x\ny"}, "--reason"},
		{"BadKey", []string{"--status", "FAILED", "--reason", reason, "--yes", "--idempotency-key", "a b"}, "--idempotency-key"},
		// Not a terminal and no --yes: refused, nothing sent.
		{"NotATerminal", []string{"--status", "FAILED", "--reason", reason}, "add --yes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := sent()
			must(t, s.cli(t, append([]string{"plan", "retry", id}, tt.args...)...), 2, "stderr", tt.want)
			if sent() != before {
				t.Fatalf("a refused invocation sent a request")
			}
		})
	}
	must(t, s.cli(t, "plan", "retry", "plan-{x}", "--status", "FAILED", "--reason", reason), 2, "stderr", "plan id")
	// /dev/null is a character device, not a terminal: refused too.
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	var out, errb bytes.Buffer
	before := sent()
	if code := runWithInput(context.Background(), []string{"plan", "retry", id, "--status", "FAILED", "--reason", reason},
		devNull, &out, &errb, func(k string) string {
			return map[string]string{"DEPLOYCTL_SERVER": s.url, "DEPLOYCTL_TOKEN": testToken}[k]
		}); code != 2 || !strings.Contains(errb.String(), "add --yes") || sent() != before {
		t.Fatalf("stdin %s: exit %d, %d requests sent\n%s%s", os.DevNull, code, sent()-before, out.String(), errb.String())
	}

	// A dry run lists the tenants and changes nothing.
	r := s.cli(t, "plan", "retry", id, "--status", "FAILED", "--reason", reason, "--dry-run")
	must(t, r, 0, "stdout", "will retry 3 tenant(s) of plan "+id, "t-r1, t-r2, t-r3", "dry run, nothing changed")
	j := s.cli(t, "plan", "retry", id, "--status", "FAILED", "--reason", reason, "--dry-run", "-o", "json")
	if m := decode(t, j.stdout); m["dryRun"] != true || m["selected"] != 3.0 {
		t.Fatalf("dry run -o json = %v", m)
	}

	// A tenant named but not selected (not in the plan, or not FAILED) is
	// said so.
	r = s.cli(t, "plan", "retry", id, "--status", "FAILED", "--tenant", "t-r1,t-rok,t-nope", "--reason", reason, "--dry-run")
	must(t, r, 0, "stdout", "will retry 1 tenant(s) of plan "+id+" (1 selected): t-r1;",
		"not selected (not in the plan, or not in the statuses asked): t-rok, t-nope")

	f := writeFile(t, "tenants.txt", "t-r2  # the second\n\nt-r1\nt-r2\n")
	r = s.cli(t, "plan", "retry", id, "--status", "FAILED", "--tenants-file", f, "--tenant", "t-r2", "--reason", reason, "--dry-run")
	must(t, r, 0, "stdout", "will retry 2 tenant(s) of plan "+id+" (2 selected): t-r1, t-r2;")
	if reqs := s.requests("POST", path); !strings.Contains(reqs[len(reqs)-1].body, `"tenants":["t-r2","t-r1"]`) {
		t.Fatalf("--tenant and --tenants-file sent %s", reqs[len(reqs)-1].body)
	}
	before = sent()
	must(t, s.cliIn(t, "t-r1\n", "plan", "retry", id, "--status", "FAILED", "--tenants-file", "-", "--reason", reason), 2, "stderr", "add --yes")
	must(t, s.cli(t, "plan", "retry", id, "--status", "FAILED", "--tenants-file", writeFile(t, "bad.txt", "t-r1\nt-{x}\n"), "--reason", reason, "--dry-run"),
		2, "stderr", "line 2")
	if sent() != before {
		t.Fatalf("refused invocations sent requests")
	}

	// On a terminal: the dry run is shown and "n" changes nothing.
	before = sent()
	r = s.cliTyping(t, "n\n", "plan", "retry", id, "--status", "FAILED", "--reason", reason)
	must(t, r, 1, "stdout", "will retry 3 tenant(s)", "t-r1, t-r2, t-r3")
	must(t, r, 1, "stderr", "Retry 3 tenant(s) of plan "+id+"? [y/N]", "not confirmed: nothing retried")
	if got := sent() - before; got != 1 {
		t.Fatalf("declined: %d requests sent, want the dry run only", got)
	}
	if v, _ := s.coord.Plan(context.Background(), id); v.Status != plan.StatusFailed || v.Counts[task.StatusFailed] != 3 {
		t.Fatalf("declined retry changed the plan: %s %v", v.Status, v.Counts)
	}

	// "y": exactly the tenants shown are retried; the one whose lock
	// another holder has is skipped with the reason (exit 4).
	for _, tn := range []string{"t-r1", "t-r2", "t-r3"} {
		s.heal(tn)
	}
	lease := s.holdLock(t, "t-r3", tenantlock.Holder{
		PlanID: "plan-01JDQZV5X8M7R2K9C3B4N6P0QS", TaskID: "task-01JDQZV5X8M7R2K9C3B4N6P0QS", Instance: "coord-b"})
	r = s.cliTyping(t, "y\n", "plan", "retry", id, "--status", "FAILED", "--reason", reason)
	must(t, r, 4, "stdout", "retried 2 tenant(s) of plan "+id, "t-r1, t-r2", "skipped 1:", "TENANT", "CODE", "t-r3", "TENANT_LOCKED")
	must(t, r, 4, "stderr", "1 selected tenant(s) of plan "+id+" were not retried")
	reqs := s.requests("POST", path)
	var confirmed struct {
		Tenants []string `json:"tenants"`
		DryRun  bool     `json:"dryRun"`
		Reason  string   `json:"reason"`
	}
	if err := json.Unmarshal([]byte(reqs[len(reqs)-1].body), &confirmed); err != nil {
		t.Fatal(err)
	}
	if confirmed.DryRun || confirmed.Reason != reason || !slices.Equal(confirmed.Tenants, []string{"t-r1", "t-r2", "t-r3"}) {
		t.Fatalf("the confirmed retry sent %s, want the dry run's tenants", reqs[len(reqs)-1].body)
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tn := range []string{"t-r1", "t-r2"} {
		if v := s.waitTask(t, tn, task.StatusCompleted); v.Attempt != 2 {
			t.Fatalf("%s: attempt %d after one bulk retry", tn, v.Attempt)
		}
	}

	// --yes needs no terminal; -o json prints the answer.
	j = s.cli(t, "plan", "retry", id, "--status", "FAILED", "--tenant", "t-r3", "--reason", reason, "--yes", "-o", "json")
	if j.code != 0 {
		t.Fatalf("plan retry --yes: %s", j)
	}
	if m := decode(t, j.stdout); m["dryRun"] != false || m["selected"] != 1.0 || len(m["retried"].([]any)) != 1 {
		t.Fatalf("plan retry --yes -o json = %v", m)
	}
	s.waitPlan(t, id, plan.StatusCompleted)
	if v := s.waitTask(t, "t-r3", task.StatusCompleted); v.Attempt != 2 {
		t.Fatalf("t-r3: attempt %d", v.Attempt)
	}
	// Tenants named and not selected: nothing done, and not exit 0 (it
	// said "retried 0 tenant(s)" and exited 0).
	r = s.cli(t, "plan", "retry", id, "--status", "FAILED", "--tenant", "t-r3,t-nope", "--reason", reason, "--yes")
	must(t, r, 4, "stdout", "retried 0 tenant(s)", "not selected (not in the plan, or not in the statuses asked): t-r3, t-nope")
	must(t, r, 4, "stderr", "2 tenant(s) named were not selected in plan "+id)
	// Nothing left: nothing asked.
	before = sent()
	r = s.cliTyping(t, "", "plan", "retry", id, "--status", "FAILED", "--reason", reason)
	must(t, r, 0, "stdout", "will retry 0 tenant(s)")
	if strings.Contains(r.stderr, "[y/N]") || sent()-before != 1 {
		t.Fatalf("nothing to retry, yet asked or sent more than the dry run:\n%s", r)
	}
}
