package facade_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
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
				// (Whether the new attempt's task.started comes before the
				// plan's reopening depends on where it starts: in the retry's
				// write on the instance asked, or where a queued one is claimed.)
				for _, want := range [][]string{
					{"plan.failed", "fb-2 task.retry_requested 2", "fb-2 task.started 2", "fb-2 task.stage_succeeded 2", "fb-2 task.completed 2", "plan.completed"},
					{"plan.failed", "fb-2 task.retry_requested 2", "plan.reopened", "fb-2 task.completed 2", "plan.completed"},
				} {
					if !inOrder(got, want) {
						t.Fatalf("feed of the plan:\n%s\nwant in this order:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
					}
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

// TestPlanEventsOnce: on two instances sharing a plan, each plan event is
// on the feed once — an operator's pause is one plan.paused (the action's,
// with its actor) and a resume one plan.resumed (no plan.reopened), a
// failure past maxFailed one plan.paused, and the plan's end one
// plan.completed, whichever instance's write finished it.
func TestPlanEventsOnce(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		other := b.second("coord-b")
		ctx := context.Background()
		s := spec([]task.StageSpec{gateStage("one"), noopStage("two")}, "po-1", "po-2", "po-3", "po-4")
		s.MaxConcurrency = 2
		v := b.create(s)
		b.gates.wait(t, "po-1", "one")
		if _, err := other.PausePlan(ctx, v.ID, "INC-5 hold", anyone); err != nil {
			t.Fatal(err)
		}
		b.gates.openAll()
		b.waitPlan(b.coord, v.ID, plan.StatusPaused)
		b.waitCounts(b.coord, v.ID, 10*time.Second, map[task.Status]int{task.StatusRunning: 0})
		if _, err := b.coord.ResumePlan(ctx, v.ID, facade.ResumeOptions{Reason: "INC-5 go on"}, anyone); err != nil {
			t.Fatal(err)
		}
		b.waitPlan(other, v.ID, plan.StatusCompleted)

		// A second plan paused by its second failure, one being allowed.
		b.target.script("pf-1", "deploy", 500)
		b.target.script("pf-2", "deploy", 500)
		f := spec([]task.StageSpec{b.httpStage("deploy", task.RetryPolicy{})}, "pf-1", "pf-2", "pf-3")
		f.MaxConcurrency, f.FailureThreshold = 1, &plan.FailureThreshold{MaxFailed: 1}
		fv := b.create(f)
		b.waitPlan(other, fv.ID, plan.StatusPaused)

		// count reads the plan events of planID on the feed once its last
		// one is there, and again after the publisher's batches had time to
		// flush a duplicate.
		count := func(planID, last string) map[string]int {
			read := func() (map[string]int, error) {
				evs, _, err := b.coord.Events(ctx, task.FeedFilter{PlanID: planID, Limit: 100}, 0)
				n := map[string]int{}
				for _, ev := range evs {
					if strings.HasPrefix(ev.Type, "plan.") {
						n[ev.Type]++
					}
				}
				return n, err
			}
			eventually(t, 5*time.Second, func() error {
				n, err := read()
				if err == nil && n[last] == 0 {
					err = fmt.Errorf("plan events %v", n)
				}
				return err
			})
			time.Sleep(200 * time.Millisecond)
			n, err := read()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		want := map[string]int{"plan.created": 1, "plan.started": 1, "plan.paused": 1, "plan.resumed": 1, "plan.completed": 1}
		if got := count(v.ID, "plan.completed"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("plan events of the paused and resumed plan: %v, want %v", got, want)
		}
		want = map[string]int{"plan.created": 1, "plan.started": 1, "plan.paused": 1}
		if got := count(fv.ID, "plan.paused"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("plan events of the plan paused by its failures: %v, want %v", got, want)
		}
	})
}

// TestRetryOfALockedTaskSaysWho: a retry of a failed task whose lock a
// holder of the same task took meanwhile (another retry, on another
// instance) is TASK_RUNNING; the detail advises breaking the lock only when
// that instance is not alive — when it is, it is running or retrying the
// task, and the answer says so.
func TestRetryOfALockedTaskSaysWho(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		other := b.second("coord-b")
		ctx := context.Background()
		b.target.script("lk-1", "deploy", 500)
		v := b.create(spec([]task.StageSpec{b.httpStage("deploy", task.RetryPolicy{})}, "lk-1"))
		b.waitPlan(b.coord, v.ID, plan.StatusFailed)
		tv := b.waitTask(b.coord, "lk-1", task.StatusFailed)
		_ = other
		for _, tt := range []struct {
			holder, want string
		}{
			{"coord-b", "is being run or retried by instance coord-b, which is alive"},
			{"coord-gone", "still holds its lease on instance coord-gone"},
		} {
			lease, err := b.locks.Acquire(ctx, "lk-1", tenantlock.Holder{PlanID: v.ID, TaskID: tv.Task.ID, Instance: tt.holder})
			if err != nil {
				t.Fatal(err)
			}
			// (coord-a learns that coord-b is alive at its next heartbeat.)
			eventually(t, 5*time.Second, func() error {
				_, err := b.coord.Retry(ctx, "lk-1", facade.RetryRequest{Reason: "INC-2"}, anyone)
				if !errors.Is(err, facade.ErrTaskRunning) || !strings.Contains(err.Error(), tt.want) {
					return fmt.Errorf("retry with the lock held by %s: %v; want TASK_RUNNING saying %q", tt.holder, err, tt.want)
				}
				return nil
			})
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestPausePendingTaskRefused: a pause of a task that has not started is
// TASK_PENDING and changes nothing — no request stored, no timeline entry,
// no pause_requested event on the feed — where it used to answer 200 with
// the task unchanged (and publish the event).
func TestPausePendingTaskRefused(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		ctx := context.Background()
		s := spec([]task.StageSpec{gateStage("one")}, "pp-1", "pp-2")
		s.MaxConcurrency = 1
		v := b.create(s)
		b.gates.wait(t, "pp-1", "one")
		_, err := b.coord.PauseTask(ctx, "pp-2", "INC-3 hold", anyone)
		if !errors.Is(err, facade.ErrTaskPending) || !strings.Contains(err.Error(), "cannot be paused") {
			t.Fatalf("pause of a pending task: %v; want TASK_PENDING", err)
		}
		tv, err := b.coord.TaskByTenant(ctx, "pp-2")
		if err != nil || tv.Task.Status != task.StatusPending || tv.Task.PauseRequested {
			t.Fatalf("pending task after the refused pause: %+v, %v", tv.Task, err)
		}
		b.gates.openAll()
		b.waitPlan(b.coord, v.ID, plan.StatusCompleted)
		evs, _, err := b.coord.Events(ctx, task.FeedFilter{TenantID: "pp-2", Type: string(task.EventPauseRequested), Limit: 10}, 0)
		if err != nil || len(evs) != 0 {
			t.Errorf("pause_requested events of pp-2 on the feed: %v, %v; want none", evs, err)
		}
		if tv := b.waitTask(b.coord, "pp-2", task.StatusCompleted); tv.Task.Reason != "" {
			t.Errorf("pp-2 completed with reason %q", tv.Task.Reason)
		}
	})
}

// TestCancelOfLastTaskEndsPlanOnFeed: cancelling a plan's last unfinished
// task (paused, so no run writes it) finishes the plan; the cancel's write
// is the one that changed the plan's status, and the feed says so once.
func TestCancelOfLastTaskEndsPlanOnFeed(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		ctx := context.Background()
		v := b.create(spec([]task.StageSpec{gateStage("one"), noopStage("two")}, "cl-1"))
		b.gates.wait(t, "cl-1", "one")
		if _, err := b.coord.PauseTask(ctx, "cl-1", "INC-4 hold", anyone); err != nil {
			t.Fatal(err)
		}
		b.gates.openAll()
		b.waitTask(b.coord, "cl-1", task.StatusPaused)
		if _, err := b.coord.CancelTask(ctx, "cl-1", "INC-4 drop it", anyone); err != nil {
			t.Fatal(err)
		}
		pv := b.waitPlan(b.coord, v.ID, plan.StatusFailed, plan.StatusCancelled, plan.StatusCompleted)
		want := "plan." + strings.ToLower(string(pv.Status))
		once := func() error {
			evs, _, err := b.coord.Events(ctx, task.FeedFilter{PlanID: v.ID, Type: want, Limit: 10}, 0)
			if err == nil && len(evs) != 1 {
				err = fmt.Errorf("%d %s events on the feed, want 1", len(evs), want)
			}
			return err
		}
		eventually(t, 5*time.Second, once)
		time.Sleep(200 * time.Millisecond) // a duplicate would be flushed by now
		if err := once(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRepairThatFinishesPlanOnFeed: counts that drifted (a phantom PENDING,
// as a hand edit leaves) hold a plan open after its last task completed; a
// repair of the counts finishes it, and the feed says plan.completed after
// plan.counts_repaired.
func TestRepairThatFinishesPlanOnFeed(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		ctx := context.Background()
		v := b.create(spec([]task.StageSpec{gateStage("one")}, "rp-1"))
		b.gates.wait(t, "rp-1", "one")
		key, err := b.store.Keys().PlanCounts(v.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.client.HIncrBy(ctx, key, string(task.StatusPending), 1).Err(); err != nil {
			t.Fatal(err)
		}
		b.gates.openAll()
		b.waitTask(b.coord, "rp-1", task.StatusCompleted)
		if pv, _ := b.coord.Plan(ctx, v.ID); pv.Plan.Status != plan.StatusRunning {
			t.Fatalf("plan with a phantom PENDING count: %s, want RUNNING", pv.Plan.Status)
		}
		pv, err := b.coord.RepairCounts(ctx, v.ID, "INC-6 counts drifted", anyone)
		if err != nil || pv.Plan.Status != plan.StatusCompleted {
			t.Fatalf("repair: %s, %v; want COMPLETED", pv.Plan.Status, err)
		}
		eventually(t, 5*time.Second, func() error {
			evs, _, err := b.coord.Events(ctx, task.FeedFilter{PlanID: v.ID, Limit: 100}, 0)
			if err != nil {
				return err
			}
			if got := feedTypes(evs); !inOrder(got, []string{"plan.counts_repaired", "plan.completed"}) {
				return fmt.Errorf("feed of the plan: %v", got)
			}
			return nil
		})
	})
}

// afterWrites is a Redis store that calls then once, right after the nth
// task write out of FAILED or CANCELLED (a retry's) it lets through.
type afterWrites struct {
	*repository.Redis
	n, at int32
	mu    sync.Mutex
	then  func()
	// gate, when set, holds this store's claims as it holds its own.
	gate *gatedRedisClaims
}

func (s *afterWrites) ClaimTasks(ctx context.Context, planID string, release []plan.QueueEntry, lease time.Duration, want int) (plan.Claim, error) {
	if s.gate != nil {
		return s.gate.ClaimTasks(ctx, planID, release, lease, want)
	}
	return s.Redis.ClaimTasks(ctx, planID, release, lease, want)
}

func (s *afterWrites) WriteTask(ctx context.Context, w task.Write) (task.WriteResult, error) {
	res, err := s.Redis.WriteTask(ctx, w)
	s.mu.Lock()
	if (w.PrevStatus == task.StatusFailed || w.PrevStatus == task.StatusCancelled) && err == nil {
		s.n++
	}
	then := s.then
	if s.n != s.at {
		then = nil
	} else {
		s.then = nil
	}
	s.mu.Unlock()
	if then != nil {
		then()
	}
	return res, err
}

// TestPlanCancelStopsBulkRetry: a plan cancelled (on another instance)
// while a bulk retry goes through its failed tenants stops that retry: the
// tenants after the cancel are skipped with PLAN_FINISHED, and the plan stays
// CANCELLED — where the bulk retry used to go on, reopen the plan and deploy
// the rest after the cancel had answered 200 (found by a chaos run).
func TestPlanCancelStopsBulkRetry(t *testing.T) {
	for _, from := range []plan.Status{plan.StatusFailed, plan.StatusCancelled} {
		t.Run(string(from), func(t *testing.T) {
			t.Parallel()
			planCancelStopsBulkRetry(t, from, false)
		})
	}
	// The cancel, then a tenant written at that moment reopens the plan
	// before the retry's next read: the retry still stops (it read the
	// plan RUNNING and went on: 800 of 800 retried after a cancel, a chaos
	// run).
	t.Run("ReopenedRightAfter", func(t *testing.T) {
		t.Parallel()
		planCancelStopsBulkRetry(t, plan.StatusCancelled, true)
	})
}

// planCancelStopsBulkRetry: the plan is from (FAILED: its tasks failed;
// CANCELLED: cancelled before it started, its tasks CANCELLED) when the bulk
// retry of its tasks begins; the retry reopens it, and a cancel after the
// third tenant must stop the rest. From CANCELLED the retry went on through
// every tenant (an operator session: 10 000 of them, both commands exit 0),
// since it only stopped on a plan that was not CANCELLED when it began.
func planCancelStopsBulkRetry(t *testing.T, from plan.Status, reopen bool) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		// No retried task starts while the bulk retry goes on (one starting
		// at the cancel's very moment may reopen the plan: documented).
		c, gate := gatedCoord(t, b)
		ctx := context.Background()
		ts := make([]string, 8)
		for i := range ts {
			ts[i] = fmt.Sprintf("bc-%d", i)
			if from == plan.StatusFailed {
				b.target.script(ts[i], "deploy", 500, 200)
			}
		}
		s := spec([]task.StageSpec{b.httpStage("deploy", task.RetryPolicy{})}, ts...)
		status := task.StatusFailed
		if from == plan.StatusCancelled {
			no := false
			s.Start = &no
			status = task.StatusCancelled
		}
		v, err := c.CreatePlan(ctx, s, anyone)
		if err != nil {
			t.Fatal(err)
		}
		if from == plan.StatusCancelled {
			if _, err := c.CancelPlan(ctx, v.ID, "INC-7 not now", anyone); err != nil {
				t.Fatal(err)
			}
		}
		b.waitPlan(c, v.ID, from)
		store := &afterWrites{Redis: b.store, at: 3, gate: gate, then: func() {
			if _, err := c.CancelPlan(ctx, v.ID, "INC-7 stop it", anyone); err != nil {
				t.Error(err)
			}
			if reopen {
				p, _, err := b.store.Plan(ctx, v.ID)
				if err != nil {
					t.Error(err)
					return
				}
				p.Apply(time.Now(), plan.StatusRunning, "")
				if err := b.store.UpdatePlan(ctx, p, plan.StatusCancelled); err != nil {
					t.Error(err)
				}
			}
		}}
		x := newCoordinator(t, b, store, b.locks, "coord-x", nil)
		gate.open.Store(false)
		res, err := x.RetryPlan(ctx, v.ID, facade.PlanRetryRequest{Statuses: []task.Status{status}, Reason: "INC-7 target fixed"}, anyone)
		gate.open.Store(true)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Retried) != 3 || len(res.Skipped) != len(ts)-3 {
			t.Fatalf("bulk retry: retried %v, skipped %d; want 3 retried, the rest skipped", res.Retried, len(res.Skipped))
		}
		for _, sk := range res.Skipped {
			if !errors.Is(sk.Err, facade.ErrPlanFinished) || !strings.Contains(sk.Err.Error(), "cancelled after this bulk retry began") {
				t.Errorf("skipped %s: %v; want PLAN_FINISHED, cancelled meanwhile", sk.TenantID, sk.Err)
			}
			// A bulk retry prepares its tenants (their locks taken) before
			// it goes through them: the skipped ones' locks are released.
			if li, err := b.locks.View(ctx, sk.TenantID); err != nil || li.Held {
				t.Errorf("skipped %s: lock %+v %v, want released", sk.TenantID, li, err)
			}
		}
		time.Sleep(300 * time.Millisecond)
		b.idle(c)
		if pv, err := c.Plan(ctx, v.ID); err != nil || (pv.Plan.Status != plan.StatusCancelled && !reopen) {
			t.Fatalf("plan after the cancel: %s, %v; want CANCELLED", pv.Plan.Status, err)
		}
	})
}

