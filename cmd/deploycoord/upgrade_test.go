package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/redistest"
)

// A rolling upgrade: while an instance of storage layout 1 (a version
// before the storageLayout field, which reads a tenant's current task from
// {p}index:tenant:{t} and a task's tenant from {p}taskref:{id}) is alive,
// the binary — DEPLOYCOORD_LEGACY_KEYS at its default, auto — writes those
// keys for it at plan creation; before and after, it does not.
func TestFaultRollingUpgrade(t *testing.T) {
	t.Parallel()
	d := newDrill(t, nil)
	rdb := redistest.NewClient(t, d.addr)
	n := d.start("coord-new")

	// beats waits until coord-new has heartbeated twice since now: the
	// listing of instances that follows the first heartbeat is done.
	beats := func() {
		t.Helper()
		since := time.Now()
		var seen []time.Time
		until(t, 10*time.Second, func() (bool, string) {
			for _, in := range n.instances() {
				if in.ID == "coord-new" && in.LastSeen != nil && in.LastSeen.After(since) &&
					(len(seen) == 0 || !seen[len(seen)-1].Equal(*in.LastSeen)) {
					seen = append(seen, *in.LastSeen)
				}
			}
			return len(seen) >= 2, fmt.Sprintf("heartbeats of coord-new since %s: %v", since, seen)
		})
	}
	ids := []string{"up-1", "up-2", "up-3"}
	run := func(name string) httpapi.Plan {
		t.Helper()
		p := n.createPlan(map[string]any{
			"name": name, "stages": []any{map[string]any{"name": "n", "kind": "noop"}}, "tenants": tenants(ids...),
		})
		return n.waitPlan(p.PlanID, 30*time.Second, "COMPLETED")
	}
	// layout1 answers what an instance of layout 1 would: each tenant's
	// current task id, and whether each of the tenants' current tasks (by
	// coord-new) is found by id.
	layout1 := func() (current map[string]string, byID map[string]bool) {
		t.Helper()
		current, byID = map[string]string{}, map[string]bool{}
		ctx := ctxTimeout(t)
		for _, id := range ids {
			current[id], _ = rdb.Get(ctx, d.prefix+"index:tenant:{"+id+"}").Result()
			tk := n.task(id)
			tenant, err := rdb.Get(ctx, d.prefix+"taskref:{"+tk.TaskID+"}").Result()
			byID[id] = err == nil && tenant == id
		}
		return current, byID
	}

	gauge := func(want float64) {
		t.Helper()
		if v, ok := n.metric("deploycoord_legacy_keys"); !ok || v != want {
			t.Fatalf("deploycoord_legacy_keys = %v (exported: %v), want %v", v, ok, want)
		}
	}
	beats()
	gauge(0)
	before := run("before")
	if cur, byID := layout1(); cur["up-1"] != "" || byID["up-1"] {
		t.Fatalf("layout-1 keys written with no instance of layout 1 alive: index %v, taskref %v", cur, byID)
	}

	// An instance of layout 1 joins: its record as that version wrote it.
	ik := d.prefix + "instance:{coord-old}"
	now := time.Now().UTC()
	if _, err := rdb.TxPipelined(ctxTimeout(t), func(p redis.Pipeliner) error {
		p.HSet(ctxTimeout(t), ik, "id", "coord-old", "addr", "10.0.0.9:8080", "version", "v0.9.0",
			"startedAt", now.Format(time.RFC3339Nano), "lastSeen", now.Format(time.RFC3339Nano), "tasksRunning", "0", "singleInstance", "0")
		p.PExpire(ctxTimeout(t), ik, time.Minute)
		p.ZAdd(ctxTimeout(t), d.prefix+"instances", redis.Z{Score: float64(now.UnixMilli()), Member: "coord-old"})
		return nil
	}); err != nil {
		t.Fatalf("register coord-old: %v", err)
	}
	beats()
	// The tasks created before it joined get the keys too (a backfill).
	n.waitLog(now, 10*time.Second, "backfilled the keys older instances read (storage layout 1)")
	cur, byID := layout1()
	for _, id := range ids {
		if tk := n.task(id); cur[id] != tk.TaskID || tk.PlanID != before.PlanID || !byID[id] {
			t.Fatalf("tenant %s after the backfill: layout 1 reads current %q (coord-new: %s of plan %s), found by id %v; want the plan %s's task",
				id, cur[id], tk.TaskID, tk.PlanID, byID[id], before.PlanID)
		}
	}
	layouts := map[string]int{}
	for _, in := range n.instances() {
		layouts[in.ID] = in.StorageLayout
	}
	if layouts["coord-old"] != 1 || layouts["coord-new"] != 2 {
		t.Fatalf("GET /v1/instances storageLayout %v, want coord-old 1, coord-new 2", layouts)
	}
	gauge(1)
	during := run("during")
	cur, byID = layout1()
	for _, id := range ids {
		if tk := n.task(id); cur[id] != tk.TaskID || tk.PlanID != during.PlanID || !byID[id] {
			t.Fatalf("tenant %s: layout 1 reads current %q (coord-new: %s of plan %s), found by id %v; want the plan %s's task",
				id, cur[id], tk.TaskID, tk.PlanID, byID[id], during.PlanID)
		}
	}

	// It stops cleanly: record gone, entry kept.
	if err := rdb.Del(ctxTimeout(t), ik).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAddXX(ctxTimeout(t), d.prefix+"instances", redis.Z{Score: float64(time.Now().UnixMilli()), Member: "coord-old"}).Err(); err != nil {
		t.Fatal(err)
	}
	beats()
	gauge(0)
	run("after")
	if _, byID := layout1(); byID["up-1"] || byID["up-2"] || byID["up-3"] {
		t.Fatalf("taskref STRINGs written after the layout-1 instance stopped: %v", byID)
	}
}
