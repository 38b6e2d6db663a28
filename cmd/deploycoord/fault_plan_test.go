package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/task"
)

// TestFaultPlanTakeover is the plan takeover drill (issue 3 item 4, docs/api.md
// POST /v1/plans/{id}/resume, docs/operations.md "resume"): a plan of four
// tenants, one at a time, runs on coord-a; its first tenant is held in a
// stage.
//
//   - While coord-a is alive, resuming its RUNNING plan on coord-b is
//     refused with 409 INVALID_STATE (with or without includeOrphaned), and
//     changes nothing.
//   - coord-a is killed (SIGKILL). Once the held task shows orphaned, a
//     resume on coord-b without includeOrphaned makes coord-b the plan's
//     owner and runs the three PENDING tenants to COMPLETED there; the
//     orphan stays RUNNING on coord-a, untouched, and the plan stays
//     RUNNING with one orphaned task.
//   - A second resume on coord-b with "includeOrphaned": true, sent at
//     once (the dead owner's lock may still be held, the task's heartbeat
//     younger than a lease), takes the orphan over — waiting for the lock —
//     from its checkpoint (a new attempt and fence; the stage it
//     completed before the crash is not called again) and the plan ends
//     COMPLETED with counts equal to its task records.
func TestFaultPlanTakeover(t *testing.T) {
	t.Parallel()
	// The plan-owner mode: with shared plans (the default) a RUNNING plan
	// has no owner to take over from (TestScaleOutTwoInstances).
	d := newDrill(t, nil, "DEPLOYCOORD_SHARED_PLANS=false")
	tg := newFaultTarget(t)
	a, b := d.start("coord-a"), d.start("coord-b")
	ids := []string{"takeover-1", "takeover-2", "takeover-3", "takeover-4"}
	orphan, rest := ids[0], ids[1:]
	stages := []string{"push", "hold", "after"}
	tg.holdWhere(func(c stageCall) bool { return c.Tenant == orphan && c.Stage == "hold" && c.Attempt == 1 })
	p := a.createPlan(map[string]any{
		"name":           "drill-plan-takeover",
		"stages":         []any{tg.stage("push"), tg.stage("hold"), tg.stage("after")},
		"tenants":        tenants(ids...),
		"maxConcurrency": 1,
	})
	tg.waitCall(15*time.Second, "hold call of "+orphan, func(c stageCall) bool { return c.Tenant == orphan && c.Stage == "hold" })

	// ---- the owner is alive: another instance may not take the plan ----
	until(t, 2*drillLease, func() (bool, string) {
		for _, in := range b.instances() {
			if in.ID == "coord-a" && in.Alive {
				return true, ""
			}
		}
		return false, "coord-b does not list coord-a alive"
	})
	for _, body := range []map[string]any{
		{"reason": "drill: take over a live plan"},
		{"reason": "drill: take over a live plan", "includeOrphaned": true},
	} {
		st, _, raw, err := b.req("POST", "/v1/plans/"+p.PlanID+"/resume", body)
		if err != nil {
			t.Fatalf("resume on coord-b while coord-a is alive: %v", err)
		}
		if st != http.StatusConflict {
			t.Fatalf("resume %v on coord-b while coord-a is alive: status %d, want 409: %s", body, st, raw)
		}
		if pb := decode[httpapi.Problem](t, raw); pb.Code != httpapi.CodeInvalidState {
			t.Errorf("resume %v on coord-b while coord-a is alive: code %s, want %s: %s", body, pb.Code, httpapi.CodeInvalidState, raw)
		}
		d.figure(fmt.Sprintf("resume (includeOrphaned=%v) on coord-b while the owner is alive", body["includeOrphaned"] == true),
			fmt.Sprintf("%d %s", st, httpapi.CodeInvalidState))
	}
	if pl := b.plan(p.PlanID); pl.Status != "RUNNING" || pl.Owner != "coord-a" {
		t.Fatalf("plan after the refused resumes: %s owner %s, want RUNNING on coord-a", pl.Status, pl.Owner)
	}
	for _, id := range rest {
		if tk := b.task(id); tk.Status != task.StatusPending {
			t.Fatalf("task of %s after the refused resumes: %s owner %s, want PENDING", id, tk.Status, tk.Owner)
		}
	}
	before := b.task(orphan)
	if before.Status != task.StatusRunning || before.Owner != "coord-a" || before.Attempt != 1 || before.Orphaned {
		t.Fatalf("before the crash: task of %s %s owner %s attempt %d orphaned %v, want RUNNING on coord-a, attempt 1, not orphaned",
			orphan, before.Status, before.Owner, before.Attempt, before.Orphaned)
	}

	// ---- the owner dies ----
	killed := time.Now()
	a.kill()
	orphanedAfter := until(t, 4*drillLease, func() (bool, string) {
		tk := b.task(orphan)
		return tk.Orphaned, fmt.Sprintf("task of %s: %s owner %s orphaned %v", orphan, tk.Status, tk.Owner, tk.Orphaned)
	})
	d.figure("SIGKILL → task orphaned", orphanedAfter)

	// A takeover needs a reason, like every operator action.
	if st, _, raw, err := b.req("POST", "/v1/plans/"+p.PlanID+"/resume", map[string]any{"includeOrphaned": true}); err != nil || st != http.StatusBadRequest {
		t.Fatalf("resume without a reason: %d %s %v, want 400", st, raw, err)
	}

	// Resume without includeOrphaned. coord-b may still see coord-a alive
	// for a moment (its view of the instance registry is one heartbeat
	// old): that answer is the documented 409 INVALID_STATE; ask again.
	var resumed httpapi.Plan
	refusals := 0
	var resumedAt time.Time
	until(t, 3*drillLease, func() (bool, string) {
		st, _, raw, err := b.req("POST", "/v1/plans/"+p.PlanID+"/resume", map[string]any{"reason": "drill: coord-a died"})
		switch {
		case err != nil:
			t.Fatalf("resume on coord-b: %v", err)
		case st == http.StatusOK:
			resumedAt = time.Now()
			resumed = decode[httpapi.Plan](t, raw)
			return true, ""
		case st == http.StatusConflict && decode[httpapi.Problem](t, raw).Code == httpapi.CodeInvalidState:
			refusals++
			return false, fmt.Sprintf("resume on coord-b still refused after the crash (%d times): %s", refusals, raw)
		default:
			t.Fatalf("resume on coord-b after the crash: status %d: %s", st, raw)
		}
		return false, ""
	})
	d.figure("SIGKILL → resume accepted on coord-b", resumedAt.Sub(killed))
	d.figure("resumes refused (409) after the crash before one was accepted", refusals)
	if resumed.Owner != "coord-b" || resumed.Status != "RUNNING" {
		t.Fatalf("resume answered %s owner %s, want RUNNING on coord-b", resumed.Status, resumed.Owner)
	}

	// The PENDING tenants run on coord-b; the orphan is left alone.
	b.waitLog(resumedAt, 30*time.Second, "plan run ended")
	d.figure("resume → coord-b's run of the 3 PENDING tasks ended", time.Since(resumedAt))
	for _, id := range rest {
		tk := b.task(id)
		if tk.Status != task.StatusCompleted || tk.Owner != "coord-b" || tk.Attempt != 1 {
			t.Errorf("task of %s after the takeover: %s owner %s attempt %d, want COMPLETED on coord-b, attempt 1", id, tk.Status, tk.Owner, tk.Attempt)
		}
		for _, s := range stages {
			if cs := tg.of(id, s); len(cs) != 1 || cs[0].Attempt != 1 || cs[0].Cut {
				t.Errorf("target saw %s/%s: %v, want one answered call of attempt 1", id, s, cs)
			}
		}
	}
	left := b.task(orphan)
	if left.Status != task.StatusRunning || left.Owner != "coord-a" || !left.Orphaned || left.Attempt != 1 ||
		left.Fence != before.Fence || left.UpdatedAt == nil || before.UpdatedAt == nil || !left.UpdatedAt.Equal(*before.UpdatedAt) {
		t.Errorf("orphan after a resume without includeOrphaned: %s owner %s orphaned %v attempt %d fence %d updated %v, "+
			"want untouched RUNNING on coord-a, orphaned, attempt 1, fence %d, updated %v",
			left.Status, left.Owner, left.Orphaned, left.Attempt, left.Fence, left.UpdatedAt, before.Fence, before.UpdatedAt)
	}
	mid := b.plan(p.PlanID)
	if mid.Status != "RUNNING" || mid.Owner != "coord-b" || mid.Orphaned == nil || *mid.Orphaned != 1 ||
		mid.Counts[task.StatusRunning] != 1 || mid.Counts[task.StatusCompleted] != 3 {
		t.Errorf("plan after a resume without includeOrphaned: %s owner %s orphaned %v counts %v, want RUNNING on coord-b, 1 orphaned, 1 RUNNING, 3 COMPLETED",
			mid.Status, mid.Owner, ptrVal(mid.Orphaned), mid.Counts)
	}
	listed := must[httpapi.TaskList](b, "GET", "/v1/plans/"+p.PlanID+"/tasks?orphaned=true", nil, http.StatusOK).Tasks
	if len(listed) != 1 || listed[0].TenantID != orphan {
		t.Errorf("orphaned tasks of the plan: %v, want only %s", listed, orphan)
	}
	checkCounts(t, b, p.PlanID)
	if cs := tg.of(orphan, ""); len(cs) != 2 {
		t.Errorf("target saw %s: %v, want only push and the cut hold of attempt 1", orphan, cs)
	}

	// ---- take the orphan over ----
	// At once: the dead owner's lock may still be held and the task's own
	// heartbeat younger than a lease (the owner being dead is what makes it
	// orphaned). The takeover must wait for the lock, not drop the task.
	l, tk := b.lock(orphan), b.task(orphan)
	d.figure("orphan's lock still held when the takeover was asked", l.Held)
	d.figure("orphan's heartbeat age when the takeover was asked", time.Since(*tk.HeartbeatAt).Round(time.Millisecond))
	took := time.Now()
	again := must[httpapi.Plan](b, "POST", "/v1/plans/"+p.PlanID+"/resume",
		map[string]any{"reason": "drill: take over coord-a's orphan", "includeOrphaned": true}, http.StatusOK)
	if again.Owner != "coord-b" || again.Status != "RUNNING" {
		t.Errorf("resume with includeOrphaned answered %s owner %s, want RUNNING on coord-b", again.Status, again.Owner)
	}
	done := b.waitPlan(p.PlanID, 30*time.Second, "COMPLETED", "FAILED", "CANCELLED", "PAUSED")
	d.figure("resume with includeOrphaned → plan "+string(done.Status), time.Since(took))
	if done.Status != "COMPLETED" || done.Owner != "coord-b" {
		t.Fatalf("plan after the takeover: %s owner %s counts %v, want COMPLETED on coord-b", done.Status, done.Owner, done.Counts)
	}

	tk, ck := b.task(orphan), b.checkpoint(orphan)
	if tk.Status != task.StatusCompleted || tk.Owner != "coord-b" || tk.Attempt != 2 || tk.Fence <= before.Fence || tk.Orphaned {
		t.Errorf("orphan after the takeover: %s owner %s attempt %d fence %d orphaned %v, want COMPLETED on coord-b, attempt 2, fence above %d",
			tk.Status, tk.Owner, tk.Attempt, tk.Fence, tk.Orphaned, before.Fence)
	}
	if !slices.Equal(ck.CompletedStages, stages) || ck.Attempt != 2 || ck.Fence != tk.Fence {
		t.Errorf("orphan's checkpoint: %v attempt %d fence %d, want %v, attempt 2, fence %d", ck.CompletedStages, ck.Attempt, ck.Fence, stages, tk.Fence)
	}
	var calls []string
	for s, want := range map[string][]int{"push": {1}, "hold": {1, 2}, "after": {2}} {
		var got []int
		for _, c := range tg.of(orphan, s) {
			got = append(got, c.Attempt)
		}
		calls = append(calls, fmt.Sprintf("%s=%v", s, got))
		if !slices.Equal(got, want) {
			t.Errorf("target saw %s/%s called by attempts %v, want %v", orphan, s, got, want)
		}
	}
	slices.Sort(calls)
	d.figure("target calls of the orphan by attempt", strings.Join(calls, " "))
	if cs := tg.find(func(c stageCall) bool { return c.Tenant == orphan && c.Stage == "hold" && c.Attempt == 1 }); len(cs) != 1 || !cs[0].Cut {
		t.Errorf("the dead owner's hold call: %v, want one call cut when the process died", cs)
	}
	tl := b.timeline(orphan)
	for _, s := range stages {
		if n := countEv(tl, task.EventStageSucceeded, s); n != 1 {
			t.Errorf("timeline of %s: %s succeeded %d times, want once: %s", orphan, s, n, evTypes(tl))
		}
	}
	resumedEv := false
	for _, e := range tl {
		if e.Type == task.EventResumed && e.Instance == "coord-b" && e.Attempt == 2 && e.Fence == tk.Fence {
			resumedEv = true
		}
	}
	if !resumedEv {
		t.Errorf("timeline of %s lacks coord-b's resume (attempt 2, fence %d): %s", orphan, tk.Fence, evTypes(tl))
	}
	final := b.plan(p.PlanID)
	if final.Orphaned == nil || *final.Orphaned != 0 {
		t.Errorf("plan after the takeover reports %v orphaned tasks, want 0", ptrVal(final.Orphaned))
	}
	counts := checkCounts(t, b, p.PlanID)
	d.figure("final plan counts (recount of the task records)", counts)
	if counts[task.StatusCompleted] != len(ids) {
		t.Errorf("recount %v, want %d COMPLETED", counts, len(ids))
	}
	if err := checkExclusive(tg.snapshot()); err != nil {
		t.Error(err)
	}

	// The feed tells an external system about both resumes (published
	// asynchronously, in batches).
	until(t, 5*time.Second, func() (bool, string) {
		var got []string
		for _, e := range b.feed("planId=" + p.PlanID + "&type=plan.resumed") {
			got = append(got, fmt.Sprintf("%v/%v/%v/%v", e.Data["instance"], e.Data["includeOrphaned"], e.Data["previousOwner"], e.Data["tasks"]))
		}
		want := []string{"coord-b/false/coord-a/3", "coord-b/true/<nil>/1"}
		return slices.Equal(got, want), fmt.Sprintf("plan.resumed events (instance/includeOrphaned/previousOwner/tasks): %v, want %v", got, want)
	})
}

func ptrVal(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}
