package task_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/task"
)

// documented is the status table written out from the comment on
// task.transitions (docs/architecture.md plus the documented extensions), independently
// of the code under test.
var documented = map[task.Status][]task.Status{
	task.StatusPending:   {task.StatusRunning, task.StatusCancelled, task.StatusFailed},
	task.StatusRunning:   {task.StatusCompleted, task.StatusFailed, task.StatusPaused, task.StatusCancelled, task.StatusRunning},
	task.StatusPaused:    {task.StatusRunning, task.StatusCancelled, task.StatusPending},
	task.StatusFailed:    {task.StatusRunning, task.StatusPending},
	task.StatusCancelled: {task.StatusRunning, task.StatusPending},
	task.StatusCompleted: {},
}

func documentedAllows(from, to task.Status) bool {
	for _, s := range documented[from] {
		if s == to {
			return true
		}
	}
	return false
}

func TestStatuses(t *testing.T) {
	t.Parallel()
	if len(task.Statuses) != len(documented) {
		t.Fatalf("task.Statuses has %d entries, the documented table %d", len(task.Statuses), len(documented))
	}
	seen := map[task.Status]bool{}
	for _, s := range task.Statuses {
		if _, ok := documented[s]; !ok {
			t.Errorf("status %s is not in the documented table", s)
		}
		if seen[s] {
			t.Errorf("status %s listed twice", s)
		}
		seen[s] = true
		if !s.Valid() {
			t.Errorf("%s.Valid() = false", s)
		}
	}
	for _, s := range []task.Status{"", "pending", "DONE", "RUNNING "} {
		if s.Valid() {
			t.Errorf("%q.Valid() = true", s)
		}
	}
	active := map[task.Status]bool{task.StatusPending: true, task.StatusRunning: true, task.StatusPaused: true}
	for _, s := range task.Statuses {
		if got := s.Active(); got != active[s] {
			t.Errorf("%s.Active() = %v, want %v", s, got, active[s])
		}
	}
}

func TestCanTransition(t *testing.T) {
	t.Parallel()
	all := append([]task.Status{"", "BOGUS"}, task.Statuses...)
	for _, from := range all {
		for _, to := range all {
			want := documentedAllows(from, to)
			name := "Illegal"
			if want {
				name = "Legal"
			}
			t.Run(fmt.Sprintf("%s/%s_to_%s", name, from, to), func(t *testing.T) {
				t.Parallel()
				if got := task.CanTransition(from, to); got != want {
					t.Errorf("CanTransition(%q, %q) = %v, want %v", from, to, got, want)
				}
			})
		}
	}
}

var (
	zone = time.FixedZone("UTC+2", 2*3600)
	t0   = time.Date(2025, 3, 1, 10, 0, 0, 0, zone)
	now  = t0.Add(time.Hour)
)

// fixture returns a task in status s with every field set, so that a test
// can tell which fields a method changed.
func fixture(s task.Status) *task.Task {
	tk := task.New("task-01HZY3N5R8W7G3M7YV6X9Q2B1C", "plan-01HZY3N5R8W7G3M7YV6X9Q2B1D", "acme",
		map[string]any{"region": "eu"}, []string{"build", "deploy", "verify"}, t0)
	tk.Status = s
	tk.PauseRequested, tk.CancelRequested = true, true
	tk.StageIndex, tk.StageName = 1, "deploy"
	tk.LastError, tk.Reason = "old error", "old reason"
	tk.Owner, tk.Fence, tk.Seq = "node-a", 7, 12
	tk.HeartbeatAt = t0.Add(time.Minute).UTC()
	if s != task.StatusPending {
		tk.Attempt = 2
		tk.StartedAt = t0.Add(time.Second).UTC()
	}
	if s == task.StatusCompleted || s == task.StatusFailed || s == task.StatusCancelled {
		tk.FinishedAt = t0.Add(2 * time.Minute).UTC()
	}
	return tk
}

