package plan_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// documented is the plan status machine as the package comment draws it,
// written out independently of the code under test.
var documented = map[plan.Status][]plan.Status{
	plan.StatusCreated:   {plan.StatusRunning, plan.StatusCancelled},
	plan.StatusRunning:   {plan.StatusPaused, plan.StatusCancelled, plan.StatusCompleted, plan.StatusFailed},
	plan.StatusPaused:    {plan.StatusRunning, plan.StatusCancelled, plan.StatusCompleted, plan.StatusFailed},
	plan.StatusCompleted: {plan.StatusRunning},
	plan.StatusFailed:    {plan.StatusRunning},
	plan.StatusCancelled: {plan.StatusRunning},
}

var (
	zone = time.FixedZone("UTC+9", 9*3600)
	t0   = time.Date(2025, 6, 1, 8, 0, 0, 0, zone)
	now  = t0.Add(time.Hour)
)

func TestStatuses(t *testing.T) {
	t.Parallel()
	if len(plan.Statuses) != len(documented) {
		t.Fatalf("plan.Statuses has %d entries, the documented table %d", len(plan.Statuses), len(documented))
	}
	finished := map[plan.Status]bool{plan.StatusCompleted: true, plan.StatusFailed: true, plan.StatusCancelled: true}
	for _, s := range plan.Statuses {
		if _, ok := documented[s]; !ok {
			t.Errorf("status %s is not documented", s)
		}
		if !s.Valid() {
			t.Errorf("%s.Valid() = false", s)
		}
		if s.Finished() != finished[s] {
			t.Errorf("%s.Finished() = %v, want %v", s, s.Finished(), finished[s])
		}
	}
	for _, s := range []plan.Status{"", "created", "PENDING", "DONE"} {
		if s.Valid() || s.Finished() {
			t.Errorf("%q: Valid %v Finished %v, want false, false", s, s.Valid(), s.Finished())
		}
	}
}

func TestCanTransition(t *testing.T) {
	t.Parallel()
	all := append([]plan.Status{"", "BOGUS"}, plan.Statuses...)
	for _, from := range all {
		for _, to := range all {
			want := slices.Contains(documented[from], to)
			name := "Illegal"
			if want {
				name = "Legal"
			}
			t.Run(fmt.Sprintf("%s/%s_to_%s", name, from, to), func(t *testing.T) {
				t.Parallel()
				if got := plan.CanTransition(from, to); got != want {
					t.Errorf("CanTransition(%q, %q) = %v, want %v", from, to, got, want)
				}
			})
		}
	}
}

// fixture returns a plan in status s with every field set.
func fixture(s plan.Status) *plan.Plan {
	p := &plan.Plan{
		ID: "plan-01HZY3N5R8W7G3M7YV6X9Q2B1D", Name: "rollout", Status: s, Reason: "old reason",
		Stages:         []task.StageSpec{{Name: "build", Kind: "http"}, {Name: "deploy", Kind: "http"}},
		Params:         map[string]any{"k": "v"},
		MaxConcurrency: 5, OnTenantLocked: plan.LockFail, MaxFailed: 2, Owner: "node-a", TotalTasks: 10,
		CreatedAt: t0.UTC(), UpdatedAt: t0.UTC(),
	}
	if s != plan.StatusCreated {
		p.StartedAt = t0.Add(time.Second).UTC()
	}
	if s.Finished() {
		p.FinishedAt = t0.Add(time.Minute).UTC()
	}
	return p
}

