package facade_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestRetryReachesTheFeed: a retry of a finished plan's failed task is on
// the event feed as its timeline has it — task.retry_requested with the
// attempt it starts — followed by plan.reopened, then the retried run's
// events and plan.completed; whether the retry is queued on the plan's
// shared queue (shared plans) or runs on the instance asked (owner mode).
func TestRetryReachesTheFeed(t *testing.T) {
	for _, mode := range []struct {
		name   string
		opts   []option
		queued bool
	}{{"shared", []option{sharedMode}, true}, {"owner", nil, false}} {
		t.Run(mode.name, func(t *testing.T) {
			forBackends(t, func(t *testing.T, be redistest.Backend) {
				b := setup(t, be, mode.opts...)
				ctx := context.Background()
				b.target.script("fb-2", "deploy", 500, 200)
				v := b.create(spec([]task.StageSpec{b.httpStage("deploy", task.RetryPolicy{})}, "fb-1", "fb-2"))
				b.waitPlan(b.coord, v.ID, plan.StatusFailed)
				if _, err := b.coord.Retry(ctx, "fb-2", facade.RetryRequest{Reason: "INC-1 fixed"}, anyone); err != nil {
					t.Fatal(err)
				}
				b.waitPlan(b.coord, v.ID, plan.StatusCompleted)
				var evs []task.FeedEvent
				eventually(t, 5*time.Second, func() error {
					var err error
					evs, _, err = b.coord.Events(ctx, task.FeedFilter{PlanID: v.ID, Limit: 100}, 0)
					if err != nil {
						return err
					}
					if n := len(evs); n == 0 || evs[n-1].Type != "plan.completed" {
						return fmt.Errorf("feed of the plan: %s", feedTypes(evs))
					}
					return nil
				})
				got := feedTypes(evs)
				// fb-1's events interleave; the plan's and fb-2's are in this order.
				// (A retry run on the instance asked has no task.started: its
				// retry_requested entry names the instance and fence.)
				want := []string{"plan.failed", "fb-2 task.retry_requested 2", "plan.reopened", "fb-2 task.stage_succeeded 2", "fb-2 task.completed 2", "plan.completed"}
				if !inOrder(got, want) {
					t.Fatalf("feed of the plan:\n%s\nwant in this order:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
				for _, ev := range evs {
					if ev.Type == string(task.EventRetryRequested) {
						if ev.Data["actor"] != anyone.Name || ev.Data["reason"] != "INC-1 fixed" || (ev.Data["queued"] == true) != mode.queued {
							t.Errorf("retry event %+v: want actor, reason, queued=%v", ev, mode.queued)
						}
					}
				}
				tl, err := b.coord.Timeline(ctx, "fb-2", 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, ev := range tl.Events {
					if ev.Type == task.EventRetryRequested && ev.Attempt != 2 {
						t.Errorf("timeline's retry event at attempt %d, want 2 (the attempt it starts)", ev.Attempt)
					}
				}
			})
		})
	}
}

// feedTypes is each event as "tenant type attempt", a plan event as its
// type alone.
func feedTypes(evs []task.FeedEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
		if ev.TenantID != "" {
			out[i] = fmt.Sprintf("%s %s %v", ev.TenantID, ev.Type, ev.Data["attempt"])
		}
	}
	return out
}

// inOrder reports whether want appears in got in order (other entries may
// come between).
func inOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}
