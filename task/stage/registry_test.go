package stage_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
)

// echoKind is a custom kind: its config names an output key; it returns the
// tenant id under it.
type echoConfig struct {
	Key string `json:"key"`
}

func echoKind() stage.Kind {
	return stage.KindFunc(func(s task.StageSpec, env stage.Env) (stage.Runnable, error) {
		var c echoConfig
		if err := stage.DecodeConfig(s, &c); err != nil {
			return nil, err
		}
		if c.Key == "" {
			return nil, &stage.ConfigError{Field: "echo.key", Reason: "required", Err: stage.ErrInvalid}
		}
		return stage.RunFunc(func(_ context.Context, in stage.Input) task.Result {
			return task.Success(map[string]any{c.Key: in.TenantID, "source": env.Source.String()})
		}), nil
	})
}

func TestRegister(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		kind string
		k    stage.Kind
		want error
	}{
		{"OK", "echo", echoKind(), nil},
		{"ErrDuplicate", "http", echoKind(), stage.ErrDuplicate},
		{"ErrInvalidName", "bad kind!", echoKind(), stage.ErrInvalid},
		{"ErrInvalidEmptyName", "", echoKind(), stage.ErrInvalid},
		{"ErrInvalidNilKind", "nothing", nil, stage.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := stage.NewRegistry(stage.Options{})
			err := r.Register(tt.kind, tt.k)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Register(%q) = %v, want %v", tt.kind, err, tt.want)
			}
		})
	}
}

func TestRegistry_Kinds(t *testing.T) {
	t.Parallel()
	r := stage.NewRegistry(stage.Options{})
	if err := r.Register("echo", echoKind()); err != nil {
		t.Fatal(err)
	}
	if got, want := r.Kinds(), []string{"echo", "exec", "http", "noop", "sleep"}; !slices.Equal(got, want) {
		t.Fatalf("Kinds() = %v, want %v", got, want)
	}
}

