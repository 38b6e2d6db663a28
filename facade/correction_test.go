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
	"github.com/deploycoord/deploycoord/task"
)

// stealLockOnWrite gives a tenant's lock to another holder just before the
// first task write of that tenant it sees once armed: the writer's lease
// lapsed and another instance took the tenant, so the write is refused
// while its counts move (same pipeline, the plan's slot) applies.
type stealLockOnWrite struct {
	c      redis.UniversalClient
	tenant string
	key    atomic.Value // the lock key, a string
	armed  atomic.Bool
}

func (h *stealLockOnWrite) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *stealLockOnWrite) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *stealLockOnWrite) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			args := c.Args()
			if len(args) > 4 && c.Name() == "evalsha" && strings.Contains(asString(args[4]), "ckpt:{"+h.tenant+"}") && h.armed.CompareAndSwap(true, false) {
				if err := h.c.Set(ctx, h.key.Load().(string), "someone-else", time.Minute).Err(); err != nil {
					return err
				}
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestCountsCorrectionOnFeed: the last task of a plan finishes after its
// lock went to someone else. The write is refused, its counts move had
// finished the plan, and the store's correction reopened it: a follower of
// the feed is told the counts were corrected (plan.counts_corrected, with
// the counts and the plan's status), and is told of no plan.completed (the
// refused write's) nor plan.reopened (the plan is where it was before the
// write).
func TestCountsCorrectionOnFeed(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		hook := &stealLockOnWrite{tenant: "cc-1"}
		hooked := redistest.Backend{Name: be.Name, Mini: be.Mini, New: func(t testing.TB) (redis.UniversalClient, string) {
			c, prefix := be.New(t)
			hook.c = c
			c.AddHook(hook)
			return c, prefix
		}}
		b := setup(t, hooked)
		key, err := b.store.Keys().Lock("cc-1")
		if err != nil {
			t.Fatal(err)
		}
		hook.key.Store(key)
		ctx := context.Background()
		v := b.create(spec([]task.StageSpec{gateStage("one")}, "cc-1"))
		b.gates.wait(t, "cc-1", "one")
		hook.armed.Store(true)
		b.gates.openAll()
		var got task.FeedEvent
		eventually(t, 10*time.Second, func() error {
			evs, _, err := b.coord.Events(ctx, task.FeedFilter{PlanID: v.ID, Type: facade.EventCountsCorrected, Limit: 10}, 0)
			if err != nil {
				return err
			}
			if len(evs) != 1 {
				return fmt.Errorf("%d %s events, want 1", len(evs), facade.EventCountsCorrected)
			}
			got = evs[0]
			return nil
		})
		if hook.armed.Load() {
			t.Fatal("the hook never saw the task's write")
		}
		counts, _ := got.Data["counts"].(map[string]any)
		if got.TenantID != "cc-1" || got.Data["status"] != "RUNNING" || fmt.Sprint(counts["RUNNING"]) != "1" || fmt.Sprint(counts["COMPLETED"]) != "0" {
			t.Fatalf("%s event %+v; want tenant cc-1, plan RUNNING, counts 1 RUNNING and 0 COMPLETED", facade.EventCountsCorrected, got)
		}
		// The runner publishes the end of its run (task.lease_lost: the
		// tenant is someone else's) after the write returned: once that is
		// on the feed, so is any plan event the write published.
		var evs []task.FeedEvent
		eventually(t, 10*time.Second, func() error {
			evs, _, err = b.coord.Events(ctx, task.FeedFilter{PlanID: v.ID, Limit: 100}, 0)
			if err != nil {
				return err
			}
			for _, ev := range evs {
				if ev.Type == string(task.EventLeaseLost) || ev.Type == string(task.EventWriteRefused) {
					return nil
				}
			}
			return fmt.Errorf("feed of the plan: %v, want the run's end", feedTypes(evs))
		})
		for _, ev := range evs {
			if ev.Type == "plan.completed" || ev.Type == "plan.reopened" || ev.Type == "plan.failed" {
				t.Errorf("feed has %s after a refused write whose correction left the plan RUNNING: %v", ev.Type, feedTypes(evs))
			}
		}
	})
}