// op is one status-changing method call with the result it must have on a
// task when it is legal.
type op struct {
	name  string
	to    task.Status
	legal map[task.Status]string // from → "" (legal) ; missing → illegal
	// why is the Why expected on a refusal from a given status ("" = none).
	why   map[task.Status]string
	call  func(tk *task.Task) error
	apply func(want *task.Task, from task.Status)
}

func legalFrom(ss ...task.Status) map[task.Status]string {
	m := map[task.Status]string{}
	for _, s := range ss {
		m[s] = ""
	}
	return m
}

func ops() []op {
	u := now.UTC()
	rerunApply := func(mode task.RetryMode) func(*task.Task, task.Status) {
		return func(w *task.Task, _ task.Status) {
			w.Status = task.StatusRunning
			if mode == task.RetryNew {
				w.Attempt++
			}
			w.Owner, w.Fence, w.HeartbeatAt = "node-b", 9, u
			w.PauseRequested, w.CancelRequested = false, false
			w.StageIndex, w.StageName = 2, "verify"
			w.StageStartedAt = u
			w.LastError, w.Reason = "", ""
			w.FinishedAt = time.Time{}
			w.UpdatedAt = u
		}
	}
	return []op{
		{
			name: "Start", to: task.StatusRunning,
			legal: legalFrom(task.StatusPending),
			why: map[task.Status]string{
				task.StatusRunning: "only a pending task starts", task.StatusPaused: "only a pending task starts",
				task.StatusCompleted: "only a pending task starts", task.StatusFailed: "only a pending task starts",
				task.StatusCancelled: "only a pending task starts",
			},
			call: func(tk *task.Task) error { return tk.Start(now, "node-b", 9) },
			apply: func(w *task.Task, _ task.Status) {
				w.Status = task.StatusRunning
				w.Attempt = 1
				w.Owner, w.Fence, w.HeartbeatAt = "node-b", 9, u
				w.PauseRequested, w.CancelRequested = false, false
				w.StartedAt, w.UpdatedAt = u, u
				w.StageStartedAt = u
			},
		},
		{
			name: "RerunNew", to: task.StatusRunning,
			legal: legalFrom(task.StatusFailed, task.StatusPaused, task.StatusCancelled),
			why: map[task.Status]string{
				task.StatusRunning: "it is running on a live instance",
				task.StatusPending: "it has not started",
			},
			call:  func(tk *task.Task) error { return tk.Rerun(now, "node-b", 9, 2, "verify", task.RetryNew, false) },
			apply: rerunApply(task.RetryNew),
		},
		{
			name: "RerunNewOrphaned", to: task.StatusRunning,
			legal: legalFrom(task.StatusFailed, task.StatusPaused, task.StatusCancelled, task.StatusRunning),
			why:   map[task.Status]string{task.StatusPending: "it has not started"},
			call:  func(tk *task.Task) error { return tk.Rerun(now, "node-b", 9, 2, "verify", task.RetryNew, true) },
			apply: rerunApply(task.RetryNew),
		},
		{
			name: "RerunResume", to: task.StatusRunning,
			legal: legalFrom(task.StatusPaused),
			why: map[task.Status]string{
				task.StatusRunning:   "it is running on a live instance",
				task.StatusPending:   "it has not started",
				task.StatusFailed:    "only a paused task resumes",
				task.StatusCancelled: "only a paused task resumes",
				task.StatusCompleted: "only a paused task resumes",
			},
			call:  func(tk *task.Task) error { return tk.Rerun(now, "node-b", 9, 2, "verify", task.RetryResume, false) },
			apply: rerunApply(task.RetryResume),
		},
		{
			name: "RerunResumeOrphaned", to: task.StatusRunning,
			legal: legalFrom(task.StatusPaused),
			why: map[task.Status]string{
				task.StatusRunning:   "only a paused task resumes",
				task.StatusPending:   "it has not started",
				task.StatusFailed:    "only a paused task resumes",
				task.StatusCancelled: "only a paused task resumes",
				task.StatusCompleted: "only a paused task resumes",
			},
			call:  func(tk *task.Task) error { return tk.Rerun(now, "node-b", 9, 2, "verify", task.RetryResume, true) },
			apply: rerunApply(task.RetryResume),
		},
		{
			name: "Complete", to: task.StatusCompleted,
			legal: legalFrom(task.StatusRunning),
			call:  func(tk *task.Task) error { return tk.Complete(now) },
			apply: func(w *task.Task, _ task.Status) {
				w.Status = task.StatusCompleted
				w.StageIndex, w.StageName = 3, ""
				w.StageStartedAt = time.Time{}
				w.LastError, w.Reason = "", ""
				w.FinishedAt, w.UpdatedAt = u, u
			},
		},
		{
			name: "Fail", to: task.StatusFailed,
			legal: legalFrom(task.StatusRunning, task.StatusPending),
			call:  func(tk *task.Task) error { return tk.Fail(now, "boom") },
			apply: func(w *task.Task, _ task.Status) {
				w.Status = task.StatusFailed
				w.LastError = "boom"
				w.FinishedAt, w.UpdatedAt = u, u
			},
		},
		{
			name: "Pause", to: task.StatusPaused,
			legal: legalFrom(task.StatusRunning),
			call:  func(tk *task.Task) error { return tk.Pause(now, "operator") },
			apply: func(w *task.Task, _ task.Status) {
				w.Status = task.StatusPaused
				w.Reason = "operator"
				w.PauseRequested = false
				w.UpdatedAt = u
			},
		},
		{
			name: "Cancel", to: task.StatusCancelled,
			legal: legalFrom(task.StatusPending, task.StatusRunning, task.StatusPaused),
			call:  func(tk *task.Task) error { return tk.Cancel(now, "abandoned") },
			apply: func(w *task.Task, _ task.Status) {
				w.Status = task.StatusCancelled
				w.Reason = "abandoned"
				w.PauseRequested, w.CancelRequested = false, false
				w.FinishedAt, w.UpdatedAt = u, u
			},
		},
	}
}

