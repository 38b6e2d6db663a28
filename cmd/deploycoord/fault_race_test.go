package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
)

// TestFaultLockRace is drill 5: two instances, many small plans over the
// same three tenants created at once on both (onTenantLocked: wait), every
// stage calling the target. From the target's history: no two calls of one
// tenant overlap in time, each task's calls come as one block, and the
// fences of successive holders of a tenant strictly increase.
func TestFaultLockRace(t *testing.T) {
	t.Parallel()
	d := newDrill(t, nil)
	tg := newFaultTarget(t)
	tg.setDelay("s1", 15*time.Millisecond)
	tg.setDelay("s2", 15*time.Millisecond)
	nodes := []*node{d.start("coord-a"), d.start("coord-b")}
	raceTenants := []string{"race-0", "race-1", "race-2"}
	const plansPerNode = 6

	var mu sync.Mutex
	owner := map[string]string{} // plan id → instance
	var wg sync.WaitGroup
	start := time.Now()
	for _, n := range nodes {
		for i := range plansPerNode {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, _, body, err := n.req("POST", "/v1/plans", map[string]any{
					"name": fmt.Sprintf("race-%s-%d", n.name, i), "stages": []any{tg.stage("s1"), tg.stage("s2")},
					"tenants": tenants(raceTenants...), "onTenantLocked": "wait", "lockWait": "60s", "maxConcurrency": 3,
				})
				if err != nil || st != http.StatusCreated {
					t.Errorf("create plan on %s: %d %v %s", n.name, st, err, body)
					return
				}
				var p httpapi.Plan
				if err := json.Unmarshal(body, &p); err != nil {
					t.Errorf("create plan on %s: decode: %v: %s", n.name, err, body)
					return
				}
				mu.Lock()
				owner[p.PlanID] = n.name
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	fences := map[string]int64{}
	byInstance := map[string]int{}
	for id, inst := range owner {
		p := nodes[0].waitPlan(id, 90*time.Second, "COMPLETED", "FAILED")
		if p.Status != "COMPLETED" {
			t.Errorf("plan %s (%s): %s %v, want COMPLETED", id, inst, p.Status, p.Counts)
		}
		for _, tk := range nodes[1].allTasks(id) {
			fences[tk.TaskID] = tk.Fence
			byInstance[tk.Owner]++
			// Shared plans: any instance may run any plan's task, once.
			if (tk.Owner != "coord-a" && tk.Owner != "coord-b") || tk.Attempt != 1 {
				t.Errorf("task %s of plan %s (created on %s): owner %s attempt %d, want coord-a or coord-b, 1", tk.TaskID, id, inst, tk.Owner, tk.Attempt)
			}
		}
	}
	d.figure("plans × tenants run through the race", fmt.Sprintf("%d × %d in %s", len(owner), len(raceTenants), time.Since(start).Round(time.Millisecond)))
	d.figure("tasks run per instance", byInstance)

	calls := tg.snapshot()
	if want := len(owner) * len(raceTenants) * 2; len(calls) != want {
		t.Errorf("target saw %d calls, want %d (two stages per task, each once)", len(calls), want)
	}
	perTask := map[string]int{}
	for _, c := range calls {
		perTask[c.TaskID+"/"+c.Stage]++
		if c.Cut {
			t.Errorf("call cut: %s", c)
		}
	}
	for k, n := range perTask {
		if n != 1 {
			t.Errorf("target saw %s %d times, want once", k, n)
		}
	}
	if err := checkExclusive(calls); err != nil {
		t.Error(err)
	}
	hs := holdings(calls, fences)
	if err := checkFences(hs); err != nil {
		t.Error(err)
	}
	// The smallest gap between two holders of a tenant: how close the lock
	// handovers came.
	gaps := map[string]time.Duration{}
	last := map[string]holding{}
	for _, h := range hs {
		if prev, ok := last[h.Tenant]; ok {
			if g := h.First.Sub(prev.Last); gaps[h.Tenant] == 0 || g < gaps[h.Tenant] {
				gaps[h.Tenant] = g
			}
		}
		last[h.Tenant] = h
	}
	var ids []string
	for id := range gaps {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		d.figure("smallest handover gap at the target, "+id, gaps[id])
	}
}

// TestFaultCheckers makes sure the drills' history checkers fail on the
// histories they exist to catch.
func TestFaultCheckers(t *testing.T) {
	t.Parallel()
	base := time.Now().Add(-time.Hour)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	call := func(tenant, taskID string, from, to int) stageCall {
		return stageCall{Tenant: tenant, Stage: "s", TaskID: taskID, Attempt: 1, Start: at(from), End: at(to)}
	}
	excl := []struct {
		name  string
		calls []stageCall
		ok    bool
	}{
		{"OK", []stageCall{call("t1", "a", 0, 10), call("t1", "b", 10, 20), call("t2", "c", 5, 15)}, true},
		{"ErrOverlap", []stageCall{call("t1", "a", 0, 10), call("t1", "b", 9, 20)}, false},
		{"ErrInsideLongCall", []stageCall{call("t1", "a", 0, 100), call("t1", "b", 10, 20), call("t1", "c", 30, 40)}, false},
		{"ErrOpenCall", []stageCall{{Tenant: "t1", TaskID: "a", Start: at(0), Open: true}, call("t1", "b", 10, 20)}, false},
	}
	for _, tt := range excl {
		t.Run("Exclusive"+tt.name, func(t *testing.T) {
			if err := checkExclusive(tt.calls); (err == nil) != tt.ok {
				t.Errorf("checkExclusive = %v, want ok %v", err, tt.ok)
			}
		})
	}
	fence := []struct {
		name   string
		calls  []stageCall
		fences map[string]int64
		ok     bool
	}{
		{"OK", []stageCall{call("t1", "a", 0, 10), call("t1", "b", 11, 20), call("t1", "a", 5, 9)}, map[string]int64{"a": 1, "b": 2}, true},
		{"ErrFenceDown", []stageCall{call("t1", "a", 0, 10), call("t1", "b", 11, 20)}, map[string]int64{"a": 2, "b": 1}, false},
		{"ErrFenceSame", []stageCall{call("t1", "a", 0, 10), call("t1", "b", 11, 20)}, map[string]int64{"a": 2, "b": 2}, false},
		{"ErrInterleaved", []stageCall{call("t1", "a", 0, 10), call("t1", "b", 11, 20), call("t1", "a", 21, 30)}, map[string]int64{"a": 1, "b": 2}, false},
	}
	for _, tt := range fence {
		t.Run("Fences"+tt.name, func(t *testing.T) {
			if err := checkFences(holdings(tt.calls, tt.fences)); (err == nil) != tt.ok {
				t.Errorf("checkFences = %v, want ok %v", err, tt.ok)
			}
		})
	}
}