// TestRetryOfQueuedRetrySaysQueued: a retry of a task another retry has
// just queued (PENDING at its next attempt, waiting for room in its plan)
// is TASK_PENDING saying so — not "has not started; start or resume the
// plan", which a chaos run found given to the loser of two retries.
func TestRetryOfQueuedRetrySaysQueued(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		ctx := context.Background()
		b.target.script("qr-1", "deploy", 500, 200)
		s := spec([]task.StageSpec{b.httpStage("deploy", task.RetryPolicy{}), gateStage("hold")}, "qr-1", "qr-2")
		s.MaxConcurrency = 1
		b.create(s)
		b.waitTask(b.coord, "qr-1", task.StatusFailed)
		b.gates.wait(t, "qr-2", "hold") // the plan's only permit is busy
		if _, err := b.coord.Retry(ctx, "qr-1", facade.RetryRequest{Reason: "INC-8 first"}, anyone); err != nil {
			t.Fatal(err)
		}
		_, err := b.coord.Retry(ctx, "qr-1", facade.RetryRequest{Reason: "INC-8 second"}, anyone)
		if !errors.Is(err, facade.ErrTaskPending) || !strings.Contains(err.Error(), "queued to run again (attempt 2") {
			t.Fatalf("retry of a queued retry: %v; want TASK_PENDING saying it is queued", err)
		}
	})
}

