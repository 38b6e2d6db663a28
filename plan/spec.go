package plan

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/deploycoord/deploycoord/task"
)

// Limits on plan specs. Config may lower MaxTenants (see Limits).
const (
	// MaxTenantsDefault is the most tenants one plan may hold by default.
	MaxTenantsDefault = 100_000
	// MaxConcurrencyLimit is the highest maxConcurrency accepted.
	MaxConcurrencyLimit = 1000
	// MaxConcurrencyDefault applies when a spec sets none.
	MaxConcurrencyDefault = 10
	// LockWaitDefault is how long "wait" waits for a tenant lock when the
	// spec sets no lockWait.
	LockWaitDefault = 5 * time.Minute
	// MaxLockWait is the longest lockWait accepted.
	MaxLockWait = 2 * time.Hour
	// MaxNameLen is the longest plan name accepted, in bytes.
	MaxNameLen = 200
	// MaxParams is the most params one object may hold.
	MaxParams = 64
	// MaxParamsBytes is the largest JSON form of one params object.
	MaxParamsBytes = 16 << 10
)

var paramKeyRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// Spec is the request to create a plan (docs/api.md POST /v1/plans).
type Spec struct {
	Name string `json:"name"`
	// Pipeline names an operator-defined pipeline; Stages are inline stages.
	// Exactly one of the two is set.
	Pipeline         string            `json:"pipeline,omitempty"`
	Stages           []task.StageSpec  `json:"stages,omitempty"`
	Tenants          []TenantSpec      `json:"tenants"`
	Params           map[string]any    `json:"params,omitempty"`
	MaxConcurrency   int               `json:"maxConcurrency,omitempty"`
	OnTenantLocked   LockPolicy        `json:"onTenantLocked,omitempty"`
	LockWait         task.Duration     `json:"lockWait,omitempty"`
	FailureThreshold *FailureThreshold `json:"failureThreshold,omitempty"`
	// Start says whether to start the plan right away (default true).
	Start *bool `json:"start,omitempty"`
}

// TenantSpec is one tenant of a plan spec.
type TenantSpec struct {
	TenantID string         `json:"tenantId"`
	Params   map[string]any `json:"params,omitempty"`
}

// FailureThreshold pauses a plan when more than MaxFailed tasks have failed.
type FailureThreshold struct {
	MaxFailed int `json:"maxFailed"`
}

// ShouldStart reports whether the plan starts when created.
func (s *Spec) ShouldStart() bool { return s.Start == nil || *s.Start }

