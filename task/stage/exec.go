package stage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deploycoord/deploycoord/task"
)

// Settings of the exec kind.
const (
	// ExitTempFail is the exit status that makes an exec stage's failure
	// retryable (EX_TEMPFAIL from sysexits.h).
	ExitTempFail = 75
	// PathDefault is the PATH of an exec stage's command unless its env
	// sets one.
	PathDefault = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// EnvPrefix starts the names of the variables the stage sets itself.
	EnvPrefix = "DEPLOYCOORD_"

	maxArgs      = 256
	maxEnv       = 64
	maxArgRender = 32 << 10
	// waitDelay bounds how long Wait waits for output after the process
	// ended, when something it started still holds stdout or stderr open.
	waitDelay = 2 * time.Second
)

// ExecConfig is the config of the exec kind (the object under "exec").
type ExecConfig struct {
	// Argv is the command: Argv[0] an absolute path, spelled literally; the
	// other arguments are templates. No shell is involved.
	Argv []string `json:"argv"`
	// Env maps variable names to value templates, added to the command's
	// minimal environment (PATH and the DEPLOYCOORD_ variables).
	Env map[string]string `json:"env,omitempty"`
	// Dir is the working directory, an absolute path; default the server's.
	Dir string `json:"dir,omitempty"`
}

var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

type execKind struct{ allowed bool }

type envVar struct {
	name  string
	value *Template
}

type execStage struct {
	path      string
	args      []*Template
	env       []envVar
	dir       string
	maxOutput int64
}

func (k execKind) Compile(spec task.StageSpec, env Env) (Runnable, error) {
	if env.Source != SourceOperator {
		return nil, notAllowed("kind", "exec stages are allowed only in operator-defined pipelines")
	}
	if !k.allowed {
		return nil, notAllowed("kind", "exec stages are disabled on this server (the operator enables them with DEPLOYCOORD_ALLOW_EXEC=true)")
	}
	var c ExecConfig
	if err := DecodeConfig(spec, &c); err != nil {
		return nil, err
	}
	s := &execStage{maxOutput: cmpOrInt64(env.MaxOutputBytes, MaxOutputBytesDefault)}
	switch {
	case len(c.Argv) == 0:
		return nil, invalid("exec.argv", "required: the command and its arguments")
	case len(c.Argv) > maxArgs:
		return nil, invalid("exec.argv", "%d arguments, limit %d", len(c.Argv), maxArgs)
	}
	if err := checkPath("exec.argv[0]", c.Argv[0]); err != nil {
		return nil, err
	}
	s.path = c.Argv[0]
	for i, a := range c.Argv[1:] {
		field := fmt.Sprintf("exec.argv[%d]", i+1)
		if strings.IndexByte(a, 0) >= 0 {
			return nil, invalid(field, "NUL bytes are not allowed")
		}
		t, err := newTemplate(field, a, env, inputNames, MaxTemplateLen)
		if err != nil {
			return nil, err
		}
		s.args = append(s.args, t)
	}
	if len(c.Env) > maxEnv {
		return nil, invalid("exec.env", "%d variables, limit %d", len(c.Env), maxEnv)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Env)) {
		field := "exec.env[" + task.Quote(name) + "]"
		switch {
		case !envNameRe.MatchString(name):
			return nil, invalid(field, "not a valid variable name (want %s)", envNameRe)
		case strings.HasPrefix(strings.ToUpper(name), EnvPrefix):
			return nil, invalid(field, "%s variables are set by deploycoord", EnvPrefix)
		case strings.IndexByte(c.Env[name], 0) >= 0:
			return nil, invalid(field, "NUL bytes are not allowed")
		}
		t, err := newTemplate(field, c.Env[name], env, inputNames, MaxTemplateLen)
		if err != nil {
			return nil, err
		}
		s.env = append(s.env, envVar{name: name, value: t})
	}
	if c.Dir != "" {
		if err := checkPath("exec.dir", c.Dir); err != nil {
			return nil, err
		}
		s.dir = c.Dir
	}
	return s, nil
}

// checkPath requires a literal, absolute, clean-enough path.
func checkPath(field, p string) error {
	switch {
	case p == "":
		return invalid(field, "required")
	case len(p) > MaxTemplateLen:
		return invalid(field, "%d bytes, limit %d", len(p), MaxTemplateLen)
	case strings.ContainsFunc(p, isControl):
		return invalid(field, "control characters are not allowed")
	case strings.Contains(p, "{{"):
		return invalid(field, "must be literal, not a template")
	case !filepath.IsAbs(p):
		return invalid(field, "%s is not an absolute path", task.Quote(p))
	}
	return nil
}