// TestPlanCancelReasonReachesRunningTasks: the tasks a plan cancel stops
// between two stages carry "plan cancelled: <reason>" on every instance.
// An instance that learnt of the cancel from a task write's answer or a
// claim (which carry the plan's status, not its reason) wrote "plan
// cancelled: " with an empty reason (an operator session: 38 of 40).
func TestPlanCancelReasonReachesRunningTasks(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		ctx := context.Background()
		b.second("coord-b")
		ts := []string{"cr-0", "cr-1", "cr-2", "cr-3"}
		s := spec([]task.StageSpec{gateStage("hold"), noopStage("after")}, ts...)
		v := b.create(s)
		for _, tn := range ts {
			b.gates.wait(t, tn, "hold")
		}
		if _, err := b.coord.CancelPlan(ctx, v.ID, "INC-16 why", anyone); err != nil {
			t.Fatal(err)
		}
		time.Sleep(6 * b.cfg.PlanPoll) // both instances see the cancel, by poll or claim
		for _, tn := range ts {
			b.gates.release(tn, "hold")
		}
		for _, tn := range ts {
			tv := b.waitTask(b.coord, tn, task.StatusCancelled)
			if tv.Task.Reason != "plan cancelled: INC-16 why" {
				t.Errorf("%s (run on %s): reason %q, want %q", tn, tv.Task.Owner, tv.Task.Reason, "plan cancelled: INC-16 why")
			}
		}
	})
}

