package repository

import (
	"reflect"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/task"
)

// A record stored before the checkpoint moved into it (no ttlAt, the
// checkpoint in the checkpoint key) still reads with its checkpoint, by
// every read; its next write moves the checkpoint into the record and
// deletes the key, or deletes the key when the write sets or deletes the
// checkpoint.
func TestLegacyCheckpointKey(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		fx := createPlan(t, e, 3, 0)
		want, _ := checkpoint.Empty().Complete(0, "push-config", map[string]any{"revision": "r1"})
		runners := make([]*runner, 3)
		for i := range runners {
			runners[i] = start(t, e, fx.tasks[i], int64(i+1))
			runners[i].mustWrite(task.StatusRunning, task.Write{Checkpoint: &want})
		}
		// Make the three records look as an older version stored them.
		tks := make([]taskKeys, 3)
		for i, r := range runners {
			tks[i], _ = e.redis.keys.taskKeys(r.tk.TenantID, r.tk.ID)
			js := e.client.HGet(ctx, tks[i].task, fCheckpoint).Val()
			if js == "" {
				t.Fatalf("task %d: no checkpoint field in the record after a write with one", i)
			}
			e.client.HDel(ctx, tks[i].task, fCheckpoint, fTTLAt)
			e.client.Set(ctx, tks[i].ckpt, js, time.Hour)
		}
		check := func(what string, got *checkpoint.Checkpoint) {
			t.Helper()
			if got == nil || !reflect.DeepEqual(*got, want) {
				t.Fatalf("%s: checkpoint %+v, want %+v", what, got, want)
			}
		}
		_, cp, err := e.store.Task(ctx, runners[0].tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		check("Task", cp)
		_, cp, err = e.store.TaskByTenant(ctx, runners[1].tk.TenantID)
		if err != nil {
			t.Fatal(err)
		}
		check("TaskByTenant", cp)
		_, cps, err := e.store.TasksByTenant(ctx, []string{runners[0].tk.TenantID, runners[1].tk.TenantID, runners[2].tk.TenantID})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runners {
			check("TasksByTenant "+r.tk.TenantID, cps[r.tk.TenantID])
		}

		// A write keeping the checkpoint moves it into the record.
		e.clock.Add(time.Second)
		runners[0].tk.EnterStage(1, "migrate", e.clock.Now())
		runners[0].mustWrite(task.StatusRunning, task.Write{})
		// A write setting one, and a write deleting it, drop the key.
		next, _ := want.Complete(1, "migrate", nil)
		runners[1].mustWrite(task.StatusRunning, task.Write{Checkpoint: &next})
		runners[2].mustWrite(task.StatusRunning, task.Write{DeleteCheckpoint: true})
		for i, tk := range tks {
			if n := e.client.Exists(ctx, tk.ckpt).Val(); n != 0 {
				t.Errorf("task %d: the checkpoint key outlived the write", i)
			}
			if e.client.HGet(ctx, tk.task, fTTLAt).Val() == "" {
				t.Errorf("task %d: no ttlAt after the write", i)
			}
		}
		_, cp, _ = e.store.Task(ctx, runners[0].tk.ID)
		check("after the moving write", cp)
		if _, cp, _ = e.store.Task(ctx, runners[1].tk.ID); cp == nil || !reflect.DeepEqual(*cp, next) {
			t.Errorf("after the setting write: %+v, want %+v", cp, next)
		}
		if _, cp, _ = e.store.Task(ctx, runners[2].tk.ID); cp != nil {
			t.Errorf("after the deleting write: %+v, want none", cp)
		}
	})
}
