package repository

import (
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// TestDualDownSinceOfAnEarlierOutage: this instance saw Redis unreachable
// once (downSince set), then was frozen: Redis came back meanwhile, its
// lease lapsed and another instance took the task over and completed it.
// Redis goes away again as it wakes: its first call fails. That failure
// starts a new outage (more than a lease after the last one): the task,
// whose heartbeat is a minute older, is not answered from memory (it was,
// RUNNING, when the first outage's time still stood: a review).
func TestDualDownSinceOfAnEarlierOutage(t *testing.T) {
	srv := redistest.StartServer(t)
	c := outageClient(t, srv)
	re := newRedisEnv(t, c, "x:", Config{})
	f := newFailing(func(string) bool { return true })
	f.On.Store(false)
	c.AddHook(f)
	e, d := newSharedDualEnv(t, re, DualConfig{Lease: 10 * time.Second})
	ctx := ctxT(t)
	fx := createPlan(t, e, 1, 0)
	start(t, e, fx.tasks[0], 1)

	f.On.Store(true) // a short outage, seen by this instance
	if got, _, err := d.TaskByTenant(ctx, tenantName(0)); err != nil || got.Status != task.StatusRunning {
		t.Fatalf("first outage: %v %v", got, err)
	}
	f.On.Store(false) // Redis back; this instance is frozen (no call)
	re.clock.Add(time.Minute)
	// Another instance takes the lapsed task over and completes it.
	other := newRedisEnv(t, srv.Client(), "x:", Config{})
	other.clock = re.clock
	stored, _, err := other.store.TaskByTenant(ctx, tenantName(0))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := rerun(t, other, stored, 2, "coord-b")
	r.complete()

	f.On.Store(true) // a second outage as this instance wakes
	re.clock.Add(time.Second)
	if got, _, err := d.TaskByTenant(ctx, tenantName(0)); !IsUnavailable(err) {
		t.Fatalf("lease lapsed a minute before this outage: answered %s owner %s attempt %d from memory, %v; want unavailable (Redis: COMPLETED by coord-b)", got.Status, got.Owner, got.Attempt, err)
	}
}
