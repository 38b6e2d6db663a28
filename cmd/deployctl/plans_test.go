package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/deploycoord/deploycoord/plan"
)

// decode parses a JSON document deployctl printed.
func decode(t *testing.T, out string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("output is not a JSON object: %v\n%s", err, out)
	}
	return m
}

func field(t *testing.T, out, name string) any {
	t.Helper()
	return decode(t, out)[name]
}

const yamlPlan = `# a rollout
name: yaml-rollout
stages:
  - name: prepare
    kind: noop
  - name: settle
    kind: sleep
    sleep: {duration: 10ms}
tenants:
  - tenantId: %s
    params: {version: 1.2.4}
params:
  version: 1.2.3
maxConcurrency: 2
`

func TestPlanCreate(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	tests := []struct {
		name   string
		file   string // file name; "" reads stdin
		body   string
		tenant string
	}{
		{name: "JSONFile", file: "plan.json", body: planJSON("json-rollout", noopStages, "t-json"), tenant: "t-json"},
		{name: "YAMLFile", file: "plan.yaml", body: fmt.Sprintf(yamlPlan, "t-yaml"), tenant: "t-yaml"},
		{name: "StdinYAML", body: fmt.Sprintf(yamlPlan, "t-stdin-yaml"), tenant: "t-stdin-yaml"},
		{name: "StdinJSON", body: planJSON("stdin-json", noopStages, "t-stdin-json"), tenant: "t-stdin-json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r result
			if tc.file == "" {
				r = s.cliIn(t, tc.body, "plan", "create", "-f", "-")
			} else {
				r = s.cli(t, "plan", "create", "-f", writeFile(t, tc.file, tc.body))
			}
			must(t, r, 0, "stdout", "PLAN", "plan-", "STAGES", "prepare", "PROGRESS")
			id := strings.Fields(strings.SplitN(r.stdout, "\n", 2)[0])[1]

			shown := s.cli(t, "plan", "show", id, "-o", "json")
			must(t, shown, 0, "stdout")
			p := decode(t, shown.stdout)
			if p["planId"] != id || p["totalTasks"] != 1.0 || p["counts"] == nil {
				t.Fatalf("plan show -o json = %v", p)
			}
			if strings.Contains(tc.name, "YAML") {
				// The YAML went over as JSON with its types: a string
				// version, a number maxConcurrency, a nested list.
				if p["name"] != "yaml-rollout" || p["maxConcurrency"] != 2.0 || fmt.Sprint(p["stages"]) != "[prepare settle]" ||
					fmt.Sprint(p["params"]) != "map[version:1.2.3]" {
					t.Fatalf("plan from YAML = %v", p)
				}
			}
			s.waitPlan(t, id, plan.StatusCompleted)
			if v := s.waitTask(t, tc.tenant, "COMPLETED"); strings.Contains(tc.name, "YAML") && fmt.Sprint(v.Params) != "map[version:1.2.4]" {
				t.Errorf("task params = %v, want the tenant's version 1.2.4", v.Params)
			}
		})
	}

	t.Run("JSONOutput", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "plan", "create", "-f", writeFile(t, "p.json", planJSON("out", noopStages, "t-out")), "-o", "json")
		must(t, r, 0, "stdout")
		if p := decode(t, r.stdout); p["name"] != "out" || p["status"] == nil {
			t.Fatalf("created plan = %v", p)
		}
	})
	t.Run("ErrServerRefusesSpec", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "plan", "create", "-f", writeFile(t, "p.json", planJSON("bad", `[{"name": "x", "kind": "warp"}]`, "t-bad")))
		must(t, r, 1, "stderr", "error: INVALID_ARGUMENT: ")
	})
	t.Run("ErrNotYAML", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "plan", "create", "-f", writeFile(t, "p.yaml", "name: [unclosed\n"))
		must(t, r, 2, "stderr", "is neither JSON nor valid YAML: yaml: line 1")
	})
	t.Run("ErrBadJSON", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "plan", "create", "-f", writeFile(t, "p.json", `{"name": `))
		must(t, r, 2, "stderr", "not valid JSON")
	})
	t.Run("ErrMissingFile", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "plan", "create", "-f", "/nonexistent/plan.yaml")
		must(t, r, 1, "stderr", "read plan file")
	})
	t.Run("ErrNoFile", func(t *testing.T) {
		t.Parallel()
		must(t, s.cli(t, "plan", "create"), 2, "stderr", "-f FILE is required")
	})
}

