package task_test

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/task"
)

func TestStageSpecJSONRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		spec task.StageSpec
		json string
	}{
		{
			name: "Minimal",
			spec: task.StageSpec{Name: "build", Kind: "http"},
			json: `{"name":"build","kind":"http"}`,
		},
		{
			name: "ConfigUnderKindKey",
			spec: task.StageSpec{Name: "settle", Kind: "sleep", Config: json.RawMessage(`{"duration":"2s"}`)},
			json: `{"name":"settle","kind":"sleep","sleep":{"duration":"2s"}}`,
		},
		{
			name: "Everything",
			spec: task.StageSpec{
				Name: "deploy", Kind: "http", Timeout: task.Duration(90 * time.Second),
				Retry: task.RetryPolicy{
					MaxAttempts: 5, Backoff: task.BackoffLinear, BaseDelay: task.Duration(500 * time.Millisecond),
					MaxDelay: task.Duration(10 * time.Second), Jitter: 0.25,
				},
				Config: json.RawMessage(`{"url":"https://example.com/{{.TenantID}}","method":"POST","nested":{"a":[1,2]}}`),
			},
			json: `{"name":"deploy","kind":"http","timeout":"1m30s",` +
				`"retry":{"maxAttempts":5,"backoff":"linear","baseDelay":"500ms","maxDelay":"10s","jitter":0.25},` +
				`"http":{"url":"https://example.com/{{.TenantID}}","method":"POST","nested":{"a":[1,2]}}}`,
		},
		{
			name: "RetryOnlyAttempts",
			spec: task.StageSpec{Name: "a", Kind: "exec", Retry: task.RetryPolicy{MaxAttempts: 3}},
			json: `{"name":"a","kind":"exec","retry":{"maxAttempts":3}}`,
		},
		{
			name: "EmptyConfigObject",
			spec: task.StageSpec{Name: "a", Kind: "noop", Config: json.RawMessage(`{}`)},
			json: `{"name":"a","kind":"noop","noop":{}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, b, []byte(tt.json)) {
				t.Errorf("Marshal = %s, want %s", b, tt.json)
			}
			var got task.StageSpec
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("Unmarshal(%s): %v", b, err)
			}
			if !reflect.DeepEqual(got, tt.spec) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, tt.spec)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate after round trip: %v", err)
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("not JSON: %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("not JSON: %s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func TestStageSpecUnmarshal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    task.StageSpec
		wantErr string // substring; "" = success
	}{
		{name: "OK/WhitespaceAroundConfig", in: "{\"name\":\"s\",\"kind\":\"sleep\",\"sleep\": \n {\"duration\":\"1s\"} }",
			want: task.StageSpec{Name: "s", Kind: "sleep", Config: json.RawMessage(`{"duration":"1s"}`)}},
		{name: "OK/TimeoutAsNanoseconds", in: `{"name":"s","kind":"sleep","timeout":2000000000}`,
			want: task.StageSpec{Name: "s", Kind: "sleep", Timeout: task.Duration(2 * time.Second)}},
		{name: "OK/NullTimeoutAndRetry", in: `{"name":"s","kind":"sleep","timeout":null,"retry":null}`,
			want: task.StageSpec{Name: "s", Kind: "sleep"}},
		{name: "OK/NullRetryDelay", in: `{"name":"s","kind":"sleep","retry":{"maxAttempts":2,"baseDelay":null}}`,
			want: task.StageSpec{Name: "s", Kind: "sleep", Retry: task.RetryPolicy{MaxAttempts: 2}}},
		{name: "OK/NoKindNoConfig", in: `{"name":"s"}`, want: task.StageSpec{Name: "s"}},

		{name: "Err/UnknownTopLevelField", in: `{"name":"s","kind":"sleep","tiemout":"1s"}`, wantErr: `unknown field "tiemout"`},
		{name: "Err/ConfigUnderOtherKind", in: `{"name":"s","kind":"sleep","http":{"url":"x"}}`, wantErr: `unknown field "http"`},
		{name: "Err/UnknownRetryField", in: `{"name":"s","kind":"sleep","retry":{"maxAttempts":2,"attempts":3}}`, wantErr: "retry"},
		{name: "Err/ConfigString", in: `{"name":"s","kind":"sleep","sleep":"2s"}`, wantErr: "want a JSON object"},
		{name: "Err/ConfigArray", in: `{"name":"s","kind":"sleep","sleep":[1]}`, wantErr: "want a JSON object"},
		{name: "Err/ConfigNumber", in: `{"name":"s","kind":"sleep","sleep":2}`, wantErr: "want a JSON object"},
		{name: "Err/ConfigNull", in: `{"name":"s","kind":"sleep","sleep":null}`, wantErr: "want a JSON object"},
		{name: "Err/NameNumber", in: `{"name":1,"kind":"sleep"}`, wantErr: "name: want a string"},
		{name: "Err/KindObject", in: `{"name":"s","kind":{}}`, wantErr: "kind: want a string"},
		{name: "Err/TimeoutBool", in: `{"name":"s","kind":"sleep","timeout":true}`, wantErr: "timeout"},
		{name: "Err/TimeoutBadString", in: `{"name":"s","kind":"sleep","timeout":"soon"}`, wantErr: "timeout"},
		{name: "Err/RetryAttemptsString", in: `{"name":"s","kind":"sleep","retry":{"maxAttempts":"3"}}`, wantErr: "retry"},
		{name: "Err/RetryNotObject", in: `{"name":"s","kind":"sleep","retry":5}`, wantErr: "retry"},
		{name: "Err/RetryBadDelay", in: `{"name":"s","kind":"sleep","retry":{"baseDelay":"fast"}}`, wantErr: "retry"},
		{name: "Err/NotAnObject", in: `["s"]`, wantErr: "want a JSON object"},
		{name: "Err/Garbage", in: `{"name":`, wantErr: "JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := task.StageSpec{Name: "previous", Kind: "x"}
			err := json.Unmarshal([]byte(tt.in), &got)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Unmarshal(%s): %v", tt.in, err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("Unmarshal(%s):\n got %+v\nwant %+v", tt.in, got, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Unmarshal(%s) accepted: %+v", tt.in, got)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not mention %q", err, tt.wantErr)
			}
		})
	}
	t.Run("Err/InList", func(t *testing.T) {
		t.Parallel()
		var stages []task.StageSpec
		err := json.Unmarshal([]byte(`[{"name":"a","kind":"sleep"},{"name":"b","kind":"sleep","bogus":1}]`), &stages)
		if err == nil || !strings.Contains(err.Error(), `"bogus"`) {
			t.Errorf("err = %v, want unknown field \"bogus\"", err)
		}
	})
	t.Run("OK/HostileFieldQuotedInError", func(t *testing.T) {
		t.Parallel()
		var s task.StageSpec
		err := json.Unmarshal([]byte(`{"name":"a\nFAKE LOG LINE","kind":"sleep","x\u0000y":1}`), &s)
		if err == nil {
			t.Fatal("accepted")
		}
		if strings.ContainsAny(err.Error(), "\n\x00") {
			t.Errorf("error %q carries raw control characters", err)
		}
	})
}

func TestStageSpecValidate(t *testing.T) {
	t.Parallel()
	ok := task.StageSpec{Name: "deploy", Kind: "http"}
	tests := []struct {
		name    string
		mutate  func(*task.StageSpec)
		wantErr string
	}{
		{"OK/Plain", func(*task.StageSpec) {}, ""},
		{"OK/NameWithDotsDashes", func(s *task.StageSpec) { s.Name = "v1.2_deploy-eu" }, ""},
		{"OK/Name64", func(s *task.StageSpec) { s.Name = strings.Repeat("a", 64) }, ""},
		{"OK/TimeoutMax", func(s *task.StageSpec) { s.Timeout = task.Duration(task.MaxTimeout) }, ""},
		{"OK/RetryPolicy", func(s *task.StageSpec) { s.Retry = task.RetryPolicy{MaxAttempts: 3, Jitter: 1} }, ""},
		{"Err/NameEmpty", func(s *task.StageSpec) { s.Name = "" }, "stage name"},
		{"Err/Name65", func(s *task.StageSpec) { s.Name = strings.Repeat("a", 65) }, "stage name"},
		{"Err/NameLeadingDash", func(s *task.StageSpec) { s.Name = "-x" }, "stage name"},
		{"Err/NameLeadingDot", func(s *task.StageSpec) { s.Name = ".x" }, "stage name"},
		{"Err/NameSpace", func(s *task.StageSpec) { s.Name = "de ploy" }, "stage name"},
		{"Err/NameTemplate", func(s *task.StageSpec) { s.Name = "{{.x}}" }, "stage name"},
		{"Err/NameSlash", func(s *task.StageSpec) { s.Name = "a/b" }, "stage name"},
		{"Err/NameNewline", func(s *task.StageSpec) { s.Name = "a\n" }, "stage name"},
		{"Err/NameUnicode", func(s *task.StageSpec) { s.Name = "déploy" }, "stage name"},
		{"Err/KindEmpty", func(s *task.StageSpec) { s.Kind = "" }, "kind"},
		{"Err/KindColon", func(s *task.StageSpec) { s.Kind = "http:x" }, "kind"},
		{"Err/TimeoutNegative", func(s *task.StageSpec) { s.Timeout = -1 }, "timeout"},
		{"Err/TimeoutTooLong", func(s *task.StageSpec) { s.Timeout = task.Duration(task.MaxTimeout + 1) }, "timeout"},
		{"Err/Retry", func(s *task.StageSpec) { s.Retry.MaxAttempts = -1 }, "retry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := ok
			tt.mutate(&s)
			err := s.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate(%+v): %v", s, err)
				}
				return
			}
			if !errors.Is(err, task.ErrInvalid) {
				t.Fatalf("Validate(%+v) = %v, want ErrInvalid", s, err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not mention %q", err, tt.wantErr)
			}
			if strings.ContainsAny(err.Error(), "\n\x00") {
				t.Errorf("error %q carries raw control characters", err)
			}
		})
	}
}

func TestTimeoutOrDefault(t *testing.T) {
	t.Parallel()
	if got := (task.StageSpec{}).TimeoutOrDefault(); got != task.TimeoutDefault {
		t.Errorf("unset timeout = %v, want %v", got, task.TimeoutDefault)
	}
	if got := (task.StageSpec{Timeout: task.Duration(time.Second)}).TimeoutOrDefault(); got != time.Second {
		t.Errorf("timeout = %v, want 1s", got)
	}
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"OK/Seconds", `"30s"`, 30 * time.Second, false},
		{"OK/Fraction", `"1.5s"`, 1500 * time.Millisecond, false},
		{"OK/Compound", `"1h2m3s"`, time.Hour + 2*time.Minute + 3*time.Second, false},
		{"OK/Zero", `"0"`, 0, false},
		{"OK/Negative", `"-2s"`, -2 * time.Second, false}, // range checks belong to Validate
		{"OK/Nanoseconds", `1000000000`, time.Second, false},
		{"OK/ZeroNumber", `0`, 0, false},
		{"OK/NullLeavesValue", `null`, 7, false},
		{"Err/NoUnit", `"30"`, 0, true},
		{"Err/Empty", `""`, 0, true},
		{"Err/Word", `"soon"`, 0, true},
		{"Err/FractionalNumber", `1.5`, 0, true},
		{"Err/Bool", `true`, 0, true},
		{"Err/Object", `{}`, 0, true},
		{"Err/Array", `["1s"]`, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := task.Duration(7)
			err := json.Unmarshal([]byte(tt.in), &d)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Unmarshal(%s) = %v, want an error", tt.in, d.D())
				}
				if !strings.Contains(err.Error(), "invalid duration") {
					t.Errorf("error %q does not say invalid duration", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Unmarshal(%s): %v", tt.in, err)
			}
			if d.D() != tt.want {
				t.Errorf("Unmarshal(%s) = %v, want %v", tt.in, d.D(), tt.want)
			}
		})
	}
	t.Run("OK/HostileInputQuoted", func(t *testing.T) {
		t.Parallel()
		var d task.Duration
		err := json.Unmarshal([]byte(`"1s\nlevel=error msg=forged"`), &d)
		if err == nil {
			t.Fatal("accepted")
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("error %q carries a raw newline", err)
		}
	})
	t.Run("OK/Marshal", func(t *testing.T) {
		t.Parallel()
		for d, want := range map[time.Duration]string{
			0: `"0s"`, 90 * time.Second: `"1m30s"`, 1500 * time.Microsecond: `"1.5ms"`, -time.Second: `"-1s"`,
		} {
			b, err := json.Marshal(task.Duration(d))
			if err != nil || string(b) != want {
				t.Errorf("Marshal(%v) = %s, %v; want %s", d, b, err, want)
			}
			var back task.Duration
			if err := json.Unmarshal(b, &back); err != nil || back.D() != d {
				t.Errorf("round trip of %v = %v, %v", d, back.D(), err)
			}
		}
	})
}

func TestRetryPolicyValidate(t *testing.T) {
	t.Parallel()
	sec := func(n float64) task.Duration { return task.Duration(n * float64(time.Second)) }
	tests := []struct {
		name    string
		p       task.RetryPolicy
		wantErr string
	}{
		{"OK/Zero", task.RetryPolicy{}, ""},
		{"OK/MaxAttemptsLimit", task.RetryPolicy{MaxAttempts: task.MaxAttemptsLimit}, ""},
		{"OK/Exponential", task.RetryPolicy{Backoff: task.BackoffExponential}, ""},
		{"OK/Linear", task.RetryPolicy{Backoff: task.BackoffLinear}, ""},
		{"OK/Fixed", task.RetryPolicy{Backoff: task.BackoffFixed}, ""},
		{"OK/DelaysAtLimit", task.RetryPolicy{BaseDelay: task.Duration(task.MaxDelayLimit), MaxDelay: task.Duration(task.MaxDelayLimit)}, ""},
		{"OK/MaxEqualsBase", task.RetryPolicy{BaseDelay: sec(2), MaxDelay: sec(2)}, ""},
		{"OK/BaseOnly", task.RetryPolicy{BaseDelay: sec(120)}, ""},
		{"OK/JitterBounds", task.RetryPolicy{Jitter: 1}, ""},
		{"Err/MaxAttemptsNegative", task.RetryPolicy{MaxAttempts: -1}, "maxAttempts"},
		{"Err/MaxAttemptsTooMany", task.RetryPolicy{MaxAttempts: task.MaxAttemptsLimit + 1}, "maxAttempts"},
		{"Err/BackoffUnknown", task.RetryPolicy{Backoff: "random"}, "backoff"},
		{"Err/BackoffCase", task.RetryPolicy{Backoff: "Exponential"}, "backoff"},
		{"Err/BaseNegative", task.RetryPolicy{BaseDelay: -1}, "baseDelay"},
		{"Err/BaseTooLong", task.RetryPolicy{BaseDelay: task.Duration(task.MaxDelayLimit + 1)}, "baseDelay"},
		{"Err/MaxNegative", task.RetryPolicy{MaxDelay: -1}, "maxDelay"},
		{"Err/MaxTooLong", task.RetryPolicy{MaxDelay: task.Duration(task.MaxDelayLimit + 1)}, "maxDelay"},
		{"Err/MaxBelowBase", task.RetryPolicy{BaseDelay: sec(2), MaxDelay: sec(1)}, "below baseDelay"},
		{"Err/JitterNegative", task.RetryPolicy{Jitter: -0.1}, "jitter"},
		{"Err/JitterAboveOne", task.RetryPolicy{Jitter: 1.01}, "jitter"},
		{"Err/JitterNaN", task.RetryPolicy{Jitter: math.NaN()}, "jitter"},
		{"Err/JitterInf", task.RetryPolicy{Jitter: math.Inf(1)}, "jitter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.p.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("Validate(%+v): %v", tt.p, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate(%+v) = %v, want an error about %s", tt.p, err, tt.wantErr)
			}
		})
	}
}

func TestRetryPolicyAttempts(t *testing.T) {
	t.Parallel()
	for in, want := range map[int]int{0: 1, 1: 1, 5: 5, task.MaxAttemptsLimit: task.MaxAttemptsLimit} {
		if got := (task.RetryPolicy{MaxAttempts: in}).Attempts(); got != want {
			t.Errorf("Attempts() with MaxAttempts %d = %d, want %d", in, got, want)
		}
	}
}

func TestRetryPolicyDelay(t *testing.T) {
	t.Parallel()
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	s := func(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }
	tests := []struct {
		name string
		p    task.RetryPolicy
		want []time.Duration // for n = 1, 2, ...
	}{
		{"ExponentialDefaults", task.RetryPolicy{},
			[]time.Duration{s(1), s(2), s(4), s(8), s(16), s(30), s(30)}},
		{"ExponentialNamed", task.RetryPolicy{Backoff: task.BackoffExponential, BaseDelay: task.Duration(ms(100)), MaxDelay: task.Duration(s(1))},
			[]time.Duration{ms(100), ms(200), ms(400), ms(800), s(1), s(1)}},
		{"ExponentialMaxOnly", task.RetryPolicy{MaxDelay: task.Duration(s(5))},
			[]time.Duration{s(1), s(2), s(4), s(5), s(5)}},
		{"ExponentialMaxBelowDefaultBase", task.RetryPolicy{MaxDelay: task.Duration(ms(500))},
			[]time.Duration{ms(500), ms(500)}},
		{"LinearDefaults", task.RetryPolicy{Backoff: task.BackoffLinear},
			[]time.Duration{s(1), s(2), s(3), s(4), s(5)}},
		{"LinearCapped", task.RetryPolicy{Backoff: task.BackoffLinear, BaseDelay: task.Duration(s(3)), MaxDelay: task.Duration(s(10))},
			[]time.Duration{s(3), s(6), s(9), s(10), s(10)}},
		{"FixedDefault", task.RetryPolicy{Backoff: task.BackoffFixed},
			[]time.Duration{s(1), s(1), s(1)}},
		{"FixedBase", task.RetryPolicy{Backoff: task.BackoffFixed, BaseDelay: task.Duration(s(2))},
			[]time.Duration{s(2), s(2), s(2)}},
		{"BaseAboveDefaultMax", task.RetryPolicy{BaseDelay: task.Duration(s(45))},
			[]time.Duration{s(45), s(45), s(45)}},
		{"LinearBaseAboveDefaultMax", task.RetryPolicy{Backoff: task.BackoffLinear, BaseDelay: task.Duration(time.Minute)},
			[]time.Duration{time.Minute, time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := tt.p.Validate(); err != nil {
				t.Fatalf("policy invalid: %v", err)
			}
			for i, want := range tt.want {
				n := i + 1
				for _, u := range []float64{0, 0.5, 0.999} { // no jitter: u must not matter
					if got := tt.p.Delay(n, u); got != want {
						t.Errorf("Delay(%d, %v) = %v, want %v", n, u, got, want)
					}
				}
			}
		})
	}
	t.Run("OK/AttemptBelowOneCountsAsOne", func(t *testing.T) {
		t.Parallel()
		p := task.RetryPolicy{Backoff: task.BackoffLinear, BaseDelay: task.Duration(s(2))}
		for _, n := range []int{0, -1, math.MinInt} {
			if got := p.Delay(n, 0.5); got != s(2) {
				t.Errorf("Delay(%d) = %v, want 2s", n, got)
			}
		}
	})
	t.Run("OK/HugeAttemptStaysAtCap", func(t *testing.T) {
		t.Parallel()
		for _, b := range []task.Backoff{task.BackoffExponential, task.BackoffLinear, task.BackoffFixed} {
			p := task.RetryPolicy{Backoff: b, BaseDelay: task.Duration(s(1)), MaxDelay: task.Duration(task.MaxDelayLimit), Jitter: 0.5}
			for _, n := range []int{63, 64, 1100, 5000, math.MaxInt} {
				for _, u := range []float64{0, 0.5, math.Nextafter(1, 0)} {
					got := p.Delay(n, u)
					if got < 0 || got > task.MaxDelayLimit {
						t.Errorf("%s Delay(%d, %v) = %v, outside [0, %v]", b, n, u, got, task.MaxDelayLimit)
					}
				}
			}
		}
	})
	t.Run("OK/JitterEnds", func(t *testing.T) {
		t.Parallel()
		p := task.RetryPolicy{Backoff: task.BackoffFixed, BaseDelay: task.Duration(s(10)), MaxDelay: task.Duration(s(20)), Jitter: 0.5}
		for _, c := range []struct {
			u    float64
			want time.Duration
		}{{0, s(5)}, {0.25, s(7.5)}, {0.5, s(10)}, {0.75, s(12.5)}} {
			if got := p.Delay(1, c.u); got != c.want {
				t.Errorf("Delay(1, %v) = %v, want %v", c.u, got, c.want)
			}
		}
	})
	t.Run("OK/JitterClippedAtMax", func(t *testing.T) {
		t.Parallel()
		// At the cap, upward jitter cannot exceed maxDelay; downward still applies.
		p := task.RetryPolicy{BaseDelay: task.Duration(s(1)), MaxDelay: task.Duration(s(4)), Jitter: 0.5}
		if got := p.Delay(10, 0.99); got != s(4) {
			t.Errorf("Delay(10, 0.99) = %v, want the cap 4s", got)
		}
		if got := p.Delay(10, 0); got != s(2) {
			t.Errorf("Delay(10, 0) = %v, want 2s", got)
		}
	})
}

// TestRetryPolicyDelayJitterBounds checks the documented bounds over many
// policies, attempts and values of u: the delay stays within ±Jitter of the
// unjittered delay, within [0, maxDelay], and grows with u.
func TestRetryPolicyDelayJitterBounds(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	backoffs := []task.Backoff{"", task.BackoffExponential, task.BackoffLinear, task.BackoffFixed}
	jitters := []float64{0, 0.01, 0.1, 0.5, 0.999, 1}
	spread := false
	for i := 0; i < 400; i++ {
		base := time.Duration(rng.Int64N(int64(10 * time.Second)))
		maxD := time.Duration(0)
		if rng.IntN(3) > 0 {
			maxD = base + time.Duration(rng.Int64N(int64(time.Minute)))
		}
		p := task.RetryPolicy{
			Backoff: backoffs[rng.IntN(len(backoffs))], BaseDelay: task.Duration(base), MaxDelay: task.Duration(maxD),
			Jitter: jitters[rng.IntN(len(jitters))],
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("generated an invalid policy %+v: %v", p, err)
		}
		ceiling := maxD
		if ceiling == 0 {
			ceiling = max(task.MaxDelayDefault, base)
			if base == 0 {
				ceiling = task.MaxDelayDefault
			}
		}
		plain := p
		plain.Jitter = 0
		for n := 1; n <= 12; n++ {
			d0 := plain.Delay(n, 0.5)
			if d0 < 0 || d0 > ceiling {
				t.Fatalf("%+v: unjittered Delay(%d) = %v outside [0, %v]", p, n, d0, ceiling)
			}
			slack := time.Duration(p.Jitter*float64(d0)) + 1 // +1ns for float rounding
			for k := 0; k < 50; k++ {
				u := rng.Float64()
				if k == 0 {
					u = 0
				}
				if k == 1 {
					u = math.Nextafter(1, 0)
				}
				got := p.Delay(n, u)
				if got < 0 || got > ceiling {
					t.Fatalf("%+v: Delay(%d, %v) = %v outside [0, %v]", p, n, u, got, ceiling)
				}
				if diff := got - d0; diff > slack || -diff > slack {
					t.Fatalf("%+v: Delay(%d, %v) = %v, more than ±%v from %v", p, n, u, got, p.Jitter, d0)
				}
				if got != d0 {
					spread = true
				}
				if p.Delay(n, u) != got {
					t.Fatalf("%+v: Delay(%d, %v) is not deterministic", p, n, u)
				}
			}
			// Monotonic in u: the jitter is placed linearly by u.
			us := []float64{0, 0.1, 0.3, 0.5, 0.7, 0.9, math.Nextafter(1, 0)}
			for j := 1; j < len(us); j++ {
				if p.Delay(n, us[j]) < p.Delay(n, us[j-1]) {
					t.Fatalf("%+v: Delay(%d, ·) decreases from u=%v to u=%v", p, n, us[j-1], us[j])
				}
			}
		}
	}
	if !spread {
		t.Fatal("no jittered delay differed from the unjittered one: the bounds check proved nothing")
	}
}