func TestPlanMethods(t *testing.T) {
	t.Parallel()
	u := now.UTC()
	type method struct {
		name  string
		to    plan.Status
		legal []plan.Status
		call  func(*plan.Plan) error
		apply func(*plan.Plan)
	}
	methods := []method{
		{"Start", plan.StatusRunning, []plan.Status{plan.StatusCreated},
			func(p *plan.Plan) error { return p.Start(now, "node-b") },
			func(w *plan.Plan) {
				w.Status, w.Owner, w.Reason = plan.StatusRunning, "node-b", ""
				w.StartedAt, w.UpdatedAt = u, u
			}},
		{"Pause", plan.StatusPaused, []plan.Status{plan.StatusRunning},
			func(p *plan.Plan) error { return p.Pause(now, "maintenance window") },
			func(w *plan.Plan) {
				w.Status, w.Reason, w.UpdatedAt = plan.StatusPaused, "maintenance window", u
			}},
		{"Resume", plan.StatusRunning, []plan.Status{plan.StatusPaused, plan.StatusRunning},
			func(p *plan.Plan) error { return p.Resume(now, "node-b") },
			func(w *plan.Plan) {
				w.Status, w.Owner, w.Reason, w.UpdatedAt = plan.StatusRunning, "node-b", "", u
			}},
		{"Cancel", plan.StatusCancelled, []plan.Status{plan.StatusCreated, plan.StatusRunning, plan.StatusPaused},
			func(p *plan.Plan) error { return p.Cancel(now, "abandoned") },
			func(w *plan.Plan) {
				w.Status, w.Reason, w.FinishedAt, w.UpdatedAt, w.CancelledAt = plan.StatusCancelled, "abandoned", u, u, u
			}},
	}
	for _, m := range methods {
		for _, from := range plan.Statuses {
			legal := slices.Contains(m.legal, from)
			// Resume of a RUNNING plan is the documented takeover, outside the table.
			if legal && !plan.CanTransition(from, m.to) && !(m.name == "Resume" && from == plan.StatusRunning) {
				t.Fatalf("%s from %s: the test expects a move the table forbids", m.name, from)
			}
			outcome := "Refused"
			if legal {
				outcome = "OK"
			}
			t.Run(fmt.Sprintf("%s/%s/From%s", m.name, outcome, from), func(t *testing.T) {
				t.Parallel()
				p := fixture(from)
				before := p.Clone()
				err := m.call(p)
				if legal {
					if err != nil {
						t.Fatalf("%s from %s: %v", m.name, from, err)
					}
					want := before.Clone()
					m.apply(want)
					if !reflect.DeepEqual(p, want) {
						t.Errorf("%s from %s:\n got %+v\nwant %+v", m.name, from, p, want)
					}
					return
				}
				if !errors.Is(err, plan.ErrIllegalTransition) {
					t.Fatalf("%s from %s: err = %v, want ErrIllegalTransition", m.name, from, err)
				}
				var te *plan.TransitionError
				if !errors.As(err, &te) || te.PlanID != before.ID || te.From != from || te.To != m.to {
					t.Errorf("err = %#v, want *TransitionError %s %s→%s", err, before.ID, from, m.to)
				}
				if want := fmt.Sprintf("plan %s: cannot go from %s to %s", before.ID, from, m.to); err.Error() != want {
					t.Errorf("Error() = %q, want %q", err, want)
				}
				if !reflect.DeepEqual(p, before) {
					t.Errorf("refused %s changed the plan:\n got %+v\nwant %+v", m.name, p, before)
				}
			})
		}
	}
}

func TestApply(t *testing.T) {
	t.Parallel()
	u := now.UTC()
	tests := []struct {
		name   string
		from   plan.Status
		to     plan.Status
		reason string
		apply  func(*plan.Plan)
	}{
		{"Finishes/Completed", plan.StatusRunning, plan.StatusCompleted, "", func(w *plan.Plan) {
			w.Status, w.Reason, w.FinishedAt, w.UpdatedAt = plan.StatusCompleted, "", u, u
		}},
		{"Finishes/Failed", plan.StatusPaused, plan.StatusFailed, "3 of 10 tasks did not complete", func(w *plan.Plan) {
			w.Status, w.Reason, w.FinishedAt, w.UpdatedAt = plan.StatusFailed, "3 of 10 tasks did not complete", u, u
		}},
		{"Pauses/Threshold", plan.StatusRunning, plan.StatusPaused, plan.ReasonFailureThreshold, func(w *plan.Plan) {
			w.Status, w.Reason, w.UpdatedAt = plan.StatusPaused, plan.ReasonFailureThreshold, u
		}},
		{"Reopens/ClearsFinishedAt", plan.StatusFailed, plan.StatusRunning, "", func(w *plan.Plan) {
			w.Status, w.Reason, w.FinishedAt, w.UpdatedAt = plan.StatusRunning, "", time.Time{}, u
		}},
		{"Reopens/Cancelled", plan.StatusCancelled, plan.StatusRunning, "", func(w *plan.Plan) {
			w.Status, w.Reason, w.FinishedAt, w.UpdatedAt = plan.StatusRunning, "", time.Time{}, u
		}},
		{"Unchanged/SameStatusKeepsReason", plan.StatusPaused, plan.StatusPaused, "other", func(*plan.Plan) {}},
		{"Unchanged/Running", plan.StatusRunning, plan.StatusRunning, "", func(*plan.Plan) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := fixture(tt.from)
			want := p.Clone()
			tt.apply(want)
			p.Apply(now, tt.to, tt.reason)
			if !reflect.DeepEqual(p, want) {
				t.Errorf("Apply(%s, %q) from %s:\n got %+v\nwant %+v", tt.to, tt.reason, tt.from, p, want)
			}
		})
	}
}

