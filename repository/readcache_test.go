package repository

import (
	"reflect"
	"testing"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/task"
)

// TestTaskByTenantKeptRecord: a tenant whose task is not RUNNING is answered
// in one round trip from the record kept at its last query, checked against
// the task's version in Redis; another store's write (a second coordinator
// on the same Redis) is seen by the very next query.
func TestTaskByTenantKeptRecord(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, a *env) {
		ctx := ctxT(t)
		// b is a second coordinator's store on the same Redis and prefix.
		b := newRedisEnv(t, a.client, a.prefix, Config{})
		fx := createPlan(t, a, 2, 0)
		tenant := tenantName(1)
		query := func(wantStatus task.Status) (*task.Task, *checkpoint.Checkpoint, int64) {
			t.Helper()
			var got *task.Task
			var ck *checkpoint.Checkpoint
			n := countRT(t, b, func() error {
				var err error
				got, ck, err = b.store.TaskByTenant(ctx, tenant)
				return err
			})
			if got.ID != fx.tasks[1].ID || got.Status != wantStatus {
				t.Fatalf("TaskByTenant = %s %s, want %s %s", got.ID, got.Status, fx.tasks[1].ID, wantStatus)
			}
			return got, ck, n
		}
		first, _, n := query(task.StatusPending)
		if n != 2 {
			t.Errorf("first query: %d round trips, want 2", n)
		}
		again, _, n := query(task.StatusPending)
		if n != 1 {
			t.Errorf("second query: %d round trips, want 1", n)
		}
		if !reflect.DeepEqual(first, again) {
			t.Fatalf("kept record %+v differs from the read one %+v", again, first)
		}
		// A caller changing its answer does not change the kept record.
		again.Params["version"] = "changed"
		again.StageName = "changed"
		if got, _, _ := query(task.StatusPending); got.Params["version"] != "1.2.3" || got.StageName != first.StageName {
			t.Fatalf("the kept record was changed through an answer: %+v", got)
		}

		// same checks that b answers as a store without kept records does.
		fresh := newRedisEnv(t, a.client, a.prefix, Config{TenantHints: -1})
		same := func() {
			t.Helper()
			want, wck, err := fresh.store.TaskByTenant(ctx, tenant)
			if err != nil {
				t.Fatal(err)
			}
			got, ck, err := b.store.TaskByTenant(ctx, tenant)
			if err != nil || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(ck, wck) {
				t.Fatalf("TaskByTenant = %+v, %+v, %v; Redis holds %+v, %+v", got, ck, err, want, wck)
			}
		}

		// The other coordinator runs the task (write_task.lua): RUNNING is
		// never kept.
		r := start(t, a, fx.tasks[1], 1)
		query(task.StatusRunning)
		if _, _, n := query(task.StatusRunning); n != 1 {
			t.Errorf("query of a RUNNING task: %d round trips, want 1 (the hint)", n)
		}
		// It asks for a pause (request_task.lua), and pauses.
		if _, err := a.store.RequestTask(ctx, tenant, fx.tasks[1].ID, task.RequestPause,
			task.Event{At: a.clock.Now(), Type: task.EventPauseRequested}); err != nil {
			t.Fatal(err)
		}
		same()
		r.tk.PauseRequested = true
		if err := r.tk.Pause(a.clock.Now(), "asked"); err != nil {
			t.Fatal(err)
		}
		r.mustWrite(task.StatusRunning, task.Write{})
		same()
		if _, _, n := query(task.StatusPaused); n != 1 {
			t.Errorf("query of a PAUSED task: %d round trips, want 1 (kept)", n)
		}
		// The pause request is withdrawn (request_task.lua, no seq change).
		if _, err := a.store.RequestTask(ctx, tenant, fx.tasks[1].ID, task.RequestClearPause,
			task.Event{At: a.clock.Now(), Type: task.EventPauseRequested}); err != nil {
			t.Fatal(err)
		}
		same()
		stored, _, err := fresh.store.TaskByTenant(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		r, _ = rerun(t, a, stored, 2, "coord-b")
		same()
		cp, _ := checkpoint.Empty().Complete(0, "push-config", map[string]any{"ok": true})
		r.mustWrite(task.StatusRunning, task.Write{Checkpoint: &cp})
		r.complete()
		got, ck, _ := query(task.StatusCompleted)
		if ck == nil || ck.ContextData["push-config"] == nil || got.Seq != r.tk.Seq {
			t.Fatalf("query after completion: %+v, checkpoint %+v", got, ck)
		}
		ck.CompletedStages[0] = "changed"
		got2, ck2, n := query(task.StatusCompleted)
		if n != 1 || got2.Seq != got.Seq || ck2 == nil || ck2.CompletedStages[0] != "push-config" {
			t.Fatalf("kept COMPLETED task: %d round trips, %+v, checkpoint %+v", n, got2, ck2)
		}

		// The record goes (expired): not found, not the kept record.
		tk, _ := b.redis.keys.taskKeys(tenant, fx.tasks[1].ID)
		a.client.Del(ctx, tk.task)
		if _, _, err := b.store.TaskByTenant(ctx, tenant); err == nil {
			t.Fatal("query after the record went: answered from the kept record")
		}
		// A new plan moves the index: its task answers.
		a.clock.Add(1e9)
		fx2 := createPlan(t, a, 2, 0)
		if got, _, err := b.store.TaskByTenant(ctx, tenant); err != nil || got.ID != fx2.tasks[1].ID {
			t.Fatalf("query after the index moved: %+v, %v; want task %s", got, err, fx2.tasks[1].ID)
		}
	})
}

// TestTenantHintsRecordBound: the records kept are bounded apart from the ids.
func TestTenantHintsRecordBound(t *testing.T) {
	h := newTenantHints(hintShards * 8)
	for i := range 1000 {
		tn := tenantName(i)
		h.keep(tn, hintEntry{id: "x", ver: &taskVersion{}, t: &task.Task{}}, true)
	}
	ids, recs := 0, 0
	for i := range h.shards {
		s := &h.shards[i]
		ids += len(s.m)
		n := 0
		for _, e := range s.m {
			if e.ver != nil {
				n++
			}
		}
		if n != s.records || n > h.perShardRecords {
			t.Fatalf("shard %d: %d records, counted %d, bound %d", i, n, s.records, h.perShardRecords)
		}
		recs += n
	}
	if ids > hintShards*8 || recs > hintShards*2 || recs == 0 {
		t.Fatalf("%d ids, %d records; want at most %d ids, 1..%d records", ids, recs, hintShards*8, hintShards*2)
	}
	for i := range 1000 {
		h.forget(tenantName(i))
	}
	for i := range h.shards {
		if s := &h.shards[i]; s.records != 0 || len(s.m) != 0 {
			t.Fatalf("shard %d after forget: %d records, %d ids", i, s.records, len(s.m))
		}
	}
}