func TestTaskMethods(t *testing.T) {
	t.Parallel()
	for _, o := range ops() {
		for _, from := range task.Statuses {
			_, legal := o.legal[from]
			if legal && !task.CanTransition(from, o.to) {
				t.Fatalf("%s from %s: the test expects a move the table forbids", o.name, from)
			}
			outcome := "Refused"
			if legal {
				outcome = "OK"
			}
			t.Run(fmt.Sprintf("%s/%s/From%s", o.name, outcome, from), func(t *testing.T) {
				t.Parallel()
				tk := fixture(from)
				before := tk.Clone()
				err := o.call(tk)
				if legal {
					if err != nil {
						t.Fatalf("%s from %s: %v", o.name, from, err)
					}
					want := before.Clone()
					o.apply(want, from)
					if !reflect.DeepEqual(tk, want) {
						t.Errorf("%s from %s:\n got %+v\nwant %+v", o.name, from, tk, want)
					}
					return
				}
				if !errors.Is(err, task.ErrIllegalTransition) {
					t.Fatalf("%s from %s: err = %v, want ErrIllegalTransition", o.name, from, err)
				}
				var te *task.TransitionError
				if !errors.As(err, &te) {
					t.Fatalf("%s from %s: err %T is not a *TransitionError", o.name, from, err)
				}
				if te.TaskID != before.ID || te.From != from || te.To != o.to {
					t.Errorf("TransitionError = %+v, want task %s %s→%s", te, before.ID, from, o.to)
				}
				if want := o.why[from]; te.Why != want {
					t.Errorf("Why = %q, want %q", te.Why, want)
				}
				if !strings.Contains(err.Error(), string(from)) || !strings.Contains(err.Error(), before.ID) {
					t.Errorf("error %q does not name the task and status", err)
				}
				if !reflect.DeepEqual(tk, before) {
					t.Errorf("refused %s changed the task:\n got %+v\nwant %+v", o.name, tk, before)
				}
			})
		}
	}
}