func TestPlanWatch(t *testing.T) {
	t.Parallel()
	s := newStack(t)

	t.Run("CompletedExit0", func(t *testing.T) {
		t.Parallel()
		spec := strings.Replace(planJSON("watched", sleepStages, "t-w1", "t-w2"), `"maxConcurrency": 4`, `"maxConcurrency": 1`, 1)
		r := s.cli(t, "plan", "create", "-f", writeFile(t, "p.json", spec), "--watch", "--interval", "20ms")
		must(t, r, 0, "stdout", "created plan plan-", "RUNNING", "COMPLETED [##############################] 100%  2/2 done  completed 2")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if last := lines[len(lines)-1]; !strings.Contains(last, "COMPLETED") {
			t.Fatalf("last line %q is not the finished plan\n%s", last, r)
		}
		// Not a terminal: one line per change, never the same line twice.
		for i := 1; i < len(lines); i++ {
			if lines[i] == lines[i-1] {
				t.Fatalf("line %d repeats the one before\n%s", i, r)
			}
		}
		if strings.Contains(r.stdout, "\r") || strings.Contains(r.stdout, "\033[") {
			t.Fatalf("redraw codes without a terminal\n%s", r)
		}
	})
	t.Run("FailedExit1", func(t *testing.T) {
		t.Parallel()
		s.fail("t-wf")
		id := s.create(t, planJSON("failing", s.pushStages(), "t-wf"))
		r := s.cli(t, "plan", "show", id, "--watch", "--interval", "20ms")
		must(t, r, 1, "stdout", id+" FAILED", "failed 1")
		// The plan first, as plan show prints it, then its progress.
		if !strings.HasPrefix(r.stdout, "PLAN         "+id+"\nNAME         failing\n") || strings.Index(r.stdout, "FINISHED") > strings.Index(r.stdout, id+" FAILED") {
			t.Fatalf("the plan's details do not come first\n%s", r)
		}
		must(t, r, 1, "stderr", "error: plan "+id+" finished FAILED")
	})
	t.Run("FinishedPlanReadOnce", func(t *testing.T) {
		t.Parallel()
		id := s.create(t, planJSON("read-once", sleepStages, "t-ro"))
		s.waitPlan(t, id, plan.StatusCompleted)
		before := len(s.requests("GET", "/v1/plans/"+id))
		r := s.cli(t, "plan", "show", id, "--watch", "--interval", "20ms")
		must(t, r, 0, "stdout", "PLAN         "+id, id+" COMPLETED")
		// The details and the first progress line come from one read.
		if n := len(s.requests("GET", "/v1/plans/"+id)) - before; n != 1 {
			t.Fatalf("plan show --watch of a finished plan read it %d times, want 1\n%s", n, r)
		}
	})
	t.Run("TerminalRedrawsInPlace", func(t *testing.T) {
		t.Parallel()
		id := s.create(t, planJSON("tty-watch", sleepStages, "t-tty"))
		var out, errb strings.Builder
		a := &app{stdout: &out, stderr: &errb, now: time.Now, tty: true,
			getenv: func(k string) string {
				return map[string]string{"DEPLOYCTL_SERVER": s.url, "DEPLOYCTL_TOKEN": testToken}[k]
			},
			g: globals{output: outputTable, timeout: timeoutDefault}}
		if err := a.setup(); err != nil {
			t.Fatal(err)
		}
		if err := a.watch(context.Background(), id, 20*time.Millisecond, nil); err != nil {
			t.Fatalf("watch: %v; stderr %s", err, errb.String())
		}
		got := out.String()
		draws := strings.Split(got, "\r\033[K")
		if len(draws) < 3 || draws[0] != "" || !strings.HasSuffix(got, "COMPLETED [####################] 100% 1/1 ok 1 failed 0 running 0\n") {
			t.Fatalf("terminal output = %q", got)
		}
		for _, d := range draws {
			// Fitted to the terminal (80 columns when its width is unknown).
			if n := utf8.RuneCountInString(strings.TrimSuffix(d, "\n")); n >= 80 {
				t.Fatalf("a redraw of %d columns on an 80-column terminal: %q", n, d)
			}
		}
		for _, d := range draws[1 : len(draws)-1] {
			if strings.Contains(d, "\n") {
				t.Fatalf("a redraw %q moved to a new line", d)
			}
		}
	})
	t.Run("JSONLines", func(t *testing.T) {
		t.Parallel()
		id := s.create(t, planJSON("json-watch", sleepStages, "t-wj"))
		r := s.cli(t, "plan", "show", "-o", "json", id, "--watch", "--interval", "20ms")
		must(t, r, 0, "stdout")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		for _, l := range lines {
			if p := decode(t, l); p["planId"] != id {
				t.Fatalf("line %q is not the plan", l)
			}
		}
		if last := decode(t, lines[len(lines)-1]); last["status"] != "COMPLETED" {
			t.Fatalf("last line = %v", last)
		}
	})
}

