package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// noServer is an API that fails the test if deployctl calls it: usage
// errors must be caught before any request.
func noServer(t *testing.T) map[string]string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("unexpected request %s %s", r.Method, r.URL)
		http.Error(w, "no", http.StatusTeapot)
	}))
	t.Cleanup(srv.Close)
	return map[string]string{"DEPLOYCTL_SERVER": srv.URL, "DEPLOYCTL_TOKEN": testToken}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	const id = "plan-01JDQZV5X8M7R2K9C3B4N6P0QS"
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"NoCommand", nil, "no command given"},
		{"UnknownCommand", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"GroupWithoutSubcommand", []string{"plan"}, "plan needs a subcommand: create, show"},
		{"UnknownSubcommand", []string{"lock", "grab"}, `unknown command "lock grab"`},
		{"UnknownFlag", []string{"plan", "list", "--bogus"}, "flag provided but not defined: -bogus"},
		{"BadOutput", []string{"-o", "yaml", "plan", "list"}, `-o "yaml": want table, wide or json`},
		{"BadTimeout", []string{"--timeout", "0s", "plan", "list"}, "--timeout must be positive"},
		{"BadServer", []string{"--server", "ftp://example.com", "plan", "list"}, `--server "ftp://example.com": want http(s)://host`},
		{"PlanShowNoID", []string{"plan", "show"}, "a plan id is required"},
		{"PlanShowBadID", []string{"plan", "show", "plan-1"}, `plan id "plan-1" is not valid`},
		{"PlanShowTwoIDs", []string{"plan", "show", id, id}, "only one plan id"},
		{"PlanListBadStatus", []string{"plan", "list", "--status", "DONE"}, `--status "DONE" is not a plan status`},
		{"PlanListBadLimit", []string{"plan", "list", "--limit", "5000"}, "--limit 5000: want 1..1000"},
		{"PlanTasksBadStatus", []string{"plan", "tasks", id, "--status", "CREATED"}, "is not a task status"},
		{"TasksBadStatus", []string{"tasks", "--status", "DONE"}, `"DONE" is not a task status`},
		{"PlanTasksStatuses", []string{"plan", "tasks", id, "--status", "failed,CANCELLED"}, "plan tasks takes one status; for several, deployctl tasks --plan " + id + " --status FAILED,CANCELLED"},
		{"PlanTasksStatusesHostile", []string{"plan", "tasks", id, "--status", "FAILED,{x}"}, "is not a task status"},
		{"PlanTasksStatusTwice", []string{"plan", "tasks", id, "--status", "PAUSED", "--status", "RUNNING"}, "-status: given more than once"},
		{"PlanTasksOrphanedNotRunning", []string{"plan", "tasks", id, "--status", "FAILED", "--orphaned"}, "--orphaned lists RUNNING tasks: it cannot go with --status FAILED"},
		{"ReasonTwice", []string{"plan", "pause", id, "--reason", "a", "--reason", "b"}, "-reason: given more than once"},
		{"TasksStatusTwice", []string{"tasks", "--status", "FAILED", "--status", "failed"}, "FAILED is given twice"},
		{"TasksBadDuration", []string{"tasks", "--running-longer-than", "ten"}, "invalid value"},
		{"TasksNegativeDuration", []string{"tasks", "--running-longer-than", "-1m"}, "--running-longer-than must be positive"},
		{"TasksBadPlan", []string{"tasks", "--plan", "plan-{x}"}, `--plan "plan-{x}" is not a plan id`},
		{"TasksBadStage", []string{"tasks", "--stage", "a:b"}, `--stage "a:b" is not a stage name`},
		{"TasksBadSince", []string{"tasks", "--since", "yesterday"}, "--since \"yesterday\": want an RFC 3339 time"},
		{"TasksBadLimit", []string{"tasks", "--limit", "5000"}, "--limit 5000: want 1..1000"},
		{"TasksArgs", []string{"tasks", "FAILED"}, "unexpected argument"},
		{"PlanPauseNoReason", []string{"plan", "pause", id}, "--reason is required"},
		{"PlanCancelControlReason", []string{"plan", "cancel", id, "--reason", "a\x1b[2Jb"}, "--reason: must not contain control characters"},
		{"RetryNoMode", []string{"retry", "--tenant", "t-1", "--reason", "r"}, "choose a retry mode"},
		{"RetryTwoModes", []string{"retry", "--tenant", "t-1", "--from-checkpoint", "--skip", "--reason", "r"}, "choose exactly one retry mode, not --from-checkpoint and --skip"},
		{"RetryNoReason", []string{"retry", "--tenant", "t-1", "--from-start"}, "--reason is required"},
		{"RetryBadTenant", []string{"retry", "--tenant", "t 1/../x", "--from-checkpoint", "--reason", "r"}, `tenant id "t 1/../x" is not valid`},
		{"RetryNoTenant", []string{"retry", "--from-checkpoint", "--reason", "r"}, "--tenant is required"},
		{"RetryOutputsWithoutSkip", []string{"retry", "--tenant", "t-1", "--from-checkpoint", "--outputs", "{}", "--reason", "r"}, "--outputs goes with --skip only"},
		{"RetryOutputsNotObject", []string{"retry", "--tenant", "t-1", "--skip", "--outputs", "[1]", "--reason", "r"}, "--outputs must be a JSON object"},
		{"RetryBadStage", []string{"retry", "--tenant", "t-1", "--from-stage", "a b", "--reason", "r"}, "is not a valid stage name"},
		{"RetryNegativeAttempt", []string{"retry", "--tenant", "t-1", "--from-start", "--expected-attempt", "-1", "--reason", "r"}, "--expected-attempt must be positive"},
		{"StatusNothing", []string{"status"}, "--tenant is required"},
		{"StatusBoth", []string{"status", "--tenant", "t-1", "--tenants-file", "f"}, "not both"},
		{"StatusEmptyFile", []string{"status", "--tenants-file", "-"}, "lists no tenant ids"},
		{"TimelineBadTenant", []string{"timeline", "--tenant", "{t}"}, "is not valid"},
		{"LockReleaseNoFence", []string{"lock", "release", "--tenant", "t-1", "--reason", "r"}, "--expected-fence N is required"},
		{"TaskPauseNoReason", []string{"task", "pause", "--tenant", "t-1"}, "--reason is required"},
		{"EventsBadCursor", []string{"events", "--after", "a b"}, "is not a cursor"},
		{"EventsWordCursor", []string{"events", "--after", "abc"}, "is not a cursor"},
		{"EventsBadType", []string{"events", "--type", "task failed"}, "is not an event type"},
		{"EventsUpperType", []string{"events", "--type", "Task.Failed"}, "is not an event type"},
		{"EventsBadPlan", []string{"events", "--plan", "p"}, "plan id \"p\" is not valid"},
		{"ExtraArgument", []string{"status", "--tenant", "t-1", "extra"}, `unexpected arguments ["extra"]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, context.Background(), noServer(t), "", tc.args...)
			must(t, r, 2, "stderr", "error: ", tc.want)
			if r.stdout != "" && tc.name != "GroupWithoutSubcommand" {
				t.Fatalf("stdout on a usage error:\n%s", r)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"Top", []string{"-h"}, []string{"commands:", "plan create", "lock release", "events", "-server", "DEPLOYCTL_TOKEN", "exit codes"}},
		{"HelpCommand", []string{"help"}, []string{"commands:"}},
		{"PlanShow", []string{"plan", "show", "-h"}, []string{"usage: deployctl plan show ID [--watch]", "-watch", "example:\n  deployctl plan show plan-"}},
		{"HelpRetry", []string{"help", "retry"}, []string{"-from-checkpoint", "-expected-attempt", "-idempotency-key", "example:"}},
		{"Group", []string{"plan", "-h"}, []string{"usage: deployctl plan {create|show|list|tasks|start|pause|resume|cancel|repair-counts|retry}"}},
		// A token given before -h must not show as a flag default.
		{"TokenHiddenTop", []string{"--token", testToken, "-h"}, []string{"-token value", "never printed"}},
		{"TokenHiddenCommand", []string{"--token", testToken, "status", "-h"}, []string{"global flags: --server, --token"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, context.Background(), noServer(t), "", tc.args...)
			must(t, r, 0, "stdout", tc.want...)
		})
	}
	t.Run("EveryCommandHasHelp", func(t *testing.T) {
		t.Parallel()
		for _, c := range commandTable() {
			r := runCLI(t, context.Background(), noServer(t), "", append(strings.Fields(c.name), "-h")...)
			must(t, r, 0, "stdout", "usage: deployctl "+c.name, "example:\n  deployctl "+c.name)
			// The flags' own values print (not the wrappers that refuse a
			// repeated flag while parsing, whose zero value panics there).
			if strings.Contains(r.stdout+r.stderr, "panic") {
				t.Errorf("%s -h:\n%s%s", c.name, r.stdout, r.stderr)
			}
		}
		// ... with their types and defaults.
		r := runCLI(t, context.Background(), noServer(t), "", "plan", "tasks", "-h")
		must(t, r, 0, "stdout", "-limit int", "-cursor string")
		r = runCLI(t, context.Background(), noServer(t), "", "events", "-h")
		must(t, r, 0, "stdout", "(default 100)")
	})
}

func TestToken(t *testing.T) {
	t.Parallel()
	s := newStack(t)

	t.Run("SentAsBearer", func(t *testing.T) {
		t.Parallel()
		must(t, s.cli(t, "-v", "plan", "list"), 0, "stderr", "> GET "+s.url+"/v1/plans: 200 OK in ")
		for _, r := range s.requests("GET", "/v1/plans") {
			if r.auth != "Bearer "+testToken {
				t.Fatalf("Authorization = %q", r.auth)
			}
		}
	})
	t.Run("FlagBeatsEnv", func(t *testing.T) {
		t.Parallel()
		env := map[string]string{"DEPLOYCTL_SERVER": s.url, "DEPLOYCTL_TOKEN": "wrong-env-token"}
		r := runCLI(t, context.Background(), env, "", "status", "--tenant", "t-flag", "--token", testToken)
		must(t, r, 3, "stderr", "error: NOT_FOUND: ")
	})
	t.Run("ErrWrongToken", func(t *testing.T) {
		t.Parallel()
		const wrong = "wrong-token-xyz"
		env := map[string]string{"DEPLOYCTL_SERVER": s.url}
		r := runCLI(t, context.Background(), env, "", "-v", "--token", wrong, "lock", "show", "--tenant", "t-wrong")
		must(t, r, 1, "stderr", "error: UNAUTHENTICATED: missing or unknown bearer token")
		if strings.Contains(r.stdout+r.stderr, wrong) {
			t.Fatalf("the wrong token was printed\n%s", r)
		}
		got := s.requests("GET", "/v1/tenants/t-wrong/lock")
		if len(got) != 1 || got[0].auth != "Bearer "+wrong {
			t.Fatalf("requests = %+v", got)
		}
	})
	t.Run("ErrNoToken", func(t *testing.T) {
		t.Parallel()
		r := runCLI(t, context.Background(), map[string]string{"DEPLOYCTL_SERVER": s.url}, "", "lock", "show", "--tenant", "t-anon")
		must(t, r, 1, "stderr", "UNAUTHENTICATED")
		if got := s.requests("GET", "/v1/tenants/t-anon/lock"); len(got) != 1 || got[0].auth != "" {
			t.Fatalf("requests = %+v", got)
		}
	})
	t.Run("ErrTokenWithNewline", func(t *testing.T) {
		t.Parallel()
		r := runCLI(t, context.Background(), noServer(t), "", "--token", "abc\ndef", "plan", "list")
		must(t, r, 2, "stderr", "holds spaces or control characters")
		if strings.Contains(r.stderr, "abc") {
			t.Fatalf("token echoed\n%s", r)
		}
	})
}

func TestServerDown(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	r := runCLI(t, context.Background(), map[string]string{"DEPLOYCTL_SERVER": url, "DEPLOYCTL_TOKEN": testToken}, "", "-v", "plan", "list")
	must(t, r, 1, "stderr", "error: call the API: Get \""+url+"/v1/plans", "connection refused")
}

func TestNotProblemAnswer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	r := runCLI(t, context.Background(), map[string]string{"DEPLOYCTL_SERVER": srv.URL}, "", "plan", "list")
	must(t, r, 1, "stderr", "error: HTTP 502 Bad Gateway: <html>bad gateway</html>")
}

func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	r := runCLI(t, context.Background(), map[string]string{"DEPLOYCTL_SERVER": srv.URL}, "", "--timeout", "100ms", "plan", "list")
	must(t, r, 1, "stderr", "no answer within 100ms (--timeout)\n")
	// A change cut by the timeout may still be done by the server (a bulk
	// retry went on through 4 448 tenants after "no answer within 3s").
	r = runCLI(t, context.Background(), map[string]string{"DEPLOYCTL_SERVER": srv.URL}, "", "--timeout", "100ms",
		"plan", "retry", "plan-01JDQZV5X8M7R2K9C3B4N6P0QS", "--status", "FAILED", "--reason", "INC-9", "--yes")
	must(t, r, 1, "stderr", "no answer within 100ms (--timeout); the server may have done it, or be doing it still")
}

func TestAgo(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	tests := []struct {
		name string
		t    *time.Time
		want string
	}{
		{"Nil", nil, "-"},
		{"Zero", &time.Time{}, "-"},
		{"JustNow", at(-300 * time.Millisecond), "just now"},
		{"Seconds", at(-42 * time.Second), "42s ago"},
		{"Minutes", at(-3*time.Minute - 20*time.Second), "3m ago"},
		{"Hours", at(-5 * time.Hour), "5h ago"},
		{"Days", at(-72 * time.Hour), "3d ago"},
		{"Future", at(5 * time.Second), "in 5s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := ago(tc.t, now); got != tc.want {
				t.Fatalf("ago = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestClean(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"Plain", "stage push: HTTP 500", "stage push: HTTP 500"},
		{"Escape", "a\x1b[31mred", "a?[31mred"},
		{"Newlines", "line1\nline2\tx", "line1 line2 x"},
		{"BidiOverride", "abc\u202edef", "abc?def"},
		{"InvalidUTF8", "a\xffb", "a?b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := clean(tc.in); got != tc.want {
				t.Fatalf("clean(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	if got := cell(strings.Repeat("x", 200)); len([]rune(got)) != maxCell || !strings.HasSuffix(got, "…") {
		t.Fatalf("cell of 200 = %q", got)
	}
}

// aliasBomb is YAML whose aliases expand to 10^9 values.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

func TestPlanBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file, in, want, err string
	}{
		{name: "JSONAsIs", file: "p.json", in: ` {"name": "a", "x": 1.50} `, want: `{"name": "a", "x": 1.50}`},
		{name: "YAMLConverted", file: "p.yaml", in: "name: a\nn: 3\nok: true\nlist: [1, b]\nnested: {k: v}\n", want: `{"list":[1,"b"],"n":3,"name":"a","nested":{"k":"v"},"ok":true}`},
		{name: "YAMLNumberKeys", file: "p.yml", in: "codes:\n  200: ok\n", want: `{"codes":{"200":"ok"}}`},
		{name: "StdinJSONSniffed", file: "-", in: `{"a": 1}`, want: `{"a": 1}`},
		{name: "StdinYAMLSniffed", file: "-", in: "a: 1\n", want: `{"a":1}`},
		{name: "YAMLTimestampStaysString", file: "p.yaml", in: "day: 2026-11-21\n", want: `{"day":"2026-11-21"}`},
		{name: "YAMLAnchorsAndMerge", file: "p.yaml", in: "base: &b {kind: noop, timeout: 5s}\nstage:\n  <<: *b\n  name: x\n  timeout: 9s\n", want: `{"base":{"kind":"noop","timeout":"5s"},"stage":{"kind":"noop","name":"x","timeout":"9s"}}`},
		{name: "ErrAliasBomb", file: "p.yaml", in: aliasBomb(), err: "aliases expand too far"},
		{name: "BOM", file: "p.json", in: "\xef\xbb\xbf{}", want: `{}`},
		{name: "ErrEmpty", file: "p.yaml", in: "  \n", err: "is empty"},
		{name: "ErrJSONNotObject", file: "p.json", in: `[1]`, err: "must hold a JSON object"},
		{name: "ErrYAMLNotMapping", file: "p.yaml", in: "- a\n", err: "must hold a YAML mapping"},
		{name: "ErrTwoDocuments", file: "p.yaml", in: "a: 1\n---\nb: 2\n", err: "more than one YAML document"},
		{name: "ErrBadJSON", file: "p.json", in: `{"a": }`, err: "not valid JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := planBody(tc.file, []byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("planBody = %s, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestTransient(t *testing.T) {
	t.Parallel()
	var syn json.SyntaxError
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"Unavailable", &apiError{Status: 503, Code: "UNAVAILABLE"}, true},
		{"BadGateway", &apiError{Status: 502}, true},
		{"TooManyRequests", &apiError{Status: 429}, true},
		{"Network", fmt.Errorf("call the API: %w", errors.New("connection refused")), true},
		{"Conflict", &apiError{Status: 409, Code: "TASK_RUNNING"}, false},
		{"Unauthenticated", &apiError{Status: 401, Code: "UNAUTHENTICATED"}, false},
		{"BadAnswer", fmt.Errorf("GET /v1/plans/x: %w", &syn), false},
		{"Interrupted", fmt.Errorf("GET /v1/plans/x: %w", context.Canceled), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := transient(tc.err); got != tc.want {
				t.Fatalf("transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
