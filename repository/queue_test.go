package repository

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

func entriesOf(f fixture, kind plan.QueueKind) []plan.QueueEntry {
	es := make([]plan.QueueEntry, len(f.tasks))
	for i, tk := range f.tasks {
		es[i] = plan.QueueEntry{Kind: kind, TenantID: tk.TenantID, TaskID: tk.ID}
	}
	return es
}

// TestQueueClaimPermits: claims hand out entries in order, at most
// maxConcurrency permits at once across claimers, a freed permit lets the
// next claim through in the same round trip, an empty queue and a plan not
// RUNNING are answers, not errors.
func TestQueueClaimPermits(t *testing.T) {
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		f := createPlan(t, e, 8, 0) // maxConcurrency 5
		id := f.plan.ID
		if err := e.redis.PushQueue(ctx, id, entriesOf(f, plan.QueueStart), false); err != nil {
			t.Fatal(err)
		}
		var got []plan.QueueEntry
		for i := range 5 {
			c, err := e.redis.ClaimTasks(ctx, id, nil, time.Minute, 1)
			if err != nil || c.Outcome != plan.ClaimGranted {
				t.Fatalf("claim %d: %+v %v", i, c, err)
			}
			if c.Entries[0].TaskID != f.tasks[i].ID || c.Entries[0].TenantID != f.tasks[i].TenantID || c.Permits != i+1 {
				t.Fatalf("claim %d got %+v, want task %s", i, c, f.tasks[i].ID)
			}
			got = append(got, c.Entries[0])
		}
		c, err := e.redis.ClaimTasks(ctx, id, nil, time.Minute, 1)
		if err != nil || c.Outcome != plan.ClaimFull || c.Permits != 5 {
			t.Fatalf("sixth claim: %+v %v, want full", c, err)
		}
		// Freeing one permit in the claim lets it through: one round trip.
		var c2 plan.Claim
		n := e.counter.Count(func() { c2, err = e.redis.ClaimTasks(ctx, id, got[:1], time.Minute, 1) })
		if err != nil || c2.Outcome != plan.ClaimGranted || c2.Entries[0].TaskID != f.tasks[5].ID || n != 1 {
			t.Fatalf("claim with release: %+v %v in %d round trips", c2, err, n)
		}
		if err := e.redis.ReleasePermits(ctx, id, got[1:3]); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if c, err := e.redis.ClaimTasks(ctx, id, nil, time.Minute, 1); err != nil || c.Outcome != plan.ClaimGranted {
				t.Fatalf("claim after release: %+v %v", c, err)
			}
		}
		if err := e.redis.ReleasePermits(ctx, id, got[3:5]); err != nil {
			t.Fatal(err)
		}
		if c, err := e.redis.ClaimTasks(ctx, id, nil, time.Minute, 1); err != nil || c.Outcome != plan.ClaimEmpty || c.Permits != 3 {
			t.Fatalf("claim on empty queue: %+v %v", c, err)
		}
		// A plan that is not RUNNING hands out nothing.
		p := f.plan.Clone()
		if err := p.Pause(e.clock.Now(), "hold"); err != nil {
			t.Fatal(err)
		}
		if err := e.store.UpdatePlan(ctx, p, plan.StatusRunning); err != nil {
			t.Fatal(err)
		}
		if err := e.redis.PushQueue(ctx, id, entriesOf(f, plan.QueueResume)[:1], true); err != nil {
			t.Fatal(err)
		}
		if c, err := e.redis.ClaimTasks(ctx, id, nil, time.Minute, 1); err != nil || c.Outcome != plan.ClaimNotRunning || c.Status != plan.StatusPaused {
			t.Fatalf("claim on paused plan: %+v %v", c, err)
		}
		qs, err := e.redis.ActiveQueues(ctx)
		if err != nil || len(qs) != 1 || qs[0].PlanID != id || qs[0].Queued != 1 || qs[0].Permits != 3 || qs[0].MaxConcurrency != 5 {
			t.Fatalf("active queues: %+v %v", qs, err)
		}
		// A missing plan is an answer too, and leaves the active set.
		other := plan.NewID(e.clock.Now())
		if c, err := e.redis.ClaimTasks(ctx, other, nil, time.Minute, 1); err != nil || c.Outcome != plan.ClaimNoPlan {
			t.Fatalf("claim on missing plan: %+v %v", c, err)
		}
		if err := e.redis.DropQueue(ctx, id); err != nil {
			t.Fatal(err)
		}
		if qs, err := e.redis.ActiveQueues(ctx); err != nil || len(qs) != 0 {
			t.Fatalf("active queues after drop: %+v %v", qs, err)
		}
	})
}

