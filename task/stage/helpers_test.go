package stage_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
)

// secretEnv is set in the test process; exec stages must not see it.
const secretEnv = "STAGE_TEST_SECRET"

func TestMain(m *testing.M) {
	os.Setenv(secretEnv, "s3cret")
	os.Exit(m.Run())
}

// spec builds a stage spec whose config is the JSON text config ("" for none).
func spec(name, kind, config string) task.StageSpec {
	s := task.StageSpec{Name: name, Kind: kind}
	if config != "" {
		s.Config = json.RawMessage(config)
	}
	return s
}

// input is a typical stage input.
func input(stageName string) stage.Input {
	return stage.Input{
		TenantID: "t-001", PlanID: "plan-01JD00000000000000000000PL", TaskID: "task-01JD00000000000000000000TK",
		Stage: stageName, StageIndex: 1, Attempt: 2, StageAttempt: 3,
		Params:  map[string]any{"version": "1.2.3", "count": float64(1000000)},
		Outputs: map[string]any{"push": map[string]any{"id": "abc"}},
	}
}

// compile compiles one spec or fails the test.
func compile(t *testing.T, r *stage.Registry, s task.StageSpec, src stage.Source) stage.Runnable {
	t.Helper()
	run, err := r.Compile(s, src)
	if err != nil {
		t.Fatalf("Compile(%s): %v", s.Name, err)
	}
	return run
}

// runFor runs with a timeout.
func runFor(run stage.Runnable, in stage.Input, d time.Duration) task.Result {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return run.Run(ctx, in)
}

// wantSuccess fails the test unless res is a success.
func wantSuccess(t *testing.T, res task.Result) {
	t.Helper()
	if res.Outcome != task.OutcomeSuccess {
		t.Fatalf("result = %+v, want success", res)
	}
}

// wantFailure fails the test unless res is a failure with that retryability
// whose reason holds every one of parts.
func wantFailure(t *testing.T, res task.Result, retryable bool, parts ...string) {
	t.Helper()
	if res.Outcome != task.OutcomeFailure || res.Retryable != retryable {
		t.Fatalf("result = %+v, want failure with retryable=%v", res, retryable)
	}
	for _, p := range parts {
		if !strings.Contains(res.Reason, p) {
			t.Errorf("reason %q does not contain %q", res.Reason, p)
		}
	}
}

// wantConfigError fails the test unless err is a *ConfigError matching
// sentinel that names the stage and holds every one of parts.
func wantConfigError(t *testing.T, err, sentinel error, stageName string, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want %v", sentinel)
	}
	var ce *stage.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v (%T), want a *stage.ConfigError", err, err)
	}
	if !errors.Is(err, sentinel) || !errors.Is(err, task.ErrInvalid) {
		t.Fatalf("err = %v, want it to match %v and task.ErrInvalid", err, sentinel)
	}
	if ce.Stage != stageName || !strings.Contains(err.Error(), `stage "`+stageName+`"`) {
		t.Errorf("err = %v, want it to name stage %q", err, stageName)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("err %q does not contain %q", err, p)
		}
	}
	if strings.ContainsFunc(err.Error(), func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		t.Errorf("err %q holds control characters", err)
	}
}