// Validate checks the spec, except the kind-specific stage settings (the stage
// registry checks those) and the pipeline name (the catalog resolves it).
// maxTenants caps the number of tenants (0 = MaxTenantsDefault). Every error
// wraps ErrInvalid and names the offending field.
func (s *Spec) Validate(maxTenants int) error {
	if maxTenants <= 0 {
		maxTenants = MaxTenantsDefault
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
	if err := checkText(s.Name, MaxNameLen); err != nil {
		return bad("name: %v", err)
	}
	switch {
	case s.Pipeline != "" && len(s.Stages) > 0:
		return bad("set either pipeline or stages, not both")
	case s.Pipeline == "" && len(s.Stages) == 0:
		return bad("set pipeline (an operator-defined pipeline) or stages (inline)")
	case s.Pipeline != "" && !task.ValidStageName(s.Pipeline):
		return bad("pipeline %s is not a valid pipeline name", task.Quote(s.Pipeline))
	}
	if err := ValidateStages(s.Stages); err != nil {
		return err
	}
	switch n := len(s.Tenants); {
	case n == 0:
		return bad("tenants: at least one tenant is required")
	case n > maxTenants:
		return bad("tenants: %d tenants, at most %d per plan", n, maxTenants)
	}
	seen := make(map[string]struct{}, len(s.Tenants))
	for i, t := range s.Tenants {
		if !task.ValidTenantID(t.TenantID) {
			return bad("tenants[%d]: tenant id %s must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", i, task.Quote(t.TenantID))
		}
		if _, dup := seen[t.TenantID]; dup {
			return bad("tenants[%d]: tenant %s is listed twice", i, t.TenantID)
		}
		seen[t.TenantID] = struct{}{}
		if err := checkParams(t.Params); err != nil {
			return bad("tenants[%d] (%s): params: %v", i, t.TenantID, err)
		}
	}
	if err := checkParams(s.Params); err != nil {
		return bad("params: %v", err)
	}
	if s.MaxConcurrency < 0 || s.MaxConcurrency > MaxConcurrencyLimit {
		return bad("maxConcurrency %d out of range 1..%d", s.MaxConcurrency, MaxConcurrencyLimit)
	}
	switch s.OnTenantLocked {
	case "", LockFail, LockWait:
	default:
		return bad("onTenantLocked %s must be fail or wait", task.Quote(string(s.OnTenantLocked)))
	}
	if s.LockWait < 0 || s.LockWait.D() > MaxLockWait {
		return bad("lockWait %s out of range 0..%s", s.LockWait.D(), MaxLockWait)
	}
	if s.FailureThreshold != nil && (s.FailureThreshold.MaxFailed < 0 || s.FailureThreshold.MaxFailed > maxTenants) {
		return bad("failureThreshold.maxFailed %d out of range 0..%d", s.FailureThreshold.MaxFailed, maxTenants)
	}
	return nil
}

// ValidateStages checks a pipeline's stages: 1..task.MaxStages stages, each
// valid, names unique.
func ValidateStages(stages []task.StageSpec) error {
	if len(stages) > task.MaxStages {
		return fmt.Errorf("%w: stages: %d stages, at most %d", ErrInvalid, len(stages), task.MaxStages)
	}
	names := make(map[string]struct{}, len(stages))
	for i, st := range stages {
		if err := st.Validate(); err != nil {
			return fmt.Errorf("%w: stages[%d]: %v", ErrInvalid, i, err)
		}
		if _, dup := names[st.Name]; dup {
			return fmt.Errorf("%w: stages[%d]: stage name %s is used twice", ErrInvalid, i, st.Name)
		}
		names[st.Name] = struct{}{}
	}
	return nil
}

// TenantParams returns a tenant's params: the plan's defaults overlaid with
// the tenant's own.
func (s *Spec) TenantParams(t TenantSpec) map[string]any {
	if len(s.Params) == 0 && len(t.Params) == 0 {
		return nil
	}
	out := make(map[string]any, len(s.Params)+len(t.Params))
	for k, v := range s.Params {
		out[k] = v
	}
	for k, v := range t.Params {
		out[k] = v
	}
	return out
}

// NewPlan returns the CREATED plan described by spec, with id and the
// resolved stages (from spec.Stages or the named pipeline).
func (s *Spec) NewPlan(id string, stages []task.StageSpec, now time.Time) *Plan {
	p := &Plan{
		ID: id, Name: s.Name, Status: StatusCreated, Pipeline: s.Pipeline, Stages: stages,
		Params: s.Params, MaxConcurrency: s.MaxConcurrency, OnTenantLocked: s.OnTenantLocked,
		LockWait: s.LockWait.D(), TotalTasks: len(s.Tenants), CreatedAt: now.UTC(), UpdatedAt: now.UTC(),
	}
	if p.MaxConcurrency == 0 {
		p.MaxConcurrency = MaxConcurrencyDefault
	}
	if p.OnTenantLocked == "" {
		p.OnTenantLocked = LockFail
	}
	if p.OnTenantLocked == LockWait && p.LockWait == 0 {
		p.LockWait = LockWaitDefault
	}
	if s.FailureThreshold != nil {
		p.MaxFailed = s.FailureThreshold.MaxFailed
	}
	return p
}

// checkText accepts 1..maxLen bytes of valid UTF-8 without control characters.
func checkText(s string, maxLen int) error {
	switch {
	case s == "":
		return fmt.Errorf("must not be empty")
	case len(s) > maxLen:
		return fmt.Errorf("%d bytes, at most %d", len(s), maxLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("must be valid UTF-8")
	}
	blank := true
	for _, r := range s {
		if !unicode.IsSpace(r) && !unicode.In(r, unicode.Cf) {
			blank = false
		}
		switch {
		case unicode.IsControl(r):
			return fmt.Errorf("must not contain control characters")
		case unicode.Is(unicode.Bidi_Control, r) || unicode.In(r, unicode.Zl, unicode.Zp):
			// They make a log line, the timeline or the console show other
			// text than the one stored (a right-to-left override, a line
			// break that is not one).
			return fmt.Errorf("must not contain bidirectional controls or line separators (%U)", r)
		}
	}
	if blank {
		// Spaces, no-break spaces, zero-width and other invisible
		// characters: a reason nobody can read.
		return fmt.Errorf("must not be blank (only spaces or invisible characters)")
	}
	return nil
}

// CheckReason validates the reason every operator action must give.
func CheckReason(reason string) error {
	if err := checkText(reason, 500); err != nil {
		return fmt.Errorf("%w: reason: %v", ErrInvalid, err)
	}
	return nil
}

func checkParams(p map[string]any) error {
	if len(p) > MaxParams {
		return fmt.Errorf("%d params, at most %d", len(p), MaxParams)
	}
	for k := range p {
		if !paramKeyRe.MatchString(k) {
			return fmt.Errorf("param name %s must match %s", task.Quote(k), paramKeyRe)
		}
	}
	if len(p) == 0 {
		return nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	if len(b) > MaxParamsBytes {
		return fmt.Errorf("%d bytes of JSON, at most %d", len(b), MaxParamsBytes)
	}
	return nil
}