// The permits key gets the TTL from the claim that creates it and from
// every renewal, not from claims while permits are held (one command a
// claim less): it never lives without a TTL, and it keeps the TTL as long
// as its permits are renewed.
func TestQueuePermitsTTL(t *testing.T) {
	const ttl = 48 * time.Hour
	eachRedis(t, Config{TTL: ttl}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		f := createPlan(t, e, 4, 0)
		id := f.plan.ID
		qk, _ := e.redis.keys.queueKeys(id)
		if err := e.redis.PushQueue(ctx, id, entriesOf(f, plan.QueueStart), false); err != nil {
			t.Fatal(err)
		}
		ttlIs := func(what string, lo, hi time.Duration) {
			t.Helper()
			if d := e.client.PTTL(ctx, qk.permits).Val(); d < lo || d > hi {
				t.Fatalf("%s: TTL of the permits %s, want [%s, %s]", what, d, lo, hi)
			}
		}
		c1, err := e.redis.ClaimTasks(ctx, id, nil, time.Minute, 1)
		if err != nil || c1.Outcome != plan.ClaimGranted {
			t.Fatalf("claim: %+v %v", c1, err)
		}
		ttlIs("first claim", ttl-time.Minute, ttl)
		e.client.PExpire(ctx, qk.permits, time.Hour) // an older key
		c2, err := e.redis.ClaimTasks(ctx, id, nil, time.Minute, 1)
		if err != nil || c2.Outcome != plan.ClaimGranted {
			t.Fatalf("claim: %+v %v", c2, err)
		}
		ttlIs("claim while one is held", time.Hour-time.Minute, time.Hour)
		if n, err := e.redis.RenewPermits(ctx, id, append(c1.Entries, c2.Entries...), time.Minute); err != nil || n != 2 {
			t.Fatalf("renew: %d %v", n, err)
		}
		ttlIs("renewal", ttl-time.Minute, ttl)
		// All freed: the key goes; the next claim makes it with the TTL.
		if err := e.redis.ReleasePermits(ctx, id, append(c1.Entries, c2.Entries...)); err != nil {
			t.Fatal(err)
		}
		if n := e.client.Exists(ctx, qk.permits).Val(); n != 0 {
			t.Fatal("permits key left after every permit was released")
		}
		if c, err := e.redis.ClaimTasks(ctx, id, nil, time.Minute, 1); err != nil || c.Outcome != plan.ClaimGranted {
			t.Fatalf("claim: %+v %v", c, err)
		}
		ttlIs("claim after all were freed", ttl-time.Minute, ttl)
	})
}

