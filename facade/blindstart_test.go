package facade_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
)

// recordReads counts the HGETALLs of task records (keys with "task:").
func recordReads(n *atomic.Int64) redistest.Each {
	return func(c redis.Cmder) {
		if args := c.Args(); c.Name() == "hgetall" && len(args) > 1 && strings.Contains(asString(args[1]), "task:") {
			n.Add(1)
		}
	}
}

// TestSharedBlindStarts: two instances, each with a Dual store of its own
// (as cmd/deploycoord runs them), share a plan created on the first. Both
// start the tasks they claim without reading them (blind starts; the
// creator keeps no copy of a shared plan): no task record is read to start
// a task, and every task still runs with its own params and reads back as
// created.
func TestSharedBlindStarts(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		var reads atomic.Int64
		b := setup(t, withHook(be, recordReads(&reads)), sharedMode)
		b.stopDefault()
		dual := func() *repository.Dual {
			return repository.NewDual(repository.NewMemory(repository.MemoryConfig{DropFinished: true}), b.store,
				repository.DualConfig{SharedWork: true})
		}
		// coord-a learns who is alive at every heartbeat: every 20 ms here,
		// and the plan is created once coord-b is registered, so that
		// coord-a takes its share of the plan's maxConcurrency (2 of 4), not
		// all of it — at the default (a lease / 3) it could run the whole
		// plan before it learned of coord-b, and did on a loaded machine.
		other := newCoordinator(t, b, dual(), b.locks, "coord-b", nil)
		a := newCoordinator(t, b, dual(), b.locks, "coord-a", func(c *facade.Config) { c.Heartbeat = 20 * time.Millisecond })
		eventually(t, 10*time.Second, func() error {
			insts, err := a.Instances(context.Background())
			for _, in := range insts {
				if in.ID == "coord-b" && in.Alive {
					return nil
				}
			}
			return fmt.Errorf("coord-b not registered yet (%v)", err)
		})
		time.Sleep(40 * time.Millisecond) // two of coord-a's heartbeats
		const n = 16
		// A wait first, so that coord-b, which finds the plan at its next
		// poll (every 50 ms), finds tasks left to claim.
		wait := task.StageSpec{Name: "wait", Kind: "sleep", Config: []byte(`{"duration": "100ms"}`)}
		s := spec([]task.StageSpec{wait, b.httpStage("deploy", task.RetryPolicy{})})
		s.MaxConcurrency = 4
		for i := range n {
			s.Tenants = append(s.Tenants, plan.TenantSpec{TenantID: fmt.Sprintf("blind-%02d", i), Params: map[string]any{"version": fmt.Sprintf("v%d", i)}})
		}
		v, err := a.CreatePlan(context.Background(), s, anyone)
		if err != nil {
			t.Fatal(err)
		}
		// Waited for through the store: the coordinator's plan view reads
		// the running tasks for its orphaned count.
		eventually(t, 15*time.Second, func() error {
			p, _, err := b.store.Plan(context.Background(), v.ID)
			if err == nil && p.Status != plan.StatusCompleted {
				err = fmt.Errorf("plan %s", p.Status)
			}
			return err
		})
		started := reads.Load() // (listing the tasks below reads them)
		by := owners(t, other, v.ID)
		if by["coord-a"]+by["coord-b"] != n || by["coord-b"] == 0 {
			t.Fatalf("tasks per instance %v: want some on coord-b", by)
		}
		if got := started; got != 0 {
			t.Errorf("%d task records read to start %d tasks (%v per instance), want 0", got, n, by)
		}
		for i := range n {
			tenant := fmt.Sprintf("blind-%02d", i)
			b.target.mu.Lock()
			bodies := append([]string(nil), b.target.bodies[tenant+"/deploy"]...)
			b.target.mu.Unlock()
			if want := fmt.Sprintf(`"version": "v%d"`, i); len(bodies) != 1 || !strings.Contains(bodies[0], want) {
				t.Errorf("tenant %s: calls %q, want one with %s", tenant, bodies, want)
			}
			tv, err := other.TaskByTenant(context.Background(), tenant)
			if err != nil {
				t.Fatal(err)
			}
			if tv.Task.Params["version"] != fmt.Sprintf("v%d", i) || tv.Task.TotalStages != 2 || tv.Task.CreatedAt.IsZero() ||
				tv.Task.CreatedAt.After(time.Now()) || tv.Task.Status != task.StatusCompleted {
				t.Errorf("tenant %s reads back %+v", tenant, tv.Task)
			}
		}
		t.Logf("tasks per instance %v", by)
	})
}

var _ facade.Store = (*repository.Dual)(nil)

// TestLostAnswerOfBlindStart: a blind start lands but its answer is lost.
// The coordinator sends it again with the same write id and is answered as
// written, with the fields it did not have: the task starts once (one
// task.started entry, counts moved once) and runs with its own params.
func TestLostAnswerOfBlindStart(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		hook := &loseAnswer{match: func(c redis.Cmder) bool {
			if !taskWrite(c, true) {
				return false
			}
			for _, a := range c.Args() {
				if asString(a) == "?blind" {
					return true
				}
			}
			return false
		}}
		b := setup(t, withHook(be, hook), sharedMode)
		s := spec([]task.StageSpec{b.httpStage("one", task.RetryPolicy{})})
		s.Tenants = []plan.TenantSpec{{TenantID: "t-blind-lost", Params: map[string]any{"version": "9.9.9"}}}
		v := b.create(s)
		pv := b.waitPlan(b.coord, v.ID, plan.StatusCompleted, plan.StatusFailed, plan.StatusPaused)
		b.idle(b.coord)
		if n := hook.hits.Load(); n < 1 {
			t.Fatal("no blind start's answer was lost (hook not hit)")
		}
		tv := b.waitTask(b.coord, "t-blind-lost", task.StatusCompleted)
		if pv.Status != plan.StatusCompleted || pv.Counts[task.StatusCompleted] != 1 || pv.Counts.Total() != 1 || tv.Attempt != 1 {
			t.Errorf("plan %s counts %v, task attempt %d; want COMPLETED, 1 task completed, attempt 1", pv.Status, pv.Counts, tv.Attempt)
		}
		b.target.mu.Lock()
		bodies := append([]string(nil), b.target.bodies["t-blind-lost/one"]...)
		b.target.mu.Unlock()
		if len(bodies) != 1 || !strings.Contains(bodies[0], `"version": "9.9.9"`) {
			t.Errorf("stage calls %q, want one with the task's params", bodies)
		}
		if n, types := timelineCount(t, b.coord, "t-blind-lost", task.EventStarted); n != 1 {
			t.Errorf("%d task.started entries, want 1: %v", n, types)
		}
	})
}
