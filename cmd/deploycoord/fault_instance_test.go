package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/task"
)

// slack is what the drills allow on top of a bound the design promises
// (one lease, one lease + one heartbeat): process scheduling on a loaded
// 2-core machine running -race binaries, and the 10ms polling of the test.
const slack = time.Second

// TestFaultCrashMidStage is drill 1: the owner is killed (SIGKILL) while a
// stage call is in flight. The task shows orphaned within one lease and one
// heartbeat, its lock frees itself within one lease, a retry on the other
// instance finishes it from the checkpoint, and the stages completed before
// the crash are not called again.
func TestFaultCrashMidStage(t *testing.T) {
	t.Parallel()
	d := newDrill(t, nil)
	tg := newFaultTarget(t)
	a, b := d.start("coord-a"), d.start("coord-b")
	const tenant = "crash-1"
	tg.holdWhere(func(c stageCall) bool { return c.Stage == "hold" && c.Attempt == 1 })
	p := a.createPlan(map[string]any{
		"name":    "drill-crash",
		"stages":  []any{tg.stage("push"), tg.stage("config"), tg.stage("hold"), tg.stage("verify")},
		"tenants": tenants(tenant),
	})
	tg.waitCall(15*time.Second, "hold call", func(c stageCall) bool { return c.Tenant == tenant && c.Stage == "hold" })
	before := b.task(tenant)
	held := b.lock(tenant)
	if before.Status != task.StatusRunning || before.Owner != "coord-a" || !held.Held || held.Fence != before.Fence {
		t.Fatalf("before the crash: task %s owner %s fence %d, lock %+v; want RUNNING on coord-a holding the lock", before.Status, before.Owner, before.Fence, held)
	}

	killed := time.Now()
	a.kill()
	var orphanedAfter, freeAfter, deadAfter time.Duration
	until(t, 4*drillLease, func() (bool, string) {
		if deadAfter == 0 {
			for _, in := range b.instances() {
				if in.ID == "coord-a" && !in.Alive {
					deadAfter = time.Since(killed)
				}
			}
		}
		if orphanedAfter == 0 {
			if tk := b.task(tenant); tk.Orphaned {
				orphanedAfter = time.Since(killed)
				if tk.Status != task.StatusRunning || tk.Owner != "coord-a" {
					t.Errorf("orphaned task is %s owned by %s, want still RUNNING on coord-a", tk.Status, tk.Owner)
				}
			}
		}
		if freeAfter == 0 && !b.lock(tenant).Held {
			freeAfter = time.Since(killed)
		}
		return orphanedAfter > 0 && freeAfter > 0 && deadAfter > 0,
			fmt.Sprintf("orphaned after %s, lock free after %s, coord-a listed dead after %s", orphanedAfter, freeAfter, deadAfter)
	})
	d.figure("SIGKILL → GET /v1/instances shows coord-a not alive", deadAfter)
	d.figure("SIGKILL → task orphaned", orphanedAfter)
	d.figure("SIGKILL → lock free", freeAfter)
	if limit := drillLease + drillLease/3 + slack; orphanedAfter > limit {
		t.Errorf("task orphaned %s after the crash, want within one lease + one heartbeat (%s)", orphanedAfter, limit)
	}
	if limit := drillLease + slack; freeAfter > limit {
		t.Errorf("lock freed %s after the crash, want within one lease (%s)", freeAfter, limit)
	}

	retried := time.Now()
	took := must[httpapi.TaskDetail](b, "POST", "/v1/tenants/"+tenant+"/retry", map[string]any{"reason": "drill: owner crashed"}, http.StatusAccepted)
	if took.Owner != "coord-b" || took.Attempt != 2 || took.Fence <= before.Fence {
		t.Fatalf("takeover answered owner %s attempt %d fence %d, want coord-b, 2, above %d", took.Owner, took.Attempt, took.Fence, before.Fence)
	}
	b.waitPlan(p.PlanID, 20*time.Second, "COMPLETED")
	d.figure("retry → plan COMPLETED", time.Since(retried))

	for stage, want := range map[string][]int{"push": {1}, "config": {1}, "hold": {1, 2}, "verify": {2}} {
		var got []int
		for _, c := range tg.of(tenant, stage) {
			got = append(got, c.Attempt)
		}
		if !slices.Equal(got, want) {
			t.Errorf("target saw %s called by attempts %v, want %v", stage, got, want)
		}
	}
	if cs := tg.find(func(c stageCall) bool { return c.Stage == "hold" && c.Attempt == 1 }); len(cs) != 1 || !cs[0].Cut {
		t.Errorf("the crashed owner's hold call: %v, want one call cut when the process died", cs)
	}
	tk := b.task(tenant)
	ck := b.checkpoint(tenant)
	if tk.Status != task.StatusCompleted || tk.Owner != "coord-b" || tk.Attempt != 2 || tk.Fence != took.Fence {
		t.Errorf("final task: %s owner %s attempt %d fence %d, want COMPLETED coord-b 2 %d", tk.Status, tk.Owner, tk.Attempt, tk.Fence, took.Fence)
	}
	if !slices.Equal(ck.CompletedStages, []string{"push", "config", "hold", "verify"}) || ck.Attempt != 2 || ck.Fence != took.Fence {
		t.Errorf("final checkpoint: %v attempt %d fence %d, want every stage, attempt 2, fence %d", ck.CompletedStages, ck.Attempt, ck.Fence, took.Fence)
	}
	tl := b.timeline(tenant)
	for _, s := range []string{"push", "config", "hold", "verify"} {
		if n := countEv(tl, task.EventStageSucceeded, s); n != 1 {
			t.Errorf("timeline: %s succeeded %d times, want once: %s", s, n, evTypes(tl))
		}
	}
	takeover := false
	for _, e := range tl {
		if e.Type == task.EventRetryRequested && e.Data["takeover"] == true && e.Data["previousOwner"] == "coord-a" {
			takeover = true
		}
	}
	if !takeover {
		t.Errorf("timeline lacks the takeover from coord-a: %s", evTypes(tl))
	}
	checkCounts(t, b, p.PlanID)
	if err := checkExclusive(tg.snapshot()); err != nil {
		t.Error(err)
	}
	// The feed tells an external system about the takeover. It is published
	// asynchronously (batches every 20ms), so what the crashed owner had
	// not published yet is only in the timeline.
	var fromA int
	until(t, 5*time.Second, func() (bool, string) {
		var types []string
		fromA = 0
		for _, e := range b.feed("tenantId=" + tenant) {
			types = append(types, e.Type)
			if e.Data["attempt"] == 1.0 || e.Data["instance"] == "coord-a" {
				fromA++
			}
		}
		for _, want := range []string{"task.retry_requested", "task.completed"} {
			if !slices.Contains(types, want) {
				return false, fmt.Sprintf("event feed of %s lacks %s: %v", tenant, want, types)
			}
		}
		return true, ""
	})
	d.figure("feed events of the crashed owner's attempt that reached the feed (timeline entries of it)",
		fmt.Sprintf("%d (%d)", fromA, countAttempt(tl, 1)))
}

