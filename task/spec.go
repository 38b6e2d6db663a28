package task

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"time"
)

// Limits on stage specs.
const (
	// MaxStages is the longest pipeline accepted.
	MaxStages = 64
	// TimeoutDefault is a stage's timeout when its spec sets none.
	TimeoutDefault = 5 * time.Minute
	// MaxTimeout is the longest stage timeout accepted.
	MaxTimeout = 24 * time.Hour
	// MaxAttemptsLimit is the most attempts a retry policy may ask for.
	MaxAttemptsLimit = 100
	// MaxDelayLimit is the longest retry delay accepted.
	MaxDelayLimit = time.Hour
	// BaseDelayDefault and MaxDelayDefault apply when a policy retries
	// (MaxAttempts > 1) but sets no delays.
	BaseDelayDefault = time.Second
	MaxDelayDefault  = 30 * time.Second
)

var stageNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidStageName reports whether name may name a stage. Stage names appear in
// checkpoints, templates ({{.Outputs.name}}), timelines and log lines.
func ValidStageName(name string) bool { return stageNameRe.MatchString(name) }

// Duration is a time.Duration that reads and writes JSON as a Go duration
// string ("1.5s", "2m"); a JSON number is read as nanoseconds.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string or a number of nanoseconds; null
// leaves d unchanged, as encoding/json does for built-in types.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("invalid duration %s", Quote(s))
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("invalid duration %s: want a string like \"30s\"", Quote(string(b)))
	}
	*d = Duration(n)
	return nil
}

// Backoff is how retry delays grow.
type Backoff string

const (
	// BackoffExponential: base, 2×base, 4×base, ... capped at max.
	BackoffExponential Backoff = "exponential"
	// BackoffLinear: base, 2×base, 3×base, ... capped at max.
	BackoffLinear Backoff = "linear"
	// BackoffFixed: base every time.
	BackoffFixed Backoff = "fixed"
)

// RetryPolicy is a stage's local retry policy (seed 003). Retries happen on
// the instance running the task; every attempt is recorded in the timeline.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts including the first; 0 means 1.
	MaxAttempts int      `json:"maxAttempts,omitempty"`
	Backoff     Backoff  `json:"backoff,omitempty"`
	BaseDelay   Duration `json:"baseDelay,omitempty"`
	MaxDelay    Duration `json:"maxDelay,omitempty"`
	// Jitter spreads each delay by up to ±Jitter of itself, 0 ≤ Jitter ≤ 1.
	Jitter float64 `json:"jitter,omitempty"`
}

// Attempts returns the number of attempts the policy allows (at least 1).
func (p RetryPolicy) Attempts() int { return max(p.MaxAttempts, 1) }

// Validate reports the first problem with p.
func (p RetryPolicy) Validate() error {
	switch {
	case p.MaxAttempts < 0 || p.MaxAttempts > MaxAttemptsLimit:
		return fmt.Errorf("maxAttempts %d out of range 0..%d", p.MaxAttempts, MaxAttemptsLimit)
	case p.Backoff != "" && p.Backoff != BackoffExponential && p.Backoff != BackoffLinear && p.Backoff != BackoffFixed:
		return fmt.Errorf("backoff %s must be exponential, linear or fixed", Quote(string(p.Backoff)))
	case p.BaseDelay < 0 || p.BaseDelay.D() > MaxDelayLimit:
		return fmt.Errorf("baseDelay %s out of range 0..%s", p.BaseDelay.D(), MaxDelayLimit)
	case p.MaxDelay < 0 || p.MaxDelay.D() > MaxDelayLimit:
		return fmt.Errorf("maxDelay %s out of range 0..%s", p.MaxDelay.D(), MaxDelayLimit)
	case p.MaxDelay != 0 && p.MaxDelay < p.BaseDelay:
		return fmt.Errorf("maxDelay %s is below baseDelay %s", p.MaxDelay.D(), p.BaseDelay.D())
	case math.IsNaN(p.Jitter) || p.Jitter < 0 || p.Jitter > 1:
		return fmt.Errorf("jitter %v out of range 0..1", p.Jitter)
	}
	return nil
}

// Delay returns how long to wait after failed attempt n (1-based) before the
// next one. u is a uniform random number in [0, 1) that places the jitter; the
// result stays within [0, maxDelay] and within ±Jitter of the unjittered delay.
func (p RetryPolicy) Delay(n int, u float64) time.Duration {
	base := p.BaseDelay.D()
	if base == 0 {
		base = BaseDelayDefault
	}
	ceiling := p.MaxDelay.D()
	if ceiling == 0 {
		ceiling = max(MaxDelayDefault, base)
	}
	n = max(n, 1)
	var d float64
	switch p.Backoff {
	case BackoffFixed:
		d = float64(base)
	case BackoffLinear:
		d = float64(base) * float64(n)
	default:
		d = float64(base) * math.Pow(2, float64(n-1))
	}
	d = math.Min(d, float64(ceiling))
	if p.Jitter > 0 {
		d += d * p.Jitter * (2*u - 1)
	}
	return time.Duration(math.Max(0, math.Min(d, float64(ceiling))))
}

