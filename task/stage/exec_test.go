package stage_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
)

// execSpec builds an exec stage spec running /bin/sh -c script (with the
// extra argv templates after it as $1, $2, ...).
func execSpec(t *testing.T, name, script string, extra ...string) task.StageSpec {
	t.Helper()
	return jsonSpec(t, name, "exec", map[string]any{"argv": append([]string{"/bin/sh", "-c", script, "sh"}, extra...)})
}

func jsonSpec(t *testing.T, name, kind string, config map[string]any) task.StageSpec {
	t.Helper()
	s := httpSpec(t, name, config)
	s.Kind = kind
	return s
}

func TestExec_Exit(t *testing.T) {
	t.Parallel()
	r := stage.NewRegistry(stage.Options{AllowExec: true})
	tests := []struct {
		name      string
		spec      task.StageSpec
		success   bool
		retryable bool
		outputs   map[string]any
		parts     []string
	}{
		{"SuccessJSONStdout", execSpec(t, "x", `echo '{"id": "m-1", "n": 2}'`), true, false, map[string]any{"id": "m-1", "n": float64(2)}, nil},
		{"SuccessTextStdout", execSpec(t, "x", `echo hello`), true, false, map[string]any{"stdout": "hello\n"}, nil},
		{"SuccessJSONArrayIsText", execSpec(t, "x", `echo '[1]'`), true, false, map[string]any{"stdout": "[1]\n"}, nil},
		{"SuccessEmptyStdout", execSpec(t, "x", `true`), true, false, nil, nil},
		{"SuccessTemplatedArgs", execSpec(t, "x", `printf '%s|%s' "$1" "$2"`, "{{.TenantID}}-{{.Params.version}}", "{{.Outputs.push.id}} {{.IdempotencyKey}}"),
			true, false, map[string]any{"stdout": "t-001-1.2.3|abc " + input("x").IdempotencyKey()}, nil},
		{"FailureRetryable75", execSpec(t, "x", `echo "lock busy" >&2; exit 75`), false, true, nil, []string{"exit status 75", "stderr: lock busy"}},
		{"FailureExit1", execSpec(t, "x", `echo "migration failed" >&2; exit 1`), false, false, nil, []string{"exec /bin/sh: exit status 1", "stderr: migration failed"}},
		{"FailureExit2NoStderr", execSpec(t, "x", `exit 2`), false, false, nil, []string{"exit status 2"}},
		{"FailureKilledBySignal", execSpec(t, "x", `kill -TERM $$`), false, false, nil, []string{"signal: terminated"}},
		{"FailureStderrTail", execSpec(t, "x", `head -c 3000 /dev/zero | tr '\0' a >&2; printf 'the end\001' >&2; exit 1`), false, false, nil,
			[]string{`…aaa`, `the end\x01`}},
		{"FailureMissingCommand", jsonSpec(t, "x", "exec", map[string]any{"argv": []string{"/nonexistent/deploy"}}), false, false, nil,
			[]string{"/nonexistent/deploy", "no such file"}},
		{"FailureMissingParam", execSpec(t, "x", `true`, "{{.Params.nope}}"), false, false, nil, []string{"exec.argv[4]", `no entry for key "nope"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := runFor(compile(t, r, tt.spec, stage.SourceOperator), input("x"), 20*time.Second)
			if !tt.success {
				wantFailure(t, res, tt.retryable, tt.parts...)
				if len(res.Reason) > 1024 {
					t.Errorf("reason is %d bytes", len(res.Reason))
				}
				return
			}
			wantSuccess(t, res)
			if !equalJSON(res.Outputs, tt.outputs) {
				t.Fatalf("outputs = %#v, want %#v", res.Outputs, tt.outputs)
			}
		})
	}
}

func equalJSON(a, b map[string]any) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestExec_Env(t *testing.T) {
	t.Parallel()
	if os.Getenv(secretEnv) == "" {
		t.Fatalf("%s is not set in the test process", secretEnv)
	}
	r := stage.NewRegistry(stage.Options{AllowExec: true})
	run := compile(t, r, jsonSpec(t, "envs", "exec", map[string]any{
		"argv": []string{"/usr/bin/env"},
		"env":  map[string]string{"TARGET_VERSION": "{{.Params.version}}"},
		"dir":  "/",
	}), stage.SourceOperator)
	in := input("envs")
	res := runFor(run, in, 20*time.Second)
	wantSuccess(t, res)
	lines := strings.Split(strings.TrimSpace(res.Outputs["stdout"].(string)), "\n")
	slices.Sort(lines)
	want := []string{
		"DEPLOYCOORD_ATTEMPT=2",
		"DEPLOYCOORD_IDEMPOTENCY_KEY=" + in.IdempotencyKey(),
		"DEPLOYCOORD_PLAN_ID=" + in.PlanID,
		"DEPLOYCOORD_STAGE=envs",
		"DEPLOYCOORD_STAGE_ATTEMPT=3",
		"DEPLOYCOORD_STAGE_INDEX=1",
		"DEPLOYCOORD_TASK_ID=" + in.TaskID,
		"DEPLOYCOORD_TENANT_ID=t-001",
		"PATH=" + stage.PathDefault,
		"TARGET_VERSION=1.2.3",
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("env =\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(res.Outputs["stdout"].(string), "s3cret") {
		t.Fatal("the server's environment leaked into the command")
	}
}

func TestExec_EnvOverridesPath(t *testing.T) {
	t.Parallel()
	r := stage.NewRegistry(stage.Options{AllowExec: true})
	run := compile(t, r, jsonSpec(t, "p", "exec", map[string]any{
		"argv": []string{"/bin/sh", "-c", `printf %s "$PATH"`},
		"env":  map[string]string{"PATH": "/opt/tools/bin"},
	}), stage.SourceOperator)
	res := runFor(run, input("p"), 20*time.Second)
	wantSuccess(t, res)
	if res.Outputs["stdout"] != "/opt/tools/bin" {
		t.Fatalf("PATH = %v", res.Outputs["stdout"])
	}
}

func TestExec_TimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	r := stage.NewRegistry(stage.Options{AllowExec: true})
	// The shell starts a child that would outlive it, then waits.
	run := compile(t, r, execSpec(t, "slow", `sleep 120 & echo $! > "$1"; wait`, pidFile), stage.SourceOperator)
	start := time.Now()
	res := runFor(run, input("slow"), 500*time.Millisecond)
	wantFailure(t, res, true, context.DeadlineExceeded.Error(), "process group killed")
	if elapsed := time.Since(start); elapsed > 60*time.Second {
		t.Fatalf("Run returned after %s, the child's sleep was not cut short", elapsed)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the command did not start its child: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("child %d still runs after the stage timed out", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gone reports whether pid no longer runs (exited, or a zombie nobody reaped yet).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	// The state follows the parenthesized command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')
}

func TestExec_OutputTruncated(t *testing.T) {
	t.Parallel()
	r := stage.NewRegistry(stage.Options{AllowExec: true, MaxOutputBytes: 1000})
	t.Run("SuccessStdoutCut", func(t *testing.T) {
		t.Parallel()
		res := runFor(compile(t, r, execSpec(t, "big", `head -c 5000 /dev/zero | tr '\0' a`), stage.SourceOperator), input("big"), 20*time.Second)
		wantSuccess(t, res)
		if got := res.Outputs["stdout"].(string); got != strings.Repeat("a", 1000) {
			t.Errorf("stdout is %d bytes, want 1000", len(got))
		}
		if got := res.Outputs["stdoutDiscardedBytes"]; got != int64(4000) {
			t.Errorf("stdoutDiscardedBytes = %v, want 4000", got)
		}
	})
	t.Run("SuccessCutJSONIsText", func(t *testing.T) {
		t.Parallel()
		script := `printf '{"k": "'; head -c 5000 /dev/zero | tr '\0' a; printf '"}'`
		res := runFor(compile(t, r, execSpec(t, "big", script), stage.SourceOperator), input("big"), 20*time.Second)
		wantSuccess(t, res)
		if _, ok := res.Outputs["stdout"]; !ok {
			t.Fatalf("outputs = %v, want the cut text under stdout", res.Outputs)
		}
	})
	t.Run("FailureStderrCut", func(t *testing.T) {
		t.Parallel()
		res := runFor(compile(t, r, execSpec(t, "big", `head -c 100000 /dev/zero | tr '\0' e >&2; exit 3`), stage.SourceOperator), input("big"), 20*time.Second)
		wantFailure(t, res, false, "exit status 3", "…eee")
		if len(res.Reason) > 700 {
			t.Errorf("reason is %d bytes", len(res.Reason))
		}
	})
}

func TestExec_NotAllowed(t *testing.T) {
	t.Parallel()
	s := jsonSpec(t, "x", "exec", map[string]any{"argv": []string{"/bin/true"}})
	tests := []struct {
		name  string
		opts  stage.Options
		src   stage.Source
		parts []string
	}{
		{"ErrNotAllowedDisabled", stage.Options{}, stage.SourceOperator, []string{"exec stages are disabled on this server"}},
		{"ErrNotAllowedInline", stage.Options{AllowExec: true}, stage.SourceInline, []string{`kind "exec" is not allowed in inline stages`}},
		{"ErrNotAllowedInlineEvenIfListed", stage.Options{AllowExec: true, InlineKinds: []string{"exec", "noop"}}, stage.SourceInline,
			[]string{`kind "exec" is not allowed in inline stages`, "allowed: noop"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := stage.NewRegistry(tt.opts).Compile(s, tt.src)
			wantConfigError(t, err, stage.ErrNotAllowed, "x", tt.parts...)
		})
	}
	t.Run("OKAllowedOperator", func(t *testing.T) {
		t.Parallel()
		res := runFor(compile(t, stage.NewRegistry(stage.Options{AllowExec: true}), s, stage.SourceOperator), input("x"), 20*time.Second)
		wantSuccess(t, res)
	})
}
