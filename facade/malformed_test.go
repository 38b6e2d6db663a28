package facade_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestMalformedRecordStart: a queued task whose stored record was broken by
// hand (its params no longer JSON) after it was created. Its start lands —
// a blind start learns the params only from the write's answer — but the
// task cannot run: the instance lets the tenant lock go at once, does not
// queue the task again (it would fail the same way), and the task shows
// RUNNING and orphaned while every query of it answers an error that
// facade.IsMalformed matches, naming the key and the field. The rest of the
// plan runs. Once the field is fixed, a retry takes the task over and the
// plan completes: the runbook's "A malformed record".
func TestMalformedRecordStart(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		ctx := context.Background()
		s := spec([]task.StageSpec{gateStage("deploy")}, "mal-a", "mal-b", "mal-c")
		s.MaxConcurrency = 1
		v := b.create(s)
		b.gates.wait(t, "mal-a", "deploy") // mal-b and mal-c wait in the queue

		tv, err := b.coord.TaskByTenant(ctx, "mal-b")
		if err != nil {
			t.Fatal(err)
		}
		key, err := b.store.Keys().Task("mal-b", tv.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		params, err := b.client.HGet(ctx, key, "params").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		if err := b.client.HSet(ctx, key, "params", "{not json").Err(); err != nil {
			t.Fatal(err)
		}
		b.gates.openAll()

		// mal-c completes; mal-b stays RUNNING, its lock let go.
		b.waitCounts(b.coord, v.ID, 10*time.Second, map[task.Status]int{task.StatusCompleted: 2, task.StatusRunning: 1})
		_, err = b.coord.TaskByTenant(ctx, "mal-b")
		if !facade.IsMalformed(err) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "field params") {
			t.Fatalf("query of the malformed task: %v; want a malformed-record error naming %s and its field", err, key)
		}
		if _, err := b.coord.Timeline(ctx, "mal-b", 0); !facade.IsMalformed(err) {
			t.Errorf("timeline of the malformed task: %v; want the malformed-record error", err)
		}
		if info, err := b.coord.Lock(ctx, "mal-b"); err != nil || info.Held {
			t.Errorf("lock of mal-b: %+v, %v; want it let go", info, err)
		}
		if pv, err := b.coord.Plan(ctx, v.ID); err != nil || pv.Plan.Status != plan.StatusRunning {
			t.Fatalf("plan: %v, %v; want RUNNING", pv.Plan.Status, err)
		}
		if _, err := b.coord.Retry(ctx, "mal-b", facade.RetryRequest{Reason: "before the fix"}, anyone); !facade.IsMalformed(err) {
			t.Errorf("retry before the fix: %v; want the malformed-record error", err)
		}
		// The start was not queued again, and holds no permit (mal-c's is
		// freed by the run's next claim, a moment after its counts moved).
		eventually(t, 10*time.Second, func() error {
			if queued, held, err := b.store.QueueEntries(ctx, v.ID); err != nil || len(queued)+len(held) != 0 {
				return errf("plan queue %v, permits held %v (%v); want none", queued, held, err)
			}
			return nil
		})

		// The fix, as the runbook says: the field as it was, and a new
		// writeId so that every reader and writer sees the record changed.
		fix := []any{"writeId", "hand-fix-1"}
		if params != "" {
			fix = append(fix, "params", params)
		}
		if err := b.client.HSet(ctx, key, fix...).Err(); err != nil {
			t.Fatal(err)
		}
		if params == "" {
			if err := b.client.HDel(ctx, key, "params").Err(); err != nil {
				t.Fatal(err)
			}
		}
		tv, err = b.coord.TaskByTenant(ctx, "mal-b")
		if err != nil || tv.Task.Status != task.StatusRunning || !tv.Orphaned {
			t.Fatalf("mal-b after the fix: %+v, %v; want RUNNING and orphaned", tv.Task, err)
		}
		if _, err := b.coord.Retry(ctx, "mal-b", facade.RetryRequest{Reason: "record fixed by hand"}, anyone); err != nil {
			t.Fatalf("retry after the fix: %v", err)
		}
		b.waitPlan(b.coord, v.ID, plan.StatusCompleted)
		if tv := b.waitTask(b.coord, "mal-b", task.StatusCompleted); tv.Task.Attempt != 2 {
			t.Errorf("mal-b completed at attempt %d, want 2", tv.Task.Attempt)
		}
	})
}
