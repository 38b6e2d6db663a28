package stage

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/deploycoord/deploycoord/task"
)

// Input is what one run of a stage sees. Templates in a stage's config render
// over it: {{.TenantID}}, {{.Params.version}}, {{.Outputs.push.id}}, ...
type Input struct {
	TenantID string
	PlanID   string
	TaskID   string
	// Stage is the stage's name and StageIndex its place in the pipeline.
	Stage      string
	StageIndex int
	// Attempt is the task's attempt: 1 plus the number of manual retries.
	Attempt int
	// StageAttempt is the 1-based attempt of this stage within the task
	// attempt (local retries under the stage's retry policy).
	StageAttempt int
	// Params are the tenant's params, the plan's defaults merged in.
	Params map[string]any
	// Outputs holds the outputs of earlier stages, keyed by stage name.
	Outputs map[string]any
}

// IdempotencyKey identifies this run of the stage: "<taskId>/<stage>/<attempt>.<stageAttempt>",
// e.g. "task-01JD.../push-config/1.2". It is the same for the same attempt and
// differs between attempts. The http kind sends it as the Idempotency-Key
// header, the exec kind as DEPLOYCOORD_IDEMPOTENCY_KEY; templates can use
// {{.IdempotencyKey}}.
func (in Input) IdempotencyKey() string {
	return fmt.Sprintf("%s/%s/%d.%d", in.TaskID, in.Stage, in.Attempt, in.StageAttempt)
}

// Runnable is a compiled stage. Run runs one attempt. It honours ctx (the
// runner puts the stage's timeout on it) and reports trouble as a Failure
// rather than panicking.
type Runnable interface {
	Run(ctx context.Context, in Input) task.Result
}

// RunFunc adapts a function to Runnable.
type RunFunc func(ctx context.Context, in Input) task.Result

// Run calls f.
func (f RunFunc) Run(ctx context.Context, in Input) task.Result { return f(ctx, in) }

// Kind compiles the specs of one stage kind. Compile validates spec.Config
// strictly and returns an error wrapping ErrInvalid (bad config) or
// ErrNotAllowed (not allowed from env.Source); a *ConfigError carries the
// offending field. Compile is called once per spec; the Runnable it returns
// may be run many times, concurrently.
type Kind interface {
	Compile(spec task.StageSpec, env Env) (Runnable, error)
}

// KindFunc adapts a function to Kind.
type KindFunc func(spec task.StageSpec, env Env) (Runnable, error)

// Compile calls f.
func (f KindFunc) Compile(spec task.StageSpec, env Env) (Runnable, error) { return f(spec, env) }

// Source says where a stage spec comes from.
type Source int

const (
	// SourceInline: the stage came inline in a plan request, from a caller
	// the server trusts less. Only Options.InlineKinds are allowed; http
	// stages only reach Options.InlineHTTPHosts; exec is refused. It is the
	// zero value, so a forgotten Source errs on the safe side.
	SourceInline Source = iota
	// SourceOperator: the stage belongs to an operator-defined pipeline from
	// the server's configuration file.
	SourceOperator
)

// String returns "inline" or "operator".
func (s Source) String() string {
	switch s {
	case SourceInline:
		return "inline"
	case SourceOperator:
		return "operator"
	}
	return fmt.Sprintf("Source(%d)", int(s))
}

// Env is what a Kind knows about the spec it compiles.
type Env struct {
	// Source is where the spec comes from.
	Source Source
	// MaxOutputBytes caps what a run may capture (response bodies, command
	// output) and render; Options.MaxOutputBytes or its default.
	MaxOutputBytes int64

	// params, when set, collects the Params keys the templates made with
	// this Env name as fields (Registry.RequiredParams).
	params *[]string
}

var (
	// ErrInvalid is wrapped by every error about a stage's config: unknown
	// kind, unknown or missing field, bad value, bad template.
	ErrInvalid = errors.New("stage: invalid config")
	// ErrNotAllowed is wrapped when a kind, host or command is not allowed
	// from the spec's source (or on this server at all).
	ErrNotAllowed = errors.New("stage: not allowed")
	// ErrDuplicate is returned by Register for a kind name already taken.
	ErrDuplicate = errors.New("stage: kind already registered")
)

// ConfigError is the error Compile returns for a spec it refuses. It matches
// Err (ErrInvalid or ErrNotAllowed) and task.ErrInvalid with errors.Is, so
// callers map it to 400 INVALID_ARGUMENT either way.
type ConfigError struct {
	// Stage names the stage (filled in by the registry).
	Stage string
	// Field is the path of the offending setting, e.g. "http.url" or
	// "exec.argv[2]"; empty when the problem is the stage as a whole.
	Field string
	// Reason says what is wrong; values taken from input are quoted.
	Reason string
	// Err is ErrInvalid or ErrNotAllowed.
	Err error
}

// Error reads "stage: invalid config: stage \"push\": http.url: required".
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.sentinel().Error())
	if e.Stage != "" {
		b.WriteString(": stage ")
		b.WriteString(task.Quote(e.Stage))
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

func (e *ConfigError) sentinel() error {
	if e.Err == nil {
		return ErrInvalid
	}
	return e.Err
}

// Unwrap returns the sentinel and task.ErrInvalid.
func (e *ConfigError) Unwrap() []error { return []error{e.sentinel(), task.ErrInvalid} }

// invalid returns a *ConfigError wrapping ErrInvalid.
func invalid(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrInvalid}
}

// notAllowed returns a *ConfigError wrapping ErrNotAllowed.
func notAllowed(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrNotAllowed}
}