func TestDerive(t *testing.T) {
	t.Parallel()
	type counts = plan.Counts
	const (
		pe = task.StatusPending
		ru = task.StatusRunning
		pa = task.StatusPaused
		co = task.StatusCompleted
		fa = task.StatusFailed
		ca = task.StatusCancelled
	)
	tests := []struct {
		name       string
		current    plan.Status
		c          counts
		total, max int
		from, to   task.Status
		want       plan.Status
		reason     string
	}{
		{"Completed/AllDone", plan.StatusRunning, counts{co: 4}, 4, 0, ru, co, plan.StatusCompleted, ""},
		{"Completed/FromPaused", plan.StatusPaused, counts{co: 4}, 4, 0, ru, co, plan.StatusCompleted, ""},
		{"Completed/ZeroEntriesIgnored", plan.StatusRunning, counts{co: 2, pe: 0, ru: 0, fa: 0}, 2, 1, ru, co, plan.StatusCompleted, ""},
		{"Completed/OnRecount", plan.StatusRunning, counts{co: 4}, 4, 0, "", "", plan.StatusCompleted, ""},
		{"Failed/OneFailed", plan.StatusRunning, counts{co: 3, fa: 1}, 4, 0, ru, fa, plan.StatusFailed, "1 of 4 tasks did not complete"},
		{"Failed/OneCancelled", plan.StatusRunning, counts{co: 3, ca: 1}, 4, 0, pe, ca, plan.StatusFailed, "1 of 4 tasks did not complete"},
		{"Failed/FromPaused", plan.StatusPaused, counts{fa: 2, ca: 1, co: 1}, 4, 1, pa, ca, plan.StatusFailed, "3 of 4 tasks did not complete"},
		{"Failed/OverThresholdButNothingActive", plan.StatusRunning, counts{fa: 3, co: 1}, 4, 1, ru, fa, plan.StatusFailed, "3 of 4 tasks did not complete"},
		{"Failed/AllFailed", plan.StatusRunning, counts{fa: 4}, 4, 0, ru, fa, plan.StatusFailed, "4 of 4 tasks did not complete"},
		{"Failed/OnRecount", plan.StatusPaused, counts{fa: 1, co: 3}, 4, 0, "", "", plan.StatusFailed, "1 of 4 tasks did not complete"},
		{"Running/PendingLeft", plan.StatusRunning, counts{co: 3, pe: 1}, 4, 0, ru, co, plan.StatusRunning, ""},
		{"Running/RunningLeft", plan.StatusRunning, counts{co: 3, ru: 1}, 4, 0, ru, co, plan.StatusRunning, ""},
		{"Running/PausedTaskLeft", plan.StatusRunning, counts{co: 3, pa: 1}, 4, 0, ru, co, plan.StatusRunning, ""},
		{"Running/AtThreshold", plan.StatusRunning, counts{fa: 2, pe: 2}, 4, 2, ru, fa, plan.StatusRunning, ""},
		{"Running/ThresholdZeroIsNone", plan.StatusRunning, counts{fa: 3, pe: 1}, 4, 0, ru, fa, plan.StatusRunning, ""},
		{"Running/ResumedNotPausedByStart", plan.StatusRunning, counts{fa: 2, ru: 1, pe: 1}, 4, 1, pe, ru, plan.StatusRunning, ""},
		{"Running/ResumedNotPausedByCompletion", plan.StatusRunning, counts{fa: 2, co: 1, pe: 1}, 4, 1, ru, co, plan.StatusRunning, ""},
		{"Running/ResumedNotPausedByCancel", plan.StatusRunning, counts{fa: 2, ca: 1, pe: 1}, 4, 1, pe, ca, plan.StatusRunning, ""},
		{"Running/NotPausedByRecount", plan.StatusRunning, counts{fa: 3, pe: 1}, 4, 1, "", "", plan.StatusRunning, ""},
		{"Running/NotPausedByFailedToFailed", plan.StatusRunning, counts{fa: 3, pe: 1}, 4, 1, fa, fa, plan.StatusRunning, ""},
		{"Paused/OverThreshold", plan.StatusRunning, counts{fa: 3, pe: 1}, 4, 2, ru, fa, plan.StatusPaused, plan.ReasonFailureThreshold},
		{"Paused/ThresholdOne", plan.StatusRunning, counts{fa: 2, ru: 1, pe: 7}, 10, 1, ru, fa, plan.StatusPaused, plan.ReasonFailureThreshold},
		{"Paused/NewFailureAfterResume", plan.StatusRunning, counts{fa: 3, ru: 1, pe: 6}, 10, 1, ru, fa, plan.StatusPaused, plan.ReasonFailureThreshold},
		{"Paused/FailedStartIsNewFailure", plan.StatusRunning, counts{fa: 2, pe: 2}, 4, 1, pe, fa, plan.StatusPaused, plan.ReasonFailureThreshold},
		{"Paused/StaysPausedOverThreshold", plan.StatusPaused, counts{fa: 3, pe: 1}, 4, 2, ru, fa, plan.StatusPaused, ""},
		{"Paused/StaysWithTasksLeft", plan.StatusPaused, counts{co: 1, pa: 2, pe: 1}, 4, 0, ru, pa, plan.StatusPaused, ""},
		{"Running/ReopenedCompletedByTakeover", plan.StatusCompleted, counts{co: 3, ru: 1}, 4, 0, ru, ru, plan.StatusRunning, ""},
		{"Running/ReopenedFailedByRetry", plan.StatusFailed, counts{fa: 1, ru: 1, co: 2}, 4, 0, fa, ru, plan.StatusRunning, ""},
		{"Running/ReopenedCancelledByRetry", plan.StatusCancelled, counts{ca: 3, ru: 1}, 4, 0, ca, ru, plan.StatusRunning, ""},
		{"Running/ReopenedCancelledByResume", plan.StatusCancelled, counts{ca: 3, ru: 1}, 4, 0, pa, ru, plan.StatusRunning, ""},
		{"Running/ReopenedCancelledByTakeover", plan.StatusCancelled, counts{ca: 3, ru: 1}, 4, 0, ru, ru, plan.StatusRunning, ""},
		{"Running/ReopenedOverThreshold", plan.StatusFailed, counts{fa: 3, ru: 1}, 4, 1, fa, ru, plan.StatusRunning, ""},
		{"Finished/CancelledStaysWhenIdleTaskCancelled", plan.StatusCancelled, counts{ru: 1, ca: 3}, 4, 0, pe, ca, plan.StatusCancelled, ""},
		{"Finished/CancelledStaysWhenPendingTaskStarts", plan.StatusCancelled, counts{ru: 2, ca: 2}, 4, 0, pe, ru, plan.StatusCancelled, ""},
		{"Finished/CancelledStaysWhenRunningTaskPauses", plan.StatusCancelled, counts{pa: 1, ru: 1, ca: 2}, 4, 0, ru, pa, plan.StatusCancelled, ""},
		{"Finished/CancelledStaysWhenRunningTaskFails", plan.StatusCancelled, counts{fa: 1, ru: 1, ca: 2}, 4, 1, ru, fa, plan.StatusCancelled, ""},
		{"Finished/StaysOnRecountWithRunning", plan.StatusCompleted, counts{co: 3, ru: 1}, 4, 0, "", "", plan.StatusCompleted, ""},
		{"Finished/StaysCompleted", plan.StatusCompleted, counts{co: 4}, 4, 0, ru, co, plan.StatusCompleted, ""},
		{"Finished/StaysFailed", plan.StatusFailed, counts{co: 3, fa: 1}, 4, 0, ru, co, plan.StatusFailed, ""},
		{"Finished/CancelledStaysWithPending", plan.StatusCancelled, counts{pe: 2, ca: 2}, 4, 0, pe, ca, plan.StatusCancelled, ""},
		{"Finished/CancelledStaysWithPaused", plan.StatusCancelled, counts{pa: 1, ca: 3}, 4, 0, ru, ca, plan.StatusCancelled, ""},
		{"Created/StaysWithPending", plan.StatusCreated, counts{pe: 4}, 4, 0, "", "", plan.StatusCreated, ""},
		{"Created/StaysWithNothingActive", plan.StatusCreated, counts{}, 4, 0, "", "", plan.StatusCreated, ""},
		{"Created/StaysOverThreshold", plan.StatusCreated, counts{fa: 3, pe: 1}, 4, 1, pe, fa, plan.StatusCreated, ""},
		{"Created/StaysOnRetry", plan.StatusCreated, counts{ru: 1, pe: 3}, 4, 0, fa, ru, plan.StatusCreated, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, reason := plan.Derive(tt.current, tt.c, tt.total, tt.max, tt.from, tt.to)
			if got != tt.want || reason != tt.reason {
				t.Errorf("Derive(%s, %v, %d, %d, %q → %q) = %s, %q; want %s, %q",
					tt.current, tt.c, tt.total, tt.max, tt.from, tt.to, got, reason, tt.want, tt.reason)
			}
			if got != tt.current && !plan.CanTransition(tt.current, got) {
				t.Errorf("Derive moves %s → %s, which the status machine forbids", tt.current, got)
			}
		})
	}
}