func TestStartKeepsAttemptOfARetriedPendingTask(t *testing.T) {
	t.Parallel()
	tk := fixture(task.StatusPending)
	tk.Attempt = 3
	if err := tk.Start(now, "node-b", 1); err != nil {
		t.Fatal(err)
	}
	if tk.Attempt != 3 {
		t.Errorf("Attempt = %d, want 3 (only a zero attempt becomes 1)", tk.Attempt)
	}
}

func TestRerun(t *testing.T) {
	t.Parallel()
	t.Run("OK/SetsStartedAtOfTaskThatNeverRan", func(t *testing.T) {
		t.Parallel()
		// A task that failed before it started (tenant locked) has no StartedAt.
		tk := task.New("task-1", "plan-1", "acme", nil, []string{"a"}, t0)
		if err := tk.Fail(t0, "TENANT_LOCKED"); err != nil {
			t.Fatal(err)
		}
		if err := tk.Rerun(now, "node-b", 3, 0, "a", task.RetryNew, false); err != nil {
			t.Fatal(err)
		}
		if !tk.StartedAt.Equal(now) || tk.StartedAt.Location() != time.UTC {
			t.Errorf("StartedAt = %v, want %v in UTC", tk.StartedAt, now)
		}
		if tk.Attempt != 1 {
			t.Errorf("Attempt = %d, want 1", tk.Attempt)
		}
	})
	t.Run("OK/AttemptCountsRetriesNotResumes", func(t *testing.T) {
		t.Parallel()
		tk := task.New("task-1", "plan-1", "acme", nil, []string{"a", "b"}, t0)
		steps := []struct {
			do      func() error
			attempt int
		}{
			{func() error { return tk.Start(now, "n", 1) }, 1},
			{func() error { return tk.Pause(now, "p") }, 1},
			{func() error { return tk.Rerun(now, "n", 2, 1, "b", task.RetryResume, false) }, 1},
			{func() error { return tk.Fail(now, "x") }, 1},
			{func() error { return tk.Rerun(now, "n", 3, 1, "b", task.RetryNew, false) }, 2},
			{func() error { return tk.Cancel(now, "c") }, 2},
			{func() error { return tk.Rerun(now, "n", 4, 0, "a", task.RetryNew, false) }, 3},
			{func() error { return tk.Rerun(now, "m", 5, 0, "a", task.RetryNew, true) }, 4},
			{func() error { return tk.Complete(now) }, 4},
		}
		for i, s := range steps {
			if err := s.do(); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if tk.Attempt != s.attempt {
				t.Fatalf("step %d: Attempt = %d, want %d", i, tk.Attempt, s.attempt)
			}
		}
		if tk.Fence != 5 || tk.Owner != "m" {
			t.Errorf("owner/fence = %s/%d, want m/5 from the takeover", tk.Owner, tk.Fence)
		}
	})
}

func TestTransitionErrorMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  *task.TransitionError
		want string
	}{
		{"WithoutWhy", &task.TransitionError{TaskID: "t1", From: task.StatusCompleted, To: task.StatusRunning},
			"task t1: cannot go from COMPLETED to RUNNING"},
		{"WithWhy", &task.TransitionError{TaskID: "t1", From: task.StatusRunning, To: task.StatusRunning, Why: "it is running on a live instance"},
			"task t1: cannot go from RUNNING to RUNNING: it is running on a live instance"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
			wrapped := fmt.Errorf("retry: %w", tt.err)
			if !errors.Is(wrapped, task.ErrIllegalTransition) {
				t.Error("wrapped TransitionError does not match ErrIllegalTransition")
			}
			if errors.Is(wrapped, task.ErrNotFound) || errors.Is(wrapped, task.ErrInvalid) {
				t.Error("TransitionError matches an unrelated sentinel")
			}
		})
	}
}