func TestCompile_CustomKind(t *testing.T) {
	t.Parallel()
	r := stage.NewRegistry(stage.Options{InlineKinds: []string{"echo"}})
	if err := r.Register("echo", echoKind()); err != nil {
		t.Fatal(err)
	}
	t.Run("OK", func(t *testing.T) {
		t.Parallel()
		res := compile(t, r, spec("e", "echo", `{"key": "who"}`), stage.SourceInline).Run(context.Background(), input("e"))
		wantSuccess(t, res)
		if res.Outputs["who"] != "t-001" || res.Outputs["source"] != "inline" {
			t.Fatalf("outputs = %v", res.Outputs)
		}
	})
	t.Run("ErrInvalidUnknownField", func(t *testing.T) {
		t.Parallel()
		_, err := r.Compile(spec("e", "echo", `{"key": "who", "Key": "x"}`), stage.SourceOperator)
		wantConfigError(t, err, stage.ErrInvalid, "e", "echo", `unknown field "Key"`, "known: key")
	})
	t.Run("ErrInvalidFromKind", func(t *testing.T) {
		t.Parallel()
		_, err := r.Compile(spec("e", "echo", `{}`), stage.SourceOperator)
		wantConfigError(t, err, stage.ErrInvalid, "e", "echo.key: required")
	})
	t.Run("ErrNotAllowedInlineByDefault", func(t *testing.T) {
		t.Parallel()
		r := stage.NewRegistry(stage.Options{})
		if err := r.Register("echo", echoKind()); err != nil {
			t.Fatal(err)
		}
		_, err := r.Compile(spec("e", "echo", `{"key": "k"}`), stage.SourceInline)
		wantConfigError(t, err, stage.ErrNotAllowed, "e", `kind "echo" is not allowed in inline stages`, "allowed: http, noop, sleep")
		if _, err := r.Compile(spec("e", "echo", `{"key": "k"}`), stage.SourceOperator); err != nil {
			t.Fatalf("operator compile: %v", err)
		}
	})
	t.Run("PlainErrorWrappedAsInvalid", func(t *testing.T) {
		t.Parallel()
		r := stage.NewRegistry(stage.Options{})
		err := r.Register("broken", stage.KindFunc(func(task.StageSpec, stage.Env) (stage.Runnable, error) {
			return nil, errors.New("broken\nconfig")
		}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Compile(spec("b", "broken", ""), stage.SourceOperator)
		wantConfigError(t, err, stage.ErrInvalid, "b", `broken\nconfig`)
	})
}

func TestCompile_Kind(t *testing.T) {
	t.Parallel()
	r := stage.NewRegistry(stage.Options{})
	tests := []struct {
		name  string
		spec  task.StageSpec
		src   stage.Source
		want  error
		parts []string
	}{
		{"ErrInvalidUnknownKind", spec("s", "teleport", ""), stage.SourceOperator, stage.ErrInvalid,
			[]string{`unknown kind "teleport"`, "registered: exec, http, noop, sleep"}},
		{"ErrInvalidUnknownSource", spec("s", "noop", ""), stage.Source(7), stage.ErrInvalid, []string{"unknown source 7"}},
		{"ErrNotAllowedExecInline", spec("s", "exec", `{"argv": ["/bin/true"]}`), stage.SourceInline, stage.ErrNotAllowed,
			[]string{`kind "exec" is not allowed in inline stages`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := r.Compile(tt.spec, tt.src)
			wantConfigError(t, err, tt.want, tt.spec.Name, tt.parts...)
		})
	}
}

func TestCompile_InlineKindsEmptyAllowsNone(t *testing.T) {
	t.Parallel()
	r := stage.NewRegistry(stage.Options{InlineKinds: []string{}})
	_, err := r.Compile(spec("n", "noop", ""), stage.SourceInline)
	wantConfigError(t, err, stage.ErrNotAllowed, "n", "allowed: none")
}

func TestCompileAll(t *testing.T) {
	t.Parallel()
	r := stage.NewRegistry(stage.Options{})
	t.Run("OK", func(t *testing.T) {
		t.Parallel()
		runs, err := r.CompileAll([]task.StageSpec{
			spec("a", "noop", `{"outputs": {"n": 1}}`),
			spec("b", "sleep", `{"duration": "1ms"}`),
		}, stage.SourceInline)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 2 {
			t.Fatalf("len = %d, want 2", len(runs))
		}
		res := runs[0].Run(context.Background(), input("a"))
		wantSuccess(t, res)
		if res.Outputs["n"] != float64(1) {
			t.Fatalf("outputs = %v", res.Outputs)
		}
		wantSuccess(t, runs[1].Run(context.Background(), input("b")))
	})
	t.Run("ErrInvalidNamesIndexAndStage", func(t *testing.T) {
		t.Parallel()
		runs, err := r.CompileAll([]task.StageSpec{
			spec("a", "noop", ""),
			spec("b", "sleep", `{"duration": "soon"}`),
		}, stage.SourceInline)
		if runs != nil {
			t.Fatalf("runs = %v, want nil", runs)
		}
		wantConfigError(t, err, stage.ErrInvalid, "b", "stages[1]", "sleep.duration", `"soon"`)
	})
}

func TestCompile_PanicBecomesFailure(t *testing.T) {
	t.Parallel()
	r := stage.NewRegistry(stage.Options{})
	err := r.Register("boom", stage.KindFunc(func(task.StageSpec, stage.Env) (stage.Runnable, error) {
		return stage.RunFunc(func(context.Context, stage.Input) task.Result { panic("kaboom\x00") }), nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	res := compile(t, r, spec("x", "boom", ""), stage.SourceOperator).Run(context.Background(), input("x"))
	wantFailure(t, res, false, "stage x panicked", `kaboom\x00`)
}

func TestNoop(t *testing.T) {
	t.Parallel()
	r := stage.NewRegistry(stage.Options{MaxOutputBytes: 64})
	t.Run("OKNoConfig", func(t *testing.T) {
		t.Parallel()
		res := compile(t, r, spec("n", "noop", ""), stage.SourceInline).Run(context.Background(), input("n"))
		wantSuccess(t, res)
		if res.Outputs != nil {
			t.Fatalf("outputs = %v, want nil", res.Outputs)
		}
	})
	t.Run("OKOutputsFreshEachRun", func(t *testing.T) {
		t.Parallel()
		run := compile(t, r, spec("n", "noop", `{"outputs": {"m": {"k": "v"}}}`), stage.SourceInline)
		first := run.Run(context.Background(), input("n"))
		first.Outputs["m"].(map[string]any)["k"] = "changed"
		second := run.Run(context.Background(), input("n"))
		if got := second.Outputs["m"].(map[string]any)["k"]; got != "v" {
			t.Fatalf("second run sees %v, want v", got)
		}
	})
	t.Run("ErrInvalidOutputsTooLarge", func(t *testing.T) {
		t.Parallel()
		_, err := r.Compile(spec("n", "noop", `{"outputs": {"k": "`+strings.Repeat("x", 100)+`"}}`), stage.SourceInline)
		wantConfigError(t, err, stage.ErrInvalid, "n", "noop.outputs", "limit 64")
	})
}

func TestSleep(t *testing.T) {
	t.Parallel()
	r := stage.NewRegistry(stage.Options{})
	t.Run("OK", func(t *testing.T) {
		t.Parallel()
		wantSuccess(t, runFor(compile(t, r, spec("s", "sleep", `{"duration": "10ms"}`), stage.SourceInline), input("s"), 10*time.Second))
	})
	t.Run("TimeoutRetryable", func(t *testing.T) {
		t.Parallel()
		run := compile(t, r, spec("s", "sleep", `{"duration": "1h"}`), stage.SourceInline)
		wantFailure(t, runFor(run, input("s"), 20*time.Millisecond), true, context.DeadlineExceeded.Error())
	})
	t.Run("CancelRetryable", func(t *testing.T) {
		t.Parallel()
		run := compile(t, r, spec("s", "sleep", `{"duration": "1h"}`), stage.SourceInline)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		wantFailure(t, run.Run(ctx, input("s")), true, context.Canceled.Error())
	})
}