// TestPlanResumeRunsPausedTasksFirst: a plan pause stops its running tasks
// (PAUSED) and its queue; the resume takes the paused tasks back first, not
// behind every task that never started (an operator session: 49 tasks
// PAUSED for 45 s, until 1 826 PENDING ones were done, and tried to resume
// them by hand).
func TestPlanResumeRunsPausedTasksFirst(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, sharedMode)
		c, store := gatedCoord(t, b)
		ctx := context.Background()
		ts := []string{"rf-0", "rf-1", "rf-2", "rf-3", "rf-4", "rf-5"}
		s := spec([]task.StageSpec{gateStage("hold"), noopStage("after")}, ts...)
		s.MaxConcurrency = 2
		v, err := c.CreatePlan(ctx, s, anyone)
		if err != nil {
			t.Fatal(err)
		}
		b.gates.wait(t, "rf-0", "hold")
		b.gates.wait(t, "rf-1", "hold")
		if _, err := c.PausePlan(ctx, v.ID, "INC-5 hold on", anyone); err != nil {
			t.Fatal(err)
		}
		b.gates.release("rf-0", "hold")
		b.gates.release("rf-1", "hold")
		b.waitTask(c, "rf-0", task.StatusPaused)
		b.waitTask(c, "rf-1", task.StatusPaused)
		b.idle(c)
		// No claim between the plan's RUNNING write and the queueing of the
		// paused tasks (a claim there may take the first PENDING entries).
		store.open.Store(false)
		if _, err := c.ResumePlan(ctx, v.ID, facade.ResumeOptions{Reason: "INC-5 go on"}, anyone); err != nil {
			t.Fatal(err)
		}
		store.open.Store(true)
		// The two permits go to the paused tasks, which complete (their gate
		// is open); tenants that never started would wait at theirs.
		b.waitTask(c, "rf-0", task.StatusCompleted)
		b.waitTask(c, "rf-1", task.StatusCompleted)
		b.gates.openAll()
		b.waitPlan(c, v.ID, plan.StatusCompleted)
	})
}

// gatedCoord replaces b's coordinator with one, coord-a, whose claims are
// gated (open to begin with).
func gatedCoord(t *testing.T, b *bundle) (*facade.Coordinator, *gatedRedisClaims) {
	t.Helper()
	b.stopDefault()
	gate := &gatedRedisClaims{Redis: b.store}
	gate.open.Store(true)
	return newCoordinator(t, b, gate, b.locks, "coord-a", nil), gate
}

// gatedRedisClaims is a Redis store whose claims take nothing (they answer
// "full", the permits to release released) while open is false.
type gatedRedisClaims struct {
	*repository.Redis
	open atomic.Bool
}

func (g *gatedRedisClaims) ClaimTasks(ctx context.Context, planID string, release []plan.QueueEntry, lease time.Duration, want int) (plan.Claim, error) {
	if !g.open.Load() {
		if len(release) > 0 {
			if err := g.Redis.ReleasePermits(ctx, planID, release); err != nil {
				return plan.Claim{}, err
			}
		}
		return plan.Claim{Outcome: plan.ClaimFull}, nil
	}
	return g.Redis.ClaimTasks(ctx, planID, release, lease, want)
}