// TestQueueClaimSeveral: one claim grants up to want entries in queue
// order, never more than maxConcurrency permits across claimers, in one
// round trip; a bad entry among them is dropped with its permit and the
// others are granted.
func TestQueueClaimSeveral(t *testing.T) {
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		f := createPlan(t, e, 8, 0) // maxConcurrency 5
		id := f.plan.ID
		es := entriesOf(f, plan.QueueStart)
		if err := e.redis.PushQueue(ctx, id, es, false); err != nil {
			t.Fatal(err)
		}
		var c plan.Claim
		var err error
		n := e.counter.Count(func() { c, err = e.redis.ClaimTasks(ctx, id, nil, time.Minute, 3) })
		if err != nil || c.Outcome != plan.ClaimGranted || !slices.Equal(c.Entries, es[:3]) || c.Permits != 3 || n != 1 {
			t.Fatalf("claim of 3: %+v %v in %d round trips, want %v", c, err, n, es[:3])
		}
		// Only two permits are left: wanting ten grants two.
		c, err = e.redis.ClaimTasks(ctx, id, nil, time.Minute, 10)
		if err != nil || c.Outcome != plan.ClaimGranted || !slices.Equal(c.Entries, es[3:5]) || c.Permits != 5 {
			t.Fatalf("claim of 10 with 2 permits free: %+v %v, want %v", c, err, es[3:5])
		}
		if c, err := e.redis.ClaimTasks(ctx, id, nil, time.Minute, 10); err != nil || c.Outcome != plan.ClaimFull {
			t.Fatalf("claim with every permit held: %+v %v", c, err)
		}
		// Freeing four lets three (the rest of the queue) through, with a
		// hand-written bad entry in between dropped.
		k, _ := e.redis.Keys().PlanQueue(id)
		if err := e.client.LInsert(ctx, k, "AFTER", es[5].String(), "s|{evil}|x").Err(); err != nil {
			t.Fatal(err)
		}
		c, err = e.redis.ClaimTasks(ctx, id, es[:4], time.Minute, 10)
		if err != nil || c.Outcome != plan.ClaimGranted || !slices.Equal(c.Entries, es[5:8]) || c.Permits != 4 {
			t.Fatalf("claim after freeing 4: %+v %v, want %v", c, err, es[5:8])
		}
		q, h, err := e.redis.QueueEntries(ctx, id)
		if err != nil || len(q) != 0 || len(h) != 4 {
			t.Fatalf("queue %v, held %v (%v): want empty and 4 held", q, h, err)
		}
		for _, want := range []int{0, -1, plan.MaxConcurrencyLimit + 1} {
			if _, err := e.redis.ClaimTasks(ctx, id, nil, time.Minute, want); !errors.Is(err, plan.ErrInvalid) {
				t.Errorf("claim of %d entries: %v, want invalid", want, err)
			}
		}
	})
}

// TestQueuePermitExpiry: a permit not renewed within its lease (its holder
// died) is freed and its entry queued again at the head; a renewed one is
// kept.
func TestQueuePermitExpiry(t *testing.T) {
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		f := createPlan(t, e, 3, 0)
		id := f.plan.ID
		es := entriesOf(f, plan.QueueStart)
		if err := e.redis.PushQueue(ctx, id, es, false); err != nil {
			t.Fatal(err)
		}
		const lease = 300 * time.Millisecond
		a, err := e.redis.ClaimTasks(ctx, id, nil, lease, 1)
		if err != nil || a.Outcome != plan.ClaimGranted {
			t.Fatal(a, err)
		}
		b, err := e.redis.ClaimTasks(ctx, id, nil, time.Minute, 1)
		if err != nil || b.Outcome != plan.ClaimGranted {
			t.Fatal(b, err)
		}
		// Renewing while held keeps it; wait past the first lease renewing.
		deadline := time.Now().Add(2 * lease)
		for time.Now().Before(deadline) {
			if n, err := e.redis.RenewPermits(ctx, id, []plan.QueueEntry{a.Entries[0]}, lease); err != nil || n != 1 {
				t.Fatalf("renew: %d %v", n, err)
			}
			time.Sleep(lease / 5)
		}
		c, err := e.redis.ClaimTasks(ctx, id, nil, time.Minute, 1)
		if err != nil || c.Outcome != plan.ClaimGranted || c.Entries[0] != es[2] {
			t.Fatalf("claim while renewed: %+v %v, want %v", c, err, es[2])
		}
		// Stop renewing: after the lease the entry comes back first.
		if err := e.redis.ReleasePermits(ctx, id, []plan.QueueEntry{c.Entries[0]}); err != nil {
			t.Fatal(err)
		}
		var again plan.Claim
		for range 100 {
			if again, err = e.redis.ClaimTasks(ctx, id, nil, time.Minute, 1); err != nil {
				t.Fatal(err)
			}
			if again.Outcome != plan.ClaimEmpty {
				break
			}
			time.Sleep(lease / 5)
		}
		if again.Outcome != plan.ClaimGranted || again.Entries[0] != a.Entries[0] || again.Permits != 2 {
			t.Fatalf("expired permit's entry not queued again: %+v", again)
		}
		if n, err := e.redis.RenewPermits(ctx, id, []plan.QueueEntry{es[2]}, lease); err != nil || n != 0 {
			t.Fatalf("renew of a released permit: %d %v, want 0", n, err)
		}
	})
}