func TestPlanListAndTasks(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.fail("t-b1")
	done := s.create(t, planJSON("done", noopStages, "t-a1", "t-a2"))
	failed := s.create(t, planJSON("failed", s.pushStages(), "t-b1", "t-b2"))
	created := s.create(t, strings.Replace(planJSON("created", noopStages, "t-c1"), `"maxConcurrency"`, `"start": false, "maxConcurrency"`, 1))
	s.waitPlan(t, done, plan.StatusCompleted)
	s.waitPlan(t, failed, plan.StatusFailed)

	t.Run("ListAll", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "plan", "list")
		must(t, r, 0, "stdout", "PLAN", "STATUS", done, failed, created, "COMPLETED", "FAILED", "CREATED", "PROGRESS")
		// Each row shows its plan's progress from the listing's counts: no
		// GET of a single plan is made.
		for _, want := range []struct{ id, progress string }{
			{done, "[##########] 2/2 done"},
			{failed, "[##########] 2/2 done, 1 failed"},
			{created, "[..........] 0/1 done"},
		} {
			row := ""
			for _, l := range strings.Split(r.stdout, "\n") {
				if strings.HasPrefix(l, want.id) {
					row = l
				}
			}
			if !strings.Contains(row, want.progress) || strings.Contains(want.progress, "failed") != strings.Contains(row, "failed") {
				t.Errorf("row of %s = %q, want progress %q", want.id, row, want.progress)
			}
		}
		for _, id := range []string{done, failed, created} {
			if n := len(s.requests("GET", "/v1/plans/"+id)); n != 0 {
				t.Errorf("plan list read plan %s alone %d times", id, n)
			}
		}
		if r.stderr != "" {
			t.Fatalf("stderr = %q: no more pages expected", r.stderr)
		}
	})
	t.Run("ListStatusFilter", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "plan", "list", "--status", "failed")
		must(t, r, 0, "stdout", failed)
		if strings.Contains(r.stdout, done) || strings.Contains(r.stdout, created) {
			t.Fatalf("other plans listed\n%s", r)
		}
	})
	t.Run("ListOnePage", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "plan", "list", "--limit", "1")
		must(t, r, 0, "stderr", "more plans: add --cursor ")
		if n := strings.Count(r.stdout, "plan-"); n != 1 {
			t.Fatalf("%d plans on a page of 1\n%s", n, r)
		}
	})
	t.Run("ListFollowsCursor", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "plan", "list", "--limit", "1", "--all", "-o", "json")
		must(t, r, 0, "stdout")
		m := decode(t, r.stdout)
		if l := m["plans"].([]any); len(l) != 3 || m["nextCursor"] != "" {
			t.Fatalf("--all = %v", m)
		}
		if n := len(s.requests("GET", "/v1/plans")); n < 3 {
			t.Fatalf("%d GET /v1/plans for 3 pages of 1", n)
		}
	})
	t.Run("TasksStatusFilter", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "plan", "tasks", failed, "--status", "FAILED")
		must(t, r, 0, "stdout", "TENANT", "t-b1", "2/3 push", "HTTP 500")
		if strings.Contains(r.stdout, "t-b2") {
			t.Fatalf("completed task listed\n%s", r)
		}
		j := s.cli(t, "plan", "tasks", failed, "--status", "FAILED", "-o", "json")
		if l := decode(t, j.stdout)["tasks"].([]any); len(l) != 1 || l[0].(map[string]any)["tenantId"] != "t-b1" {
			t.Fatalf("tasks -o json = %v", l)
		}
	})
	t.Run("TasksOrphanedNone", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "plan", "tasks", failed, "--orphaned")
		must(t, r, 0, "stdout", "TENANT")
		if strings.Contains(r.stdout, "t-b") {
			t.Fatalf("no task is orphaned\n%s", r)
		}
		if got := s.requests("GET", "/v1/plans/"+failed+"/tasks"); len(got) == 0 {
			t.Fatal("no tasks request seen")
		}
	})
	t.Run("TasksAll", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "plan", "tasks", done, "--limit", "1", "--all", "-o", "json")
		if l := decode(t, r.stdout)["tasks"].([]any); len(l) != 2 {
			t.Fatalf("tasks --all = %v", l)
		}
		one := s.cli(t, "plan", "tasks", done, "--limit", "1")
		must(t, one, 0, "stderr", "more tasks")
	})
	t.Run("SearchAcrossPlans", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "tasks", "--status", "FAILED", "--orphaned", "--running-longer-than", "10m")
		must(t, r, 0, "stdout", "TENANT", "PLAN", "IN STAGE", "t-b1", failed, "HTTP 500")
		if strings.Contains(r.stdout, "t-a1") || strings.Contains(r.stdout, "t-b2") {
			t.Fatalf("a task that is not failed nor stuck is listed\n%s", r)
		}
		seen := s.requests("GET", "/v1/tasks")
		if len(seen) == 0 {
			t.Fatalf("requests %v", seen)
		}
		j := s.cli(t, "tasks", "--status", "COMPLETED,FAILED", "--plan", done, "-o", "json")
		if l := decode(t, j.stdout)["tasks"].([]any); len(l) != 2 {
			t.Fatalf("tasks of plan done -o json = %v", l)
		}
		all := s.cli(t, "tasks", "--status", "COMPLETED", "--status", "FAILED", "--limit", "1", "--all", "-o", "json")
		if l := decode(t, all.stdout)["tasks"].([]any); len(l) != 4 {
			t.Fatalf("tasks --all = %v", l)
		}
		one := s.cli(t, "tasks", "--status", "COMPLETED", "--limit", "1")
		must(t, one, 0, "stderr", "more tasks: add --cursor ")
		next := strings.TrimSuffix(strings.Fields(strings.TrimPrefix(one.stderr, "more tasks: add --cursor "))[0], ",")
		two := s.cli(t, "tasks", "--status", "COMPLETED", "--limit", "1", "--cursor", next)
		must(t, two, 0, "stdout", "t-")
		stage := s.cli(t, "tasks", "--stage", "push", "--status", "FAILED", "--since", "1h")
		must(t, stage, 0, "stdout", "t-b1")
	})
	t.Run("ErrUnknownPlan", func(t *testing.T) {
		t.Parallel()
		r := s.cli(t, "plan", "tasks", "plan-01JDQZV5X8M7R2K9C3B4N6P0QS")
		must(t, r, 3, "stderr", "error: NOT_FOUND: ")
		must(t, s.cli(t, "plan", "show", "plan-01JDQZV5X8M7R2K9C3B4N6P0QS"), 3, "stderr", "error: NOT_FOUND: ")
	})
}

