package repository

import (
	"strings"
	"testing"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// TestKeysSlots: on a Redis Cluster every script may touch one slot only.
// The keys one script gets together share a slot — a task's keys, its
// tenant's lock, fence and history (write_task, beat_task,
// request_task, acquire/reacquire/force_release_lock); a
// plan's three keys (create_plan, update_plan, the counts scripts) — and
// the prefix never decides a slot (it cannot hold a brace), so tenants and
// plans spread over the masters. The suites run on a real 3-master cluster
// too (redistest.Backends), where Redis refuses a cross-slot script.
func TestKeysSlots(t *testing.T) {
	t.Parallel()
	if got := redistest.KeySlot("123456789"); got != 12739 {
		t.Fatalf("redistest.KeySlot(123456789) = %d, want 12739 (the cluster spec's CRC16 check value 0x31C3)", got)
	}
	k, err := NewKeys(PrefixDefault)
	if err != nil {
		t.Fatal(err)
	}
	const taskID, planID = "task-01JD0000000000000000000000", "plan-01JD0000000000000000000000"
	tenants := map[int]bool{}
	for _, tenant := range []string{"t-001", "t-002", "acme", "tenant.with.dots", "x"} {
		tk, err := k.taskKeys(tenant, taskID)
		if err != nil {
			t.Fatal(err)
		}
		fence, _ := k.Fence(tenant)
		want := redistest.KeySlot(tenant)
		tenants[want] = true
		for _, key := range []string{tk.task, tk.timeline, tk.ckpt, tk.lock, tk.history, fence} {
			if got := redistest.KeySlot(key); got != want {
				t.Errorf("%s: slot %d, want the tenant's %d", key, got, want)
			}
		}
		tag := tk.ref[strings.IndexByte(tk.ref, '{')+1 : len(tk.ref)-1]
		if got, want := redistest.KeySlot(tk.ref), redistest.KeySlot(tag); got != want {
			t.Errorf("%s: slot %d, want its tag's %d", tk.ref, got, want)
		}
	}
	// The taskref buckets of one hour's ids: 16 shards, over several slots.
	buckets := map[string]bool{}
	for i := 0; i < 200; i++ {
		tk, _ := k.taskKeys("t-001", task.NewID(t0))
		buckets[tk.ref] = true
	}
	bslots := map[int]bool{}
	for b := range buckets {
		bslots[redistest.KeySlot(b)] = true
	}
	if len(buckets) != 16 || len(bslots) < 8 {
		t.Errorf("200 ids of one hour in %d buckets over %d slots, want 16 buckets spread", len(buckets), len(bslots))
	}
	if len(tenants) < 4 {
		t.Errorf("5 tenants share %d slots: the hash tags do not spread them", len(tenants))
	}
	pk, _ := k.planKeys(planID)
	qk, _ := k.queueKeys(planID)
	for _, key := range []string{pk.plan, pk.tasks, pk.counts, qk.plan, qk.queue, qk.permits} {
		if got, want := redistest.KeySlot(key), redistest.KeySlot(planID); got != want {
			t.Errorf("%s: slot %d, want the plan's %d", key, got, want)
		}
	}
	// The indexes and the feed have no tag: each hashes whole, each in a
	// slot of its own (for the default prefix; any prefix makes them
	// distinct keys, and a collision would only put two on one master).
	inst, _ := k.Instance("coord-a")
	slots := map[int]string{}
	for _, key := range []string{k.Plans(), k.Events(), k.Instances(), inst, k.ActivePlans()} {
		s := redistest.KeySlot(key)
		if other, ok := slots[s]; ok {
			t.Errorf("%s and %s share slot %d", key, other, s)
		}
		slots[s] = key
	}
}