// StageSpec describes one stage of a pipeline. In JSON the kind's own
// settings sit under a key named after the kind:
//
//	{"name": "settle", "kind": "sleep", "sleep": {"duration": "2s"}}
type StageSpec struct {
	Name    string
	Kind    string
	Timeout Duration
	Retry   RetryPolicy
	// Config is the raw JSON object under the key named Kind (may be nil).
	Config json.RawMessage
}

// TimeoutOrDefault returns the stage timeout, TimeoutDefault when unset.
func (s StageSpec) TimeoutOrDefault() time.Duration {
	if s.Timeout == 0 {
		return TimeoutDefault
	}
	return s.Timeout.D()
}

// Validate checks what every stage needs; the kind's registry checks Config.
func (s StageSpec) Validate() error {
	if !ValidStageName(s.Name) {
		return fmt.Errorf("%w: stage name %s must match %s", ErrInvalid, Quote(s.Name), stageNameRe)
	}
	if !ValidStageName(s.Kind) {
		return fmt.Errorf("%w: stage %s: kind %s is not a valid kind name", ErrInvalid, s.Name, Quote(s.Kind))
	}
	if s.Timeout < 0 || s.Timeout.D() > MaxTimeout {
		return fmt.Errorf("%w: stage %s: timeout %s out of range 0..%s", ErrInvalid, s.Name, s.Timeout.D(), MaxTimeout)
	}
	if err := s.Retry.Validate(); err != nil {
		return fmt.Errorf("%w: stage %s: retry: %v", ErrInvalid, s.Name, err)
	}
	return nil
}

var stageSpecFields = map[string]bool{"name": true, "kind": true, "timeout": true, "retry": true}

// MarshalJSON writes the spec with Config under the key named Kind.
func (s StageSpec) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"name":`)
	writeJSON(&b, s.Name)
	b.WriteString(`,"kind":`)
	writeJSON(&b, s.Kind)
	if s.Timeout != 0 {
		b.WriteString(`,"timeout":`)
		writeJSON(&b, s.Timeout)
	}
	if s.Retry != (RetryPolicy{}) {
		b.WriteString(`,"retry":`)
		writeJSON(&b, s.Retry)
	}
	if len(s.Config) > 0 && !stageSpecFields[s.Kind] {
		b.WriteByte(',')
		writeJSON(&b, s.Kind)
		b.WriteByte(':')
		b.Write(s.Config)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func writeJSON(b *bytes.Buffer, v any) {
	out, _ := json.Marshal(v)
	b.Write(out)
}

// UnmarshalJSON reads a spec strictly: unknown keys (other than the one named
// after the kind) and unknown retry fields are errors.
func (s *StageSpec) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("stage: want a JSON object: %w", err)
	}
	var out StageSpec
	if v, ok := raw["name"]; ok {
		if err := json.Unmarshal(v, &out.Name); err != nil {
			return fmt.Errorf("stage: name: want a string")
		}
	}
	if v, ok := raw["kind"]; ok {
		if err := json.Unmarshal(v, &out.Kind); err != nil {
			return fmt.Errorf("stage %s: kind: want a string", Quote(out.Name))
		}
	}
	if v, ok := raw["timeout"]; ok {
		if err := json.Unmarshal(v, &out.Timeout); err != nil {
			return fmt.Errorf("stage %s: timeout: %v", Quote(out.Name), err)
		}
	}
	if v, ok := raw["retry"]; ok {
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&out.Retry); err != nil {
			return fmt.Errorf("stage %s: retry: %v", Quote(out.Name), err)
		}
	}
	for k, v := range raw {
		switch {
		case stageSpecFields[k]:
		case k == out.Kind:
			if !bytes.HasPrefix(bytes.TrimSpace(v), []byte("{")) {
				return fmt.Errorf("stage %s: %s: want a JSON object", Quote(out.Name), Quote(k))
			}
			out.Config = append(json.RawMessage(nil), v...)
		default:
			return fmt.Errorf("stage %s: unknown field %s (settings go under the key %s)", Quote(out.Name), Quote(k), Quote(out.Kind))
		}
	}
	*s = out
	return nil
}
