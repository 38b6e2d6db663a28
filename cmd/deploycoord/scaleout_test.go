package main

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/task"
)

// scaleTenants returns n tenant ids prefix-000...
func scaleTenants(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

// maxOverlap is the most stage calls of calls that were in flight at once
// (calls still open count until now).
func maxOverlap(calls []stageCall) int {
	type edge struct {
		at time.Time
		d  int
	}
	var es []edge
	for _, c := range calls {
		end := c.End
		if c.Open || end.IsZero() {
			end = time.Now()
		}
		es = append(es, edge{c.Start, 1}, edge{end, -1})
	}
	sort.Slice(es, func(i, j int) bool {
		if es[i].at.Equal(es[j].at) {
			return es[i].d < es[j].d // an end before a start at the same instant
		}
		return es[i].at.Before(es[j].at)
	})
	top, now := 0, 0
	for _, e := range es {
		now += e.d
		top = max(top, now)
	}
	return top
}

// ownersOf counts a plan's tasks by owner (tasks never started have none).
func ownersOf(n *node, planID string) map[string]int {
	out := map[string]int{}
	for _, tk := range n.planTasks(planID, "?limit=1000") {
		if tk.Owner != "" {
			out[tk.Owner]++
		}
	}
	return out
}

// TestScaleOutTwoInstances is issue 9's "done when": two instances on one
// plan of 40 tenants x one 400ms stage with maxConcurrency 4 both run
// tasks, never more than 4 at once across both; after kill -9 of one of
// them mid-plan the other finishes every PENDING task, the dead one's
// RUNNING tasks show orphaned, and one bulk retry finishes the plan.
func TestScaleOutTwoInstances(t *testing.T) {
	t.Parallel()
	d := newDrill(t, nil, "DEPLOYCOORD_PLAN_POLL=200ms")
	tg := newFaultTarget(t)
	tg.setDelay("deploy", 400*time.Millisecond)
	a, b := d.start("coord-a"), d.start("coord-b")
	ts := scaleTenants("so", 40)
	p := a.createPlan(map[string]any{
		"name": "scale-out", "stages": []any{tg.stage("deploy")}, "tenants": tenants(ts...), "maxConcurrency": 4,
	})

	// Both instances run tasks; kill the one that created the plan once
	// both have and a few tasks of it are running.
	var before map[string]int
	until(t, 30*time.Second, func() (bool, string) {
		before = ownersOf(b, p.PlanID)
		running := a.plan(p.PlanID).Counts[task.StatusRunning]
		return before["coord-a"] >= 4 && before["coord-b"] >= 4 && running > 0,
			fmt.Sprintf("tasks by owner %v, %d running", before, running)
	})
	var runningOnA []string
	for _, tk := range b.planTasks(p.PlanID, "?status=RUNNING&limit=1000") {
		if tk.Owner == "coord-a" {
			runningOnA = append(runningOnA, tk.TenantID)
		}
	}
	killed := time.Now()
	a.kill()
	d.figure("tasks per instance when coord-a was killed", before)

	var orphanedAfter, finishedAfter time.Duration
	var last httpapi.Plan
	until(t, 60*time.Second, func() (bool, string) {
		last = b.plan(p.PlanID)
		orphans := -1
		if last.Orphaned != nil {
			orphans = *last.Orphaned
		}
		running := last.Counts[task.StatusRunning]
		if orphanedAfter == 0 && orphans > 0 {
			orphanedAfter = time.Since(killed)
		}
		if finishedAfter == 0 && last.Counts[task.StatusPending] == 0 && running == orphans {
			// (The plan's orphaned count is read in two round trips; the
			// listing tells for sure: only coord-a's orphans run.)
			only := true
			for _, tk := range b.planTasks(p.PlanID, "?status=RUNNING&limit=1000") {
				only = only && tk.Owner == "coord-a" && tk.Orphaned
			}
			if only {
				finishedAfter = time.Since(killed)
			}
		}
		return orphanedAfter > 0 && finishedAfter > 0, fmt.Sprintf("counts %v, orphaned %d", last.Counts, orphans)
	})
	last = b.plan(p.PlanID)
	d.figure("kill -9 → plan shows orphaned tasks", orphanedAfter)
	d.figure("kill -9 → every PENDING task done by coord-b", finishedAfter)
	orphans := b.planTasks(p.PlanID, "?orphaned=true&limit=1000")
	var orphanIDs []string
	for _, tk := range orphans {
		if tk.Owner != "coord-a" || tk.Status != task.StatusRunning {
			t.Errorf("orphan %s is %s on %s, want RUNNING on coord-a", tk.TenantID, tk.Status, tk.Owner)
		}
		orphanIDs = append(orphanIDs, tk.TenantID)
	}
	// The dead instance's RUNNING tasks were not restarted by anyone: the
	// target saw one call of each, by attempt 1.
	for _, id := range orphanIDs {
		if cs := tg.of(id, "deploy"); len(cs) != 1 || cs[0].Attempt != 1 {
			t.Errorf("orphan %s: target calls %v, want one by attempt 1", id, cs)
		}
	}
	if len(orphanIDs) == 0 || last.Counts[task.StatusCompleted]+len(orphanIDs) != 40 {
		t.Fatalf("after the kill: counts %v, orphans %v (running on coord-a at the kill: %v)", last.Counts, orphanIDs, runningOnA)
	}

	// One bulk retry of the plan's orphans finishes the plan.
	retried := time.Now()
	res := must[httpapi.PlanRetry](b, "POST", "/v1/plans/"+p.PlanID+"/retry",
		map[string]any{"orphaned": true, "reason": "scale-out drill: coord-a died"}, http.StatusAccepted)
	slices.Sort(res.Retried)
	slices.Sort(orphanIDs)
	if !slices.Equal(res.Retried, orphanIDs) || len(res.Skipped) != 0 {
		t.Fatalf("bulk retry: retried %v, skipped %v; want the orphans %v", res.Retried, res.Skipped, orphanIDs)
	}
	b.waitPlan(p.PlanID, 30*time.Second, "COMPLETED")
	d.figure("bulk retry of the orphans → plan COMPLETED", time.Since(retried))
	d.figure("kill -9 → plan COMPLETED (with the bulk retry)", time.Since(killed))

	calls := tg.snapshot()
	if top := maxOverlap(calls); top > 4 {
		t.Errorf("%d stage calls at once across both instances, want at most 4", top)
	} else {
		d.figure("most stage calls at once across both instances", top)
	}
	final := ownersOf(b, p.PlanID)
	d.figure("tasks per instance at the end (orphans retried on coord-b)", final)
	if final["coord-a"] == 0 || final["coord-b"] == 0 || final["coord-a"]+final["coord-b"] != 40 {
		t.Errorf("final owners %v", final)
	}
	for _, id := range ts {
		want := 1
		if slices.Contains(orphanIDs, id) {
			want = 2
		}
		if n := len(tg.of(id, "deploy")); n != want {
			t.Errorf("tenant %s deployed %d times, want %d", id, n, want)
		}
	}
	checkCounts(t, b, p.PlanID)
	if err := checkExclusive(calls); err != nil {
		t.Error(err)
	}
}

// TestScaleOutThirdInstanceTwoPlans: a third instance started mid-plan
// takes work within a poll or so, and two plans running at once both
// progress.
func TestScaleOutThirdInstanceTwoPlans(t *testing.T) {
	t.Parallel()
	d := newDrill(t, nil, "DEPLOYCOORD_PLAN_POLL=200ms")
	tg := newFaultTarget(t)
	tg.setDelay("one", 300*time.Millisecond)
	tg.setDelay("two", 300*time.Millisecond)
	a, b := d.start("coord-a"), d.start("coord-b")
	p1 := a.createPlan(map[string]any{
		"name": "first", "stages": []any{tg.stage("one")}, "tenants": tenants(scaleTenants("p1", 30)...), "maxConcurrency": 3,
	})
	p2 := b.createPlan(map[string]any{
		"name": "second", "stages": []any{tg.stage("two")}, "tenants": tenants(scaleTenants("p2", 30)...), "maxConcurrency": 3,
	})
	until(t, 20*time.Second, func() (bool, string) {
		c1, c2 := a.plan(p1.PlanID).Counts, a.plan(p2.PlanID).Counts
		return c1[task.StatusCompleted] >= 3 && c2[task.StatusCompleted] >= 3, fmt.Sprintf("first %v, second %v", c1, c2)
	})
	c := d.start("coord-c")
	listening := time.Now()
	took := until(t, 20*time.Second, func() (bool, string) {
		o1, o2 := ownersOf(c, p1.PlanID), ownersOf(c, p2.PlanID)
		return o1["coord-c"]+o2["coord-c"] > 0, fmt.Sprintf("first %v, second %v", o1, o2)
	})
	d.figure("third instance listening → its first task of a running plan", took)
	if pending := a.plan(p1.PlanID).Counts[task.StatusPending] + a.plan(p2.PlanID).Counts[task.StatusPending]; pending == 0 {
		t.Logf("(the plans ran out of PENDING tasks %s after coord-c started)", time.Since(listening))
	}
	a.waitPlan(p1.PlanID, 60*time.Second, "COMPLETED")
	a.waitPlan(p2.PlanID, 60*time.Second, "COMPLETED")
	for _, p := range []httpapi.Plan{p1, p2} {
		d.figure("tasks per instance of "+p.Name, ownersOf(c, p.PlanID))
		checkCounts(t, a, p.PlanID)
	}
	one := tg.find(func(c stageCall) bool { return c.Stage == "one" })
	two := tg.find(func(c stageCall) bool { return c.Stage == "two" })
	if x, y := maxOverlap(one), maxOverlap(two); x > 3 || y > 3 {
		t.Errorf("calls at once: first plan %d, second %d; want at most 3 each", x, y)
	}
	if err := checkExclusive(tg.snapshot()); err != nil {
		t.Error(err)
	}
}

// TestScaleOutShutdown: a stopping instance (SIGTERM) stops claiming work
// and pauses its running tasks between two stages as ever, but the plan
// stays RUNNING: the other instance goes on with its PENDING tasks. A plan
// resume (on any instance) queues the tasks the shutdown paused, which
// resume from their checkpoints.
func TestScaleOutShutdown(t *testing.T) {
	t.Parallel()
	d := newDrill(t, nil, "DEPLOYCOORD_PLAN_POLL=200ms")
	tg := newFaultTarget(t)
	tg.setDelay("first", 300*time.Millisecond)
	a, b := d.start("coord-a"), d.start("coord-b")
	ts := scaleTenants("sd", 16)
	p := a.createPlan(map[string]any{
		"name": "shutdown", "stages": []any{tg.stage("first"), tg.stage("second")}, "tenants": tenants(ts...), "maxConcurrency": 4,
	})
	var onA []string
	until(t, 20*time.Second, func() (bool, string) {
		onA = onA[:0]
		for _, tk := range b.planTasks(p.PlanID, "?status=RUNNING&limit=1000") {
			if tk.Owner == "coord-a" {
				onA = append(onA, tk.TenantID)
			}
		}
		return len(onA) > 0, "no task running on coord-a"
	})
	a.stop()
	after := b.plan(p.PlanID)
	if after.Status != "RUNNING" {
		t.Fatalf("plan after coord-a stopped: %s %q, want RUNNING", after.Status, after.Reason)
	}
	var paused []string
	for _, tk := range b.planTasks(p.PlanID, "?status=PAUSED&limit=1000") {
		if tk.Owner != "coord-a" || tk.Reason != "instance shutdown" {
			t.Errorf("paused task %s: owner %s reason %q, want coord-a, instance shutdown", tk.TenantID, tk.Owner, tk.Reason)
		}
		paused = append(paused, tk.TenantID)
	}
	// coord-b finishes every PENDING task; the paused ones wait.
	until(t, 30*time.Second, func() (bool, string) {
		c := b.plan(p.PlanID).Counts
		return c[task.StatusPending] == 0 && c[task.StatusRunning] == 0, fmt.Sprintf("counts %v", c)
	})
	c := b.plan(p.PlanID).Counts
	if c[task.StatusPaused] != len(paused) || c[task.StatusCompleted]+len(paused) != 16 {
		t.Fatalf("counts %v with %d paused by the shutdown", c, len(paused))
	}
	d.figure("tasks paused by coord-a's SIGTERM (the rest completed, most on coord-b)", len(paused))
	if len(paused) > 0 {
		must[httpapi.Plan](b, "POST", "/v1/plans/"+p.PlanID+"/resume", map[string]any{"reason": "scale-out drill: coord-a stopped"}, http.StatusOK)
	}
	b.waitPlan(p.PlanID, 30*time.Second, "COMPLETED")
	for _, id := range ts {
		for _, st := range []string{"first", "second"} {
			if n := len(tg.of(id, st)); n != 1 {
				t.Errorf("%s/%s called %d times, want once", id, st, n)
			}
		}
	}
	checkCounts(t, b, p.PlanID)
}
