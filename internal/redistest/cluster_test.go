package redistest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
)

// TestClusterSpreadsAndReshards: the cluster backend's keys land on every
// master, a reshard moves slots (and their keys) while a client writes,
// and DeletePrefix and KeysUnder see every master.
func TestClusterSpreadsAndReshards(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	c := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prefix := redistest.Prefix(t)
	const n = 300
	for i := 0; i < n; i++ {
		if err := c.Set(ctx, fmt.Sprintf("%sk:{%d}", prefix, i), i, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	per, err := cl.KeysPerNode(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for addr, k := range per {
		if k == 0 {
			t.Errorf("master %s holds no key of %d: %v", addr, n, per)
		}
		total += k
	}
	if total != n {
		t.Fatalf("masters hold %d keys, want %d: %v", total, n, per)
	}

	// Reshard 500 slots from the second master to the first while writing.
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := c.Incr(ctx, fmt.Sprintf("%sk:{%d}", prefix, i%n)).Err(); err != nil {
				done <- err
				return
			}
		}
	}()
	before, _ := cl.Slots(ctx, cl.Nodes[0])
	if err := cl.Reshard(ctx, cl.Nodes[1], cl.Nodes[0], 500); err != nil {
		t.Fatal(err)
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("a write during the reshard failed: %v", err)
	}
	after, _ := cl.Slots(ctx, cl.Nodes[0])
	if count(after) != count(before)+500 {
		t.Fatalf("first master serves %v after the reshard, %v before: want 500 slots more", after, before)
	}
	// Migrate one key's slot to another master, the key kept.
	key := prefix + "k:{7}"
	slot, err := cl.Slot(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := cl.Owner(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := c.Get(ctx, key).Result()
	to := cl.Nodes[0]
	if owner == to {
		to = cl.Nodes[2]
	}
	if err := cl.MigrateSlot(ctx, slot, to); err != nil {
		t.Fatal(err)
	}
	if now, err := cl.Owner(ctx, slot); err != nil || now != to {
		t.Fatalf("slot %d served by %v (%v) after MigrateSlot, want %s", slot, now, err, to.Addr)
	}
	if got, err := c.Get(ctx, key).Result(); err != nil || got != want {
		t.Fatalf("%s after MigrateSlot: %q (%v), want %q", key, got, err, want)
	}
	keys, err := redistest.KeysUnder(ctx, c, prefix)
	if err != nil || len(keys) != n {
		t.Fatalf("KeysUnder after the reshard: %d keys, %v; want %d", len(keys), err, n)
	}
	redistest.DeletePrefix(c, prefix)
	if keys, err := redistest.KeysUnder(ctx, c, prefix); err != nil || len(keys) != 0 {
		t.Fatalf("DeletePrefix left %d keys (%v)", len(keys), err)
	}
}

func count(ranges [][2]int) int {
	n := 0
	for _, r := range ranges {
		n += r[1] - r[0] + 1
	}
	return n
}

// TestSentinelFailover: killing the master promotes the replica, and a
// failover client writes to the new master.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, err := s.MasterAddr(ctx)
	if err != nil || old != s.Master.Addr {
		t.Fatalf("master %q (%v), want %s", old, err, s.Master.Addr)
	}
	killed := time.Now()
	s.Master.Kill()
	now, err := s.WaitFailover(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if now != s.Replica.Addr {
		t.Fatalf("new master %s, want the replica %s", now, s.Replica.Addr)
	}
	t.Logf("failover took %s", time.Since(killed).Round(time.Millisecond))
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := c.Set(ctx, "k", "after", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failover client still cannot write: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if v, err := redistest.NewClient(t, now).Get(ctx, "k").Result(); err != nil || v != "after" {
		t.Fatalf("new master holds %q (%v), want after", v, err)
	}
}

// TestKeySlot: KeySlot agrees with the cluster spec's check value and with
// CLUSTER KEYSLOT.
func TestKeySlot(t *testing.T) {
	t.Parallel()
	if got := redistest.KeySlot("123456789"); got != 12739 {
		t.Fatalf("KeySlot(123456789) = %d, want 12739 (CRC16 check value 0x31C3 mod 16384)", got)
	}
	cl := redistest.SharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, k := range []string{"x", "executor:events", "p:task:{t-001}:task-01", "a{}b", "{}{t}", "p:{a}:{b}", "{"} {
		want, err := cl.Slot(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if got := redistest.KeySlot(k); got != want {
			t.Errorf("KeySlot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}