func TestPlanActions(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	slow := `[{"name": "wait", "kind": "sleep", "sleep": {"duration": "1s"}}]`
	spec := strings.Replace(planJSON("actions", slow, "t-p1", "t-p2", "t-p3"), `"maxConcurrency": 4`, `"start": false, "maxConcurrency": 1`, 1)
	id := s.create(t, spec)

	must(t, s.cli(t, "plan", "start", id), 2, "stderr", "--reason is required")
	must(t, s.cli(t, "plan", "start", id, "--reason", "CHG-1 approved"), 0, "stdout", "STATUS", "RUNNING")
	must(t, s.cli(t, "plan", "pause", id, "--reason", "error rate up"), 0, "stdout", "PAUSED (error rate up)")
	s.waitPlan(t, id, plan.StatusPaused)
	r := s.cli(t, "plan", "resume", id, "--reason", "error rate fine", "--include-orphaned", "-o", "json")
	must(t, r, 0, "stdout")
	if p := decode(t, r.stdout); p["status"] != "RUNNING" {
		t.Fatalf("resumed plan = %v", p)
	}
	if got := s.requests("POST", "/v1/plans/"+id+"/resume"); len(got) != 1 || !strings.Contains(got[0].body, `"includeOrphaned":true`) {
		t.Fatalf("resume requests = %+v", got)
	}
	must(t, s.cli(t, "plan", "cancel", id, "--reason", "rolled back"), 0, "stdout", "CANCELLED")
	must(t, s.cli(t, "plan", "cancel", id, "--reason", "again"), 4, "stderr", "error: PLAN_FINISHED: ")
	s.idle(t)
	must(t, s.cli(t, "plan", "repair-counts", id), 2, "stderr", "--reason is required")
	r = s.cli(t, "plan", "repair-counts", id, "--reason", "check counts", "-o", "json")
	must(t, r, 0, "stdout")
	if p := decode(t, r.stdout); p["status"] != "CANCELLED" {
		t.Fatalf("repaired plan = %v", p)
	}
	if got := s.requests("POST", "/v1/plans/"+id+"/repair-counts"); len(got) != 1 || !strings.Contains(got[0].body, `"reason":"check counts"`) {
		t.Fatalf("repair requests = %+v", got)
	}
}