// TestDeriveStaysInStatusMachine checks every move Derive can make, over
// every plan status, every task move (and none) and a grid of counts, is one
// the status machine allows.
func TestDeriveStaysInStatusMachine(t *testing.T) {
	t.Parallel()
	moves := [][2]task.Status{{"", ""}}
	for _, from := range task.Statuses {
		for _, to := range task.Statuses {
			moves = append(moves, [2]task.Status{from, to})
		}
	}
	const total = 3
	for _, cur := range plan.Statuses {
		for _, mv := range moves {
			// Every way to spread total tasks over the six statuses.
			var spread func(i, left int, c plan.Counts)
			spread = func(i, left int, c plan.Counts) {
				if i == len(task.Statuses)-1 {
					c[task.Statuses[i]] = left
					for _, max := range []int{0, 1} {
						got, _ := plan.Derive(cur, c, total, max, mv[0], mv[1])
						if got != cur && !plan.CanTransition(cur, got) {
							t.Fatalf("Derive(%s, %v, %d, %d, %q → %q) = %s, which the status machine forbids",
								cur, c, total, max, mv[0], mv[1], got)
						}
					}
					return
				}
				for n := 0; n <= left; n++ {
					c[task.Statuses[i]] = n
					spread(i+1, left-n, c)
				}
			}
			spread(0, total, plan.Counts{})
		}
	}
}