// Run runs the command. Exit 0 is a Success, ExitTempFail a retryable
// Failure, any other end a non-retryable one; a done ctx kills the command's
// process group and is a retryable Failure.
func (s *execStage) Run(ctx context.Context, in Input) task.Result {
	args := make([]string, len(s.args))
	for i, t := range s.args {
		v, err := t.render(in, maxArgRender)
		if err != nil {
			return task.Failure(err.Error(), false)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return task.Failure(t.field+": rendered value holds a NUL byte", false)
		}
		args[i] = v
	}
	env := []string{
		"PATH=" + PathDefault,
		EnvPrefix + "TENANT_ID=" + in.TenantID,
		EnvPrefix + "PLAN_ID=" + in.PlanID,
		EnvPrefix + "TASK_ID=" + in.TaskID,
		EnvPrefix + "STAGE=" + in.Stage,
		EnvPrefix + "STAGE_INDEX=" + strconv.Itoa(in.StageIndex),
		EnvPrefix + "ATTEMPT=" + strconv.Itoa(in.Attempt),
		EnvPrefix + "STAGE_ATTEMPT=" + strconv.Itoa(in.StageAttempt),
		EnvPrefix + "IDEMPOTENCY_KEY=" + in.IdempotencyKey(),
	}
	for _, e := range s.env {
		v, err := e.value.render(in, maxArgRender)
		if err != nil {
			return task.Failure(err.Error(), false)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return task.Failure(e.value.field+": rendered value holds a NUL byte", false)
		}
		// exec.Cmd keeps the last of duplicate names, so env may override PATH.
		env = append(env, e.name+"="+v)
	}

	stdout := &capture{limit: s.maxOutput}
	stderr := &capture{limit: s.maxOutput}
	cmd := exec.CommandContext(ctx, s.path, args...)
	cmd.Env = env
	cmd.Dir = s.dir
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.WaitDelay = waitDelay
	killGroupOnCancel(cmd)

	err := cmd.Run()
	if err == nil || (errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState != nil && cmd.ProcessState.Success()) {
		return task.Success(stdout.outputs())
	}
	if ctx.Err() != nil {
		return task.Failure(fmt.Sprintf("exec %s: %v (process group killed)", s.path, ctx.Err()), true)
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return task.Failure(fmt.Sprintf("exec %s: %s", s.path, clean(err.Error(), 300)), false)
	}
	reason := fmt.Sprintf("exec %s: %s", s.path, exitErr.ProcessState.String())
	if stderr.buf.Len() > 0 {
		reason += "; stderr: " + tail(stderr.buf.Bytes(), excerptLen)
	}
	return task.Failure(reason, exitErr.ExitCode() == ExitTempFail)
}

// capture keeps the first limit bytes written to it and counts the rest.
// It never fails a write, so the command never blocks on a full pipe.
type capture struct {
	buf       bytes.Buffer
	limit     int64
	discarded int64
}

func (c *capture) Write(p []byte) (int, error) {
	room := c.limit - int64(c.buf.Len())
	if int64(len(p)) <= room {
		return c.buf.Write(p)
	}
	if room > 0 {
		c.buf.Write(p[:room])
	}
	c.discarded += int64(len(p)) - max(room, 0)
	return len(p), nil
}

// outputs are stdout as a JSON object if it is one, else {"stdout": text}
// (and "stdoutDiscardedBytes" when it was cut), nil when it is empty.
func (c *capture) outputs() map[string]any {
	b := bytes.TrimSpace(c.buf.Bytes())
	if len(b) == 0 && c.discarded == 0 {
		return nil
	}
	if c.discarded == 0 && b[0] == '{' {
		var obj map[string]any
		if json.Unmarshal(b, &obj) == nil && obj != nil {
			return obj
		}
	}
	out := map[string]any{"stdout": strings.ToValidUTF8(c.buf.String(), "\uFFFD")}
	if c.discarded > 0 {
		out["stdoutDiscardedBytes"] = c.discarded
	}
	return out
}

func cmpOrInt64(v, fallback int64) int64 {
	if v <= 0 {
		return fallback
	}
	return v
}