// TestFaultZombieFenced is drill 2: the owner is paused (SIGSTOP) mid-stage
// past its lease; the other instance takes the task over and finishes it;
// then the owner wakes up (SIGCONT) and its held stage call answers. Its
// late writes are refused (or it sees its lease lost first), it starts no
// later stage, and the task and checkpoint stay the new owner's.
func TestFaultZombieFenced(t *testing.T) {
	t.Parallel()
	d := newDrill(t, nil)
	tg := newFaultTarget(t)
	a, b := d.start("coord-a"), d.start("coord-b")
	const tenant = "zombie-1"
	tg.holdWhere(func(c stageCall) bool { return c.Stage == "hold" && c.Attempt == 1 })
	p := a.createPlan(map[string]any{
		"name":    "drill-zombie",
		"stages":  []any{tg.stage("push"), tg.stage("hold"), tg.stage("after"), tg.stage("final")},
		"tenants": tenants(tenant),
	})
	tg.waitCall(15*time.Second, "hold call", func(c stageCall) bool { return c.Tenant == tenant && c.Stage == "hold" })
	first := b.task(tenant)

	stopped := time.Now()
	a.signal(syscall.SIGSTOP)
	orphaned := until(t, 4*drillLease, func() (bool, string) {
		tk := b.task(tenant)
		return tk.Orphaned, fmt.Sprintf("task of %s: %s owner %s orphaned %v", tenant, tk.Status, tk.Owner, tk.Orphaned)
	})
	d.figure("SIGSTOP → task orphaned", orphaned)
	var took httpapi.TaskDetail
	until(t, 3*drillLease, func() (bool, string) {
		st, _, body, err := b.req("POST", "/v1/tenants/"+tenant+"/retry", map[string]any{"reason": "drill: owner paused"})
		if err == nil && st == http.StatusAccepted {
			took = decode[httpapi.TaskDetail](t, body)
			return true, ""
		}
		return false, fmt.Sprintf("retry on coord-b: %d %s %v", st, body, err)
	})
	d.figure("SIGSTOP → takeover accepted", time.Since(stopped))
	if took.Owner != "coord-b" || took.Attempt != 2 || took.Fence <= first.Fence {
		t.Fatalf("takeover answered owner %s attempt %d fence %d, want coord-b, 2, above %d", took.Owner, took.Attempt, took.Fence, first.Fence)
	}
	b.waitPlan(p.PlanID, 20*time.Second, "COMPLETED")
	done := b.task(tenant)
	doneCk := b.checkpoint(tenant)

	// The zombie wakes up and its held call answers 200.
	woke := time.Now()
	a.signal(syscall.SIGCONT)
	tg.release()
	line := a.waitLog(woke, 15*time.Second, "fenced write refused", "lease lost")
	d.figure("SIGCONT → zombie stops ("+line.Message+")", line.At.Sub(woke))
	t.Logf("zombie: %s", line.Raw)
	if refused, ok := a.findLog(woke, "fenced write refused"); ok {
		if r, _ := refused.Fields["refusal"].(string); r != "lock" && r != "fence" && r != "seq" {
			t.Errorf("zombie's write refused for %q, want lock, fence or seq: %s", r, refused.Raw)
		}
	}
	// The zombie's goroutine has ended once it logged that; its plan run
	// stops once it sees the plan finished. Anything it called would be here.
	for _, stage := range []string{"after", "final"} {
		cs := tg.of(tenant, stage)
		if len(cs) != 1 || cs[0].Attempt != 2 {
			t.Errorf("target saw %s: %v, want exactly one call, from attempt 2 (coord-b)", stage, cs)
		}
	}
	if cs := tg.find(func(c stageCall) bool { return c.Attempt == 1 && c.Stage != "push" && c.Stage != "hold" }); len(cs) > 0 {
		t.Errorf("the zombie (attempt 1) called later stages: %v", cs)
	}
	tk, ck := b.task(tenant), b.checkpoint(tenant)
	if tk.Status != task.StatusCompleted || tk.Owner != "coord-b" || tk.Attempt != 2 || tk.Fence != took.Fence ||
		tk.UpdatedAt == nil || done.UpdatedAt == nil || !tk.UpdatedAt.Equal(*done.UpdatedAt) {
		t.Errorf("task after the zombie woke: %s owner %s attempt %d fence %d updated %v, want unchanged COMPLETED coord-b 2 %d %v",
			tk.Status, tk.Owner, tk.Attempt, tk.Fence, tk.UpdatedAt, took.Fence, done.UpdatedAt)
	}
	if ck.Attempt != 2 || ck.Fence != took.Fence || !slices.Equal(ck.CompletedStages, doneCk.CompletedStages) ||
		!slices.Equal(ck.CompletedStages, []string{"push", "hold", "after", "final"}) {
		t.Errorf("checkpoint after the zombie woke: %v attempt %d fence %d, want the new owner's (%v, 2, %d)",
			ck.CompletedStages, ck.Attempt, ck.Fence, doneCk.CompletedStages, took.Fence)
	}
	tl := b.timeline(tenant)
	for _, e := range tl {
		if e.Instance == "coord-a" && e.At.After(stopped) {
			t.Errorf("timeline holds an event of the zombie written after it was paused: %+v", e)
		}
	}
	if n := countEv(tl, task.EventStageSucceeded, "hold"); n != 1 {
		t.Errorf("timeline: hold succeeded %d times, want once (the new owner): %s", n, evTypes(tl))
	}
	checkCounts(t, b, p.PlanID)
	if p := b.plan(p.PlanID); p.Status != "COMPLETED" {
		t.Errorf("plan after the zombie woke: %s, want COMPLETED", p.Status)
	}
	if cs := tg.of(tenant, "push"); len(cs) != 1 {
		t.Errorf("push called %v, want once", cs)
	}
	// The zombie's stop shows in its metrics.
	refusals, served := a.metric("deploycoord_fenced_write_refusals_total")
	lost, _ := a.metric("deploycoord_lease_lost_total")
	switch {
	case !served:
		t.Errorf("coord-a serves no /metrics: the zombie's refusal counters cannot be checked")
	case refusals+lost == 0 && strings.Contains(line.Raw, "heartbeat refused"):
		knownBug(t, "lease-lost-not-counted",
			"the zombie stopped after its heartbeat was refused, yet deploycoord_lease_lost_total and "+
				"deploycoord_fenced_write_refusals_total stay 0: only the lease.Lost() branch of facade/runner.go heartbeat "+
				"calls obs.LeaseLost(), not the heartbeat-refused branch nor leaseLost(): %s", line.Raw)
	case refusals+lost == 0:
		t.Errorf("zombie's /metrics: no fenced write refusal and no lease lost counted")
	default:
		d.figure("zombie's metrics: fenced_write_refusals_total + lease_lost_total", refusals+lost)
	}
}

// countAttempt counts the timeline events of task attempt n.
func countAttempt(evs []task.Event, n int) int {
	k := 0
	for _, e := range evs {
		if e.Attempt == n {
			k++
		}
	}
	return k
}