// TestPlanTasksReadsOnPastEmptyPages: a filtered listing of a big plan
// examines a bounded stretch a page (10 000 tasks), so a page may come back
// empty with more further on. deployctl printed an empty table and "more
// tasks: add --cursor 10000" (an operator session, a plan of 50 000 without
// a failure); it reads on to the first rows or the end.
func TestPlanTasksReadsOnPastEmptyPages(t *testing.T) {
	t.Parallel()
	const planID = "plan-01JDQZV5X8M7R2K9C3B4N6P0QS"
	var mu sync.Mutex
	var cursors []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/plans/"+planID+"/tasks" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		cursors = append(cursors, r.URL.Query().Get("cursor"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Query().Get("cursor") {
		case "":
			fmt.Fprint(w, `{"tasks":[],"nextCursor":"10000"}`)
		case "10000":
			fmt.Fprint(w, `{"tasks":[],"nextCursor":"20000"}`)
		default:
			fmt.Fprint(w, `{"tasks":[{"taskId":"task-01JDQZV5X8M7R2K9C3B4N6P0QT","tenantId":"t-late","planId":"`+planID+`","status":"FAILED","attempt":1}],"nextCursor":""}`)
		}
	}))
	t.Cleanup(srv.Close)
	env := map[string]string{"DEPLOYCTL_SERVER": srv.URL, "DEPLOYCTL_TOKEN": testToken}
	r := runCLI(t, context.Background(), env, "", "plan", "tasks", planID, "--status", "FAILED")
	must(t, r, 0, "stdout", "t-late")
	if strings.Contains(r.stderr, "more tasks") {
		t.Errorf("stderr %q: no more tasks after the end", r.stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(cursors, []string{"", "10000", "20000"}) {
		t.Errorf("cursors read %q, want \"\", 10000, 20000", cursors)
	}
}