func TestCounts(t *testing.T) {
	t.Parallel()
	c := plan.Counts{task.StatusPending: 1, task.StatusRunning: 2, task.StatusPaused: 3,
		task.StatusCompleted: 4, task.StatusFailed: 5, task.StatusCancelled: 6}
	if c.Active() != 6 || c.Total() != 21 {
		t.Errorf("Active = %d, Total = %d; want 6, 21", c.Active(), c.Total())
	}
	var empty plan.Counts
	if empty.Active() != 0 || empty.Total() != 0 {
		t.Errorf("nil Counts: Active %d, Total %d", empty.Active(), empty.Total())
	}
}

func TestIDs(t *testing.T) {
	t.Parallel()
	id := plan.NewID(t0)
	if !strings.HasPrefix(id, "plan-") || !plan.ValidID(id) {
		t.Fatalf("NewID = %q, not a valid plan id", id)
	}
	if later := plan.NewID(t0.Add(time.Millisecond)); later <= id {
		t.Errorf("later id %s sorts before %s", later, id)
	}
	for _, bad := range []string{"", "plan-", id[:len(id)-1], id + "A", "task-" + id[5:], strings.ToLower(id), id + "\n", "plan-0000000000000000000000000U"} {
		if plan.ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}

func TestStageLookup(t *testing.T) {
	t.Parallel()
	p := fixture(plan.StatusRunning)
	if got := p.StageNames(); !reflect.DeepEqual(got, []string{"build", "deploy"}) {
		t.Errorf("StageNames = %v", got)
	}
	for name, want := range map[string]int{"build": 0, "deploy": 1, "verify": -1, "": -1, "Build": -1} {
		if got := p.StageIndex(name); got != want {
			t.Errorf("StageIndex(%q) = %d, want %d", name, got, want)
		}
	}
	if got := (&plan.Plan{}).StageNames(); got == nil || len(got) != 0 {
		t.Errorf("StageNames of no stages = %#v, want empty", got)
	}
}

func TestClone(t *testing.T) {
	t.Parallel()
	p := fixture(plan.StatusRunning)
	c := p.Clone()
	if c == p || !reflect.DeepEqual(c, p) {
		t.Fatal("Clone is not an equal copy")
	}
	if err := c.Pause(now, "x"); err != nil {
		t.Fatal(err)
	}
	c.Owner = "other"
	if p.Status != plan.StatusRunning || p.Owner != "node-a" || p.Reason != "old reason" {
		t.Errorf("changing the clone changed the original: %+v", p)
	}
}