func TestOrphaned(t *testing.T) {
	t.Parallel()
	const lease = 30 * time.Second
	beat := t0.UTC()
	tests := []struct {
		name   string
		status task.Status
		now    time.Time
		want   bool
	}{
		{"Orphaned/SilentLongerThanLease", task.StatusRunning, beat.Add(lease + time.Nanosecond), true},
		{"Orphaned/SilentForHours", task.StatusRunning, beat.Add(3 * time.Hour), true},
		{"Live/SilentExactlyOneLease", task.StatusRunning, beat.Add(lease), false},
		{"Live/RecentBeat", task.StatusRunning, beat.Add(time.Second), false},
		{"Live/ClockBehind", task.StatusRunning, beat.Add(-time.Minute), false},
		{"Live/OtherZoneSameInstant", task.StatusRunning, beat.Add(lease).In(zone), false},
	}
	for _, s := range task.Statuses {
		if s != task.StatusRunning {
			tests = append(tests, struct {
				name   string
				status task.Status
				now    time.Time
				want   bool
			}{"NotRunning/" + string(s), s, beat.Add(time.Hour), false})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tk := fixture(tt.status)
			tk.HeartbeatAt = beat
			if got := tk.Orphaned(tt.now, lease); got != tt.want {
				t.Errorf("Orphaned(%v, %v) = %v, want %v", tt.now, lease, got, tt.want)
			}
		})
	}
	t.Run("Live/AfterBeat", func(t *testing.T) {
		t.Parallel()
		tk := fixture(task.StatusRunning)
		tk.HeartbeatAt = beat
		late := beat.Add(time.Hour)
		if !tk.Orphaned(late, lease) {
			t.Fatal("not orphaned before the beat")
		}
		tk.Beat(late.In(zone))
		if tk.Orphaned(late, lease) {
			t.Error("still orphaned after Beat")
		}
		if tk.HeartbeatAt.Location() != time.UTC {
			t.Errorf("HeartbeatAt in %v, want UTC", tk.HeartbeatAt.Location())
		}
	})
}

func TestNew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		stages    []string
		wantStage string
	}{
		{"FirstStageNamed", []string{"build", "deploy"}, "build"},
		{"NoStages", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tk := task.New("task-1", "plan-1", "acme", map[string]any{"k": 1}, tt.stages, t0)
			want := &task.Task{
				ID: "task-1", PlanID: "plan-1", TenantID: "acme", Status: task.StatusPending,
				Params: map[string]any{"k": 1}, TotalStages: len(tt.stages), StageName: tt.wantStage,
				CreatedAt: t0.UTC(), UpdatedAt: t0.UTC(),
			}
			if !reflect.DeepEqual(tk, want) {
				t.Errorf("New:\n got %+v\nwant %+v", tk, want)
			}
		})
	}
}

func TestEnterStage(t *testing.T) {
	t.Parallel()
	tk := fixture(task.StatusRunning)
	want := tk.Clone()
	tk.EnterStage(2, "verify", now)
	want.StageIndex, want.StageName = 2, "verify"
	want.UpdatedAt, want.HeartbeatAt = now.UTC(), now.UTC()
	want.StageStartedAt = now.UTC()
	if !reflect.DeepEqual(tk, want) {
		t.Errorf("EnterStage:\n got %+v\nwant %+v", tk, want)
	}
}

func TestClone(t *testing.T) {
	t.Parallel()
	t.Run("Independent", func(t *testing.T) {
		t.Parallel()
		orig := fixture(task.StatusRunning)
		keep := fixture(task.StatusRunning)
		c := orig.Clone()
		if !reflect.DeepEqual(c, orig) {
			t.Fatalf("Clone differs:\n got %+v\nwant %+v", c, orig)
		}
		c.Params["region"] = "us"
		c.Params["extra"] = true
		c.Status = task.StatusFailed
		c.Attempt = 99
		if err := c.Complete(now); err == nil {
			t.Fatal("Complete from FAILED accepted")
		}
		if !reflect.DeepEqual(orig, keep) {
			t.Errorf("changing the clone changed the original:\n got %+v\nwant %+v", orig, keep)
		}
	})
	t.Run("NilParamsStayNil", func(t *testing.T) {
		t.Parallel()
		tk := task.New("task-1", "plan-1", "acme", nil, nil, t0)
		if c := tk.Clone(); c.Params != nil {
			t.Errorf("Clone().Params = %#v, want nil", c.Params)
		}
	})
}