// TestQueueHostileInput: bad plan ids, entries and leases are refused with
// ErrInvalid and nothing is written.
func TestQueueHostileInput(t *testing.T) {
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		f := createPlan(t, e, 1, 0)
		good := entriesOf(f, plan.QueueStart)[0]
		bad := []plan.QueueEntry{
			{Kind: "x", TenantID: good.TenantID, TaskID: good.TaskID},
			{Kind: plan.QueueStart, TenantID: "a|b", TaskID: good.TaskID},
			{Kind: plan.QueueStart, TenantID: "{t}", TaskID: good.TaskID},
			{Kind: plan.QueueStart, TenantID: "t*", TaskID: good.TaskID},
			{Kind: plan.QueueStart, TenantID: "t\x00", TaskID: good.TaskID},
			{Kind: plan.QueueStart, TenantID: strings.Repeat("t", 300), TaskID: good.TaskID},
			{Kind: plan.QueueStart, TenantID: good.TenantID, TaskID: "task-1:2"},
		}
		for _, b := range bad {
			err := e.redis.PushQueue(ctx, f.plan.ID, []plan.QueueEntry{good, b}, false)
			if !errors.Is(err, plan.ErrInvalid) && !errors.Is(err, task.ErrInvalid) {
				t.Errorf("push %q: %v, want invalid", b.String(), err)
			}
			if _, err := e.redis.ClaimTasks(ctx, f.plan.ID, []plan.QueueEntry{b}, time.Minute, 1); err == nil {
				t.Errorf("claim releasing %q accepted", b.String())
			}
		}
		for _, id := range []string{"", "plan-{x}", "plan-*", "plan-1:2", "plan-\n"} {
			if err := e.redis.PushQueue(ctx, id, []plan.QueueEntry{good}, false); !errors.Is(err, plan.ErrInvalid) {
				t.Errorf("push to plan %q: %v", id, err)
			}
			if _, err := e.redis.ClaimTasks(ctx, id, nil, time.Minute, 1); !errors.Is(err, plan.ErrInvalid) {
				t.Errorf("claim on plan %q: %v", id, err)
			}
		}
		if _, err := e.redis.ClaimTasks(ctx, f.plan.ID, nil, 0, 1); !errors.Is(err, plan.ErrInvalid) {
			t.Errorf("claim with no lease: %v", err)
		}
		if q, h, err := e.redis.QueueEntries(ctx, f.plan.ID); err != nil || len(q) != 0 || len(h) != 0 {
			t.Fatalf("something was written: %v %v %v", q, h, err)
		}
		// A hand-written bad entry is dropped by the claim that pops it.
		k, _ := e.redis.Keys().PlanQueue(f.plan.ID)
		if err := e.client.RPush(ctx, k, "s|{evil}|x").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.redis.ClaimTasks(ctx, f.plan.ID, nil, time.Minute, 1); !errors.Is(err, task.ErrInvalid) {
			t.Fatalf("claim of a bad entry: %v", err)
		}
		if q, h, err := e.redis.QueueEntries(ctx, f.plan.ID); err != nil || len(q) != 0 || len(h) != 0 {
			t.Fatalf("bad entry left: %v %v %v", q, h, err)
		}
	})
}

// TestPushQueueFrontKeepsOrder: entries pushed to the head of a queue keep
// their order ahead of the entries there, over several batches too (the
// later batches went ahead of the earlier ones).
func TestPushQueueFrontKeepsOrder(t *testing.T) {
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		f := createPlan(t, e, 1, 0)
		id := f.plan.ID
		tail := plan.QueueEntry{Kind: plan.QueueStart, TenantID: f.tasks[0].TenantID, TaskID: f.tasks[0].ID}
		if err := e.redis.PushQueue(ctx, id, []plan.QueueEntry{tail}, false); err != nil {
			t.Fatal(err)
		}
		var front []plan.QueueEntry
		for i := range 2*queueBatch + 7 {
			front = append(front, plan.QueueEntry{Kind: plan.QueueResume, TenantID: tenantName(i), TaskID: f.tasks[0].ID})
		}
		if err := e.redis.PushQueue(ctx, id, front, true); err != nil {
			t.Fatal(err)
		}
		queued, _, err := e.redis.QueueEntries(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if want := append(slices.Clone(front), tail); !slices.Equal(queued, want) {
			i := 0
			for i < min(len(queued), len(want)) && queued[i] == want[i] {
				i++
			}
			t.Fatalf("queue of %d entries differs from the %d pushed (front, then the one there) at %d", len(queued), len(want), i)
		}
	})
}
