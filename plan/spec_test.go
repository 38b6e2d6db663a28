package plan_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// validSpec returns a spec that passes Validate; each case changes one thing.
func validSpec() *plan.Spec {
	return &plan.Spec{
		Name: "rollout 1.2",
		Stages: []task.StageSpec{
			{Name: "build", Kind: "http", Config: json.RawMessage(`{"url":"https://ci.example"}`)},
			{Name: "settle", Kind: "sleep", Config: json.RawMessage(`{"duration":"1s"}`)},
		},
		Tenants: []plan.TenantSpec{{TenantID: "acme"}, {TenantID: "globex", Params: map[string]any{"region": "eu"}}},
		Params:  map[string]any{"version": "1.2"},
	}
}

func tenants(n int) []plan.TenantSpec {
	out := make([]plan.TenantSpec, n)
	for i := range out {
		out[i].TenantID = fmt.Sprintf("t%d", i)
	}
	return out
}

func params(n int) map[string]any {
	out := make(map[string]any, n)
	for i := 0; i < n; i++ {
		out[fmt.Sprintf("p%d", i)] = i
	}
	return out
}

// bigParams returns one param whose JSON form {"k":"…"} is exactly size bytes.
func bigParams(size int) map[string]any {
	return map[string]any{"k": strings.Repeat("x", size-len(`{"k":""}`))}
}

func stageList(n int) []task.StageSpec {
	out := make([]task.StageSpec, n)
	for i := range out {
		out[i] = task.StageSpec{Name: fmt.Sprintf("s%d", i), Kind: "sleep"}
	}
	return out
}

func TestSpecValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		maxTenants int
		mutate     func(*plan.Spec)
		field      string // the field the error must name; "" = valid
	}{
		{"OK/Inline", 0, func(*plan.Spec) {}, ""},
		{"OK/Pipeline", 0, func(s *plan.Spec) { s.Stages, s.Pipeline = nil, "std-rollout_v2" }, ""},
		{"OK/Name200Bytes", 0, func(s *plan.Spec) { s.Name = strings.Repeat("n", 200) }, ""},
		{"OK/NameUnicode200Bytes", 0, func(s *plan.Spec) { s.Name = strings.Repeat("é", 100) }, ""},
		{"OK/NameSpacesAndSymbols", 0, func(s *plan.Spec) { s.Name = "Déploiement ✓ {eu}: *all* tenants?" }, ""},
		{"OK/64Stages", 0, func(s *plan.Spec) { s.Stages = stageList(64) }, ""},
		{"OK/MaxTenantsExactly", 3, func(s *plan.Spec) { s.Tenants = tenants(3) }, ""},
		{"OK/DefaultMaxTenantsExactly", 0, func(s *plan.Spec) { s.Tenants = tenants(plan.MaxTenantsDefault) }, ""},
		{"OK/NegativeMaxTenantsMeansDefault", -1, func(s *plan.Spec) { s.Tenants = tenants(50) }, ""},
		{"OK/TenantID128", 0, func(s *plan.Spec) { s.Tenants[0].TenantID = strings.Repeat("a", 128) }, ""},
		{"OK/TenantIDPunctuation", 0, func(s *plan.Spec) { s.Tenants[0].TenantID = "acme-eu.west_1" }, ""},
		{"OK/NoParams", 0, func(s *plan.Spec) { s.Params, s.Tenants[1].Params = nil, nil }, ""},
		{"OK/64Params", 0, func(s *plan.Spec) { s.Params = params(plan.MaxParams) }, ""},
		{"OK/ParamsAtSizeLimit", 0, func(s *plan.Spec) { s.Params = bigParams(plan.MaxParamsBytes) }, ""},
		{"OK/TenantParamsAtSizeLimit", 0, func(s *plan.Spec) { s.Tenants[0].Params = bigParams(plan.MaxParamsBytes) }, ""},
		{"OK/ParamKeys", 0, func(s *plan.Spec) {
			s.Params = map[string]any{"_": 1, "a": 1, "A_1": 1, strings.Repeat("k", 64): 1}
		}, ""},
		{"OK/MaxConcurrencyOne", 0, func(s *plan.Spec) { s.MaxConcurrency = 1 }, ""},
		{"OK/MaxConcurrencyLimit", 0, func(s *plan.Spec) { s.MaxConcurrency = plan.MaxConcurrencyLimit }, ""},
		{"OK/OnTenantLockedFail", 0, func(s *plan.Spec) { s.OnTenantLocked = plan.LockFail }, ""},
		{"OK/OnTenantLockedWait", 0, func(s *plan.Spec) { s.OnTenantLocked = plan.LockWait }, ""},
		{"OK/LockWaitMax", 0, func(s *plan.Spec) { s.LockWait = task.Duration(plan.MaxLockWait) }, ""},
		{"OK/ThresholdZero", 0, func(s *plan.Spec) { s.FailureThreshold = &plan.FailureThreshold{} }, ""},
		{"OK/ThresholdAtMaxTenants", 5, func(s *plan.Spec) { s.FailureThreshold = &plan.FailureThreshold{MaxFailed: 5} }, ""},
		{"OK/ThresholdAtDefaultMaxTenants", 0, func(s *plan.Spec) {
			s.FailureThreshold = &plan.FailureThreshold{MaxFailed: plan.MaxTenantsDefault}
		}, ""},

		{"Err/NameEmpty", 0, func(s *plan.Spec) { s.Name = "" }, "name"},
		{"Err/Name201Bytes", 0, func(s *plan.Spec) { s.Name = strings.Repeat("n", 201) }, "name"},
		{"Err/NameUnicode202Bytes", 0, func(s *plan.Spec) { s.Name = strings.Repeat("é", 101) }, "name"},
		{"Err/NameNewline", 0, func(s *plan.Spec) { s.Name = "roll\nout" }, "name"},
		{"Err/NameTab", 0, func(s *plan.Spec) { s.Name = "roll\tout" }, "name"},
		{"Err/NameNUL", 0, func(s *plan.Spec) { s.Name = "roll\x00out" }, "name"},
		{"Err/NameEscape", 0, func(s *plan.Spec) { s.Name = "\x1b[2Jrollout" }, "name"},
		{"Err/NameDEL", 0, func(s *plan.Spec) { s.Name = "rollout\x7f" }, "name"},
		{"Err/NameC1", 0, func(s *plan.Spec) { s.Name = "roll\u0085out" }, "name"},
		{"Err/NameInvalidUTF8", 0, func(s *plan.Spec) { s.Name = "roll\xffout" }, "name"},
		{"Err/NameTruncatedRune", 0, func(s *plan.Spec) { s.Name = "rollout\xc3" }, "name"},

		{"Err/PipelineAndStages", 0, func(s *plan.Spec) { s.Pipeline = "std" }, "pipeline or stages"},
		{"Err/NeitherPipelineNorStages", 0, func(s *plan.Spec) { s.Stages = nil }, "pipeline"},
		{"Err/EmptyStagesNoPipeline", 0, func(s *plan.Spec) { s.Stages = []task.StageSpec{} }, "pipeline"},
		{"Err/PipelineBadName", 0, func(s *plan.Spec) { s.Stages, s.Pipeline = nil, "std rollout" }, "pipeline"},
		{"Err/PipelineColon", 0, func(s *plan.Spec) { s.Stages, s.Pipeline = nil, "a:b" }, "pipeline"},
		{"Err/65Stages", 0, func(s *plan.Spec) { s.Stages = stageList(65) }, "stages"},
		{"Err/DuplicateStage", 0, func(s *plan.Spec) { s.Stages[1].Name = "build" }, "stages[1]"},
		{"Err/StageNameBad", 0, func(s *plan.Spec) { s.Stages[1].Name = "set tle" }, "stages[1]"},
		{"Err/StageNameEmpty", 0, func(s *plan.Spec) { s.Stages[0].Name = "" }, "stages[0]"},
		{"Err/StageNameTemplate", 0, func(s *plan.Spec) { s.Stages[0].Name = "{{.x}}" }, "stages[0]"},
		{"Err/StageKindBad", 0, func(s *plan.Spec) { s.Stages[1].Kind = "" }, "stages[1]"},
		{"Err/StageTimeout", 0, func(s *plan.Spec) { s.Stages[0].Timeout = -1 }, "stages[0]"},
		{"Err/StageRetry", 0, func(s *plan.Spec) { s.Stages[1].Retry.Jitter = 2 }, "stages[1]"},

		{"Err/NoTenants", 0, func(s *plan.Spec) { s.Tenants = nil }, "tenants"},
		{"Err/EmptyTenants", 0, func(s *plan.Spec) { s.Tenants = []plan.TenantSpec{} }, "tenants"},
		{"Err/TooManyTenants", 3, func(s *plan.Spec) { s.Tenants = tenants(4) }, "tenants"},
		{"Err/TooManyTenantsDefault", 0, func(s *plan.Spec) { s.Tenants = tenants(plan.MaxTenantsDefault + 1) }, "tenants"},
		{"Err/DuplicateTenant", 0, func(s *plan.Spec) { s.Tenants[1].TenantID = "acme" }, "tenants[1]"},
		{"Err/DuplicateTenantLater", 0, func(s *plan.Spec) {
			s.Tenants = append(tenants(5), plan.TenantSpec{TenantID: "t3"})
		}, "tenants[5]"},
		{"Err/TenantEmpty", 0, func(s *plan.Spec) { s.Tenants[0].TenantID = "" }, "tenants[0]"},
		{"Err/TenantHashTag", 0, func(s *plan.Spec) { s.Tenants[1].TenantID = "{acme}" }, "tenants[1]"},
		{"Err/TenantOpenBrace", 0, func(s *plan.Spec) { s.Tenants[1].TenantID = "ac{me" }, "tenants[1]"},
		{"Err/TenantColon", 0, func(s *plan.Spec) { s.Tenants[1].TenantID = "acme:lock" }, "tenants[1]"},
		{"Err/TenantStar", 0, func(s *plan.Spec) { s.Tenants[1].TenantID = "*" }, "tenants[1]"},
		{"Err/TenantQuestion", 0, func(s *plan.Spec) { s.Tenants[1].TenantID = "acm?" }, "tenants[1]"},
		{"Err/TenantSpace", 0, func(s *plan.Spec) { s.Tenants[1].TenantID = "ac me" }, "tenants[1]"},
		{"Err/TenantNewline", 0, func(s *plan.Spec) { s.Tenants[1].TenantID = "acme\nlevel=error" }, "tenants[1]"},
		{"Err/TenantNUL", 0, func(s *plan.Spec) { s.Tenants[1].TenantID = "acme\x00" }, "tenants[1]"},
		{"Err/Tenant129", 0, func(s *plan.Spec) { s.Tenants[1].TenantID = strings.Repeat("a", 129) }, "tenants[1]"},
		{"Err/TenantUnicode", 0, func(s *plan.Spec) { s.Tenants[1].TenantID = "société" }, "tenants[1]"},
		{"Err/TenantLeadingDash", 0, func(s *plan.Spec) { s.Tenants[1].TenantID = "-acme" }, "tenants[1]"},

		{"Err/ParamKeyEmpty", 0, func(s *plan.Spec) { s.Params = map[string]any{"": 1} }, "params"},
		{"Err/ParamKeyDigitFirst", 0, func(s *plan.Spec) { s.Params = map[string]any{"1a": 1} }, "params"},
		{"Err/ParamKeyDash", 0, func(s *plan.Spec) { s.Params = map[string]any{"a-b": 1} }, "params"},
		{"Err/ParamKeyDot", 0, func(s *plan.Spec) { s.Params = map[string]any{"a.b": 1} }, "params"},
		{"Err/ParamKeyTemplate", 0, func(s *plan.Spec) { s.Params = map[string]any{"{{x}}": 1} }, "params"},
		{"Err/ParamKeyNewline", 0, func(s *plan.Spec) { s.Params = map[string]any{"a\n": 1} }, "params"},
		{"Err/ParamKey65", 0, func(s *plan.Spec) { s.Params = map[string]any{strings.Repeat("k", 65): 1} }, "params"},
		{"Err/ParamKeyUnicode", 0, func(s *plan.Spec) { s.Params = map[string]any{"clé": 1} }, "params"},
		{"Err/TooManyParams", 0, func(s *plan.Spec) { s.Params = params(plan.MaxParams + 1) }, "params"},
		{"Err/ParamsTooBig", 0, func(s *plan.Spec) { s.Params = bigParams(plan.MaxParamsBytes + 1) }, "params"},
		{"Err/ParamsNotJSON", 0, func(s *plan.Spec) { s.Params = map[string]any{"f": func() {}} }, "params"},
		{"Err/TenantParamKey", 0, func(s *plan.Spec) { s.Tenants[1].Params = map[string]any{"bad-key": 1} }, "tenants[1] (globex): params"},
		{"Err/TenantTooManyParams", 0, func(s *plan.Spec) { s.Tenants[0].Params = params(plan.MaxParams + 1) }, "tenants[0] (acme): params"},
		{"Err/TenantParamsTooBig", 0, func(s *plan.Spec) { s.Tenants[0].Params = bigParams(plan.MaxParamsBytes + 1) }, "tenants[0] (acme): params"},

		{"Err/MaxConcurrencyNegative", 0, func(s *plan.Spec) { s.MaxConcurrency = -1 }, "maxConcurrency"},
		{"Err/MaxConcurrencyTooHigh", 0, func(s *plan.Spec) { s.MaxConcurrency = plan.MaxConcurrencyLimit + 1 }, "maxConcurrency"},
		{"Err/OnTenantLockedUnknown", 0, func(s *plan.Spec) { s.OnTenantLocked = "retry" }, "onTenantLocked"},
		{"Err/OnTenantLockedCase", 0, func(s *plan.Spec) { s.OnTenantLocked = "WAIT" }, "onTenantLocked"},
		{"Err/OnTenantLockedHostile", 0, func(s *plan.Spec) { s.OnTenantLocked = "x\ny" }, "onTenantLocked"},
		{"Err/LockWaitNegative", 0, func(s *plan.Spec) { s.LockWait = -1 }, "lockWait"},
		{"Err/LockWaitTooLong", 0, func(s *plan.Spec) { s.LockWait = task.Duration(plan.MaxLockWait + time.Nanosecond) }, "lockWait"},
		{"Err/ThresholdNegative", 0, func(s *plan.Spec) { s.FailureThreshold = &plan.FailureThreshold{MaxFailed: -1} }, "failureThreshold"},
		{"Err/ThresholdAboveMaxTenants", 5, func(s *plan.Spec) { s.FailureThreshold = &plan.FailureThreshold{MaxFailed: 6} }, "failureThreshold"},
		{"Err/ThresholdAboveDefault", 0, func(s *plan.Spec) {
			s.FailureThreshold = &plan.FailureThreshold{MaxFailed: plan.MaxTenantsDefault + 1}
		}, "failureThreshold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := validSpec()
			tt.mutate(s)
			err := s.Validate(tt.maxTenants)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted the spec")
			}
			if !errors.Is(err, plan.ErrInvalid) {
				t.Errorf("error %q does not wrap plan.ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q does not name %q", err, tt.field)
			}
			if strings.IndexFunc(err.Error(), unicode.IsControl) >= 0 || !utf8Valid(err.Error()) {
				t.Errorf("error %q carries control characters or invalid UTF-8 from the input", err)
			}
			if len(err.Error()) > 400 {
				t.Errorf("error is %d bytes long: input is not cut", len(err.Error()))
			}
		})
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

func TestSpecFromJSON(t *testing.T) {
	t.Parallel()
	in := `{
		"name": "rollout 1.2",
		"stages": [
			{"name": "deploy", "kind": "http", "timeout": "2m",
			 "retry": {"maxAttempts": 3, "backoff": "exponential", "baseDelay": "1s", "maxDelay": "10s", "jitter": 0.2},
			 "http": {"url": "https://{{.TenantID}}.example/deploy"}},
			{"name": "settle", "kind": "sleep", "sleep": {"duration": "5s"}}
		],
		"tenants": [{"tenantId": "acme", "params": {"region": "eu"}}, {"tenantId": "globex"}],
		"params": {"version": "1.2"},
		"maxConcurrency": 20,
		"onTenantLocked": "wait",
		"lockWait": "90s",
		"failureThreshold": {"maxFailed": 1},
		"start": false
	}`
	var s plan.Spec
	if err := json.Unmarshal([]byte(in), &s); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(0); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if s.ShouldStart() {
		t.Error(`ShouldStart() with "start": false`)
	}
	p := s.NewPlan("plan-1", s.Stages, t0)
	if p.LockWait != 90*time.Second || p.MaxConcurrency != 20 || p.OnTenantLocked != plan.LockWait || p.MaxFailed != 1 {
		t.Errorf("NewPlan = %+v", p)
	}
	if p.Stages[0].Retry.MaxDelay.D() != 10*time.Second || string(p.Stages[1].Config) != `{"duration": "5s"}` {
		t.Errorf("stages = %+v", p.Stages)
	}

	t.Run("Err/UnknownStageField", func(t *testing.T) {
		t.Parallel()
		var s plan.Spec
		err := json.Unmarshal([]byte(`{"name":"x","stages":[{"name":"a","kind":"sleep","duration":"1s"}],"tenants":[{"tenantId":"a"}]}`), &s)
		if err == nil || !strings.Contains(err.Error(), `"duration"`) {
			t.Errorf("err = %v, want unknown field \"duration\"", err)
		}
	})
	t.Run("OK/NullLockWait", func(t *testing.T) {
		t.Parallel()
		var s plan.Spec
		if err := json.Unmarshal([]byte(`{"name":"x","pipeline":"std","tenants":[{"tenantId":"a"}],"lockWait":null}`), &s); err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(0); err != nil || s.LockWait != 0 {
			t.Errorf("lockWait null: %v, %v", s.LockWait, err)
		}
	})
}

func TestNewPlan(t *testing.T) {
	t.Parallel()
	stages := []task.StageSpec{{Name: "a", Kind: "sleep"}}
	tests := []struct {
		name   string
		mutate func(*plan.Spec)
		check  func(*plan.Plan) string
	}{
		{"Defaults", func(*plan.Spec) {}, func(p *plan.Plan) string {
			if p.MaxConcurrency != plan.MaxConcurrencyDefault || p.OnTenantLocked != plan.LockFail || p.LockWait != 0 || p.MaxFailed != 0 {
				return fmt.Sprintf("concurrency %d, policy %s, lockWait %v, maxFailed %d",
					p.MaxConcurrency, p.OnTenantLocked, p.LockWait, p.MaxFailed)
			}
			return ""
		}},
		{"WaitGetsDefaultLockWait", func(s *plan.Spec) { s.OnTenantLocked = plan.LockWait }, func(p *plan.Plan) string {
			if p.OnTenantLocked != plan.LockWait || p.LockWait != plan.LockWaitDefault {
				return fmt.Sprintf("policy %s, lockWait %v", p.OnTenantLocked, p.LockWait)
			}
			return ""
		}},
		{"WaitKeepsLockWait", func(s *plan.Spec) {
			s.OnTenantLocked, s.LockWait = plan.LockWait, task.Duration(30*time.Second)
		}, func(p *plan.Plan) string {
			if p.LockWait != 30*time.Second {
				return fmt.Sprintf("lockWait %v", p.LockWait)
			}
			return ""
		}},
		{"FailKeepsGivenLockWait", func(s *plan.Spec) { s.LockWait = task.Duration(time.Minute) }, func(p *plan.Plan) string {
			if p.OnTenantLocked != plan.LockFail || p.LockWait != time.Minute {
				return fmt.Sprintf("policy %s, lockWait %v", p.OnTenantLocked, p.LockWait)
			}
			return ""
		}},
		{"ExplicitValues", func(s *plan.Spec) {
			s.MaxConcurrency, s.OnTenantLocked = 3, plan.LockFail
			s.FailureThreshold = &plan.FailureThreshold{MaxFailed: 7}
		}, func(p *plan.Plan) string {
			if p.MaxConcurrency != 3 || p.MaxFailed != 7 {
				return fmt.Sprintf("concurrency %d, maxFailed %d", p.MaxConcurrency, p.MaxFailed)
			}
			return ""
		}},
		{"ThresholdZeroMeansNone", func(s *plan.Spec) { s.FailureThreshold = &plan.FailureThreshold{} }, func(p *plan.Plan) string {
			if p.MaxFailed != 0 {
				return fmt.Sprintf("maxFailed %d", p.MaxFailed)
			}
			return ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &plan.Spec{Name: "n", Pipeline: "std", Tenants: tenants(3), Params: map[string]any{"v": 1}}
			tt.mutate(s)
			p := s.NewPlan("plan-1", stages, t0)
			if msg := tt.check(p); msg != "" {
				t.Errorf("NewPlan: %s", msg)
			}
			if p.ID != "plan-1" || p.Name != "n" || p.Status != plan.StatusCreated || p.Pipeline != "std" ||
				p.TotalTasks != 3 || !reflect.DeepEqual(p.Stages, stages) || !reflect.DeepEqual(p.Params, s.Params) {
				t.Errorf("NewPlan = %+v", p)
			}
			if !p.CreatedAt.Equal(t0) || p.CreatedAt.Location() != time.UTC || p.UpdatedAt != p.CreatedAt {
				t.Errorf("CreatedAt %v, UpdatedAt %v; want %v in UTC", p.CreatedAt, p.UpdatedAt, t0)
			}
			if !p.StartedAt.IsZero() || !p.FinishedAt.IsZero() || p.Owner != "" || p.Reason != "" {
				t.Errorf("NewPlan set run fields: %+v", p)
			}
		})
	}
}

func TestShouldStart(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	for _, tt := range []struct {
		start *bool
		want  bool
	}{{nil, true}, {&yes, true}, {&no, false}} {
		if got := (&plan.Spec{Start: tt.start}).ShouldStart(); got != tt.want {
			t.Errorf("ShouldStart with %v = %v, want %v", tt.start, got, tt.want)
		}
	}
}

func TestTenantParams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		plan   map[string]any
		tenant map[string]any
		want   map[string]any
	}{
		{"NilWhenNone", nil, nil, nil},
		{"NilWhenBothEmpty", map[string]any{}, map[string]any{}, nil},
		{"PlanDefaultsOnly", map[string]any{"v": "1", "r": "us"}, nil, map[string]any{"v": "1", "r": "us"}},
		{"TenantOnly", nil, map[string]any{"r": "eu"}, map[string]any{"r": "eu"}},
		{"TenantOverrides", map[string]any{"v": "1", "r": "us"}, map[string]any{"r": "eu", "x": true},
			map[string]any{"v": "1", "r": "eu", "x": true}},
		{"TenantNilValueOverrides", map[string]any{"r": "us"}, map[string]any{"r": nil}, map[string]any{"r": nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &plan.Spec{Params: tt.plan}
			ts := plan.TenantSpec{TenantID: "acme", Params: tt.tenant}
			got := s.TenantParams(ts)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("TenantParams = %#v, want %#v", got, tt.want)
			}
			if got == nil {
				return
			}
			// The result is a new map: changing it changes neither input.
			planBefore, tenantBefore := fmt.Sprint(tt.plan), fmt.Sprint(tt.tenant)
			got["injected"] = 1
			got["r"] = "changed"
			if fmt.Sprint(tt.plan) != planBefore || fmt.Sprint(tt.tenant) != tenantBefore {
				t.Error("changing the merged params changed the spec")
			}
		})
	}
}

func TestCheckReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		reason string
		ok     bool
	}{
		{"OK/Short", "rollback requested by SRE", true},
		{"OK/500Bytes", strings.Repeat("r", 500), true},
		{"OK/Unicode", "incident #42 — réparé ✓", true},
		{"Err/Empty", "", false},
		{"Err/501Bytes", strings.Repeat("r", 501), false},
		{"Err/Newline", "fix\nlevel=error msg=forged", false},
		{"Err/NUL", "fix\x00", false},
		{"Err/InvalidUTF8", "fix\xfe", false},
		{"Err/RightToLeftOverride", "approved\u202e devorppa ton", false},
		{"Err/LineSeparator", "fix\u2028level=error msg=forged", false},
		{"Err/ParagraphSeparator", "fix\u2029x", false},
		{"Err/Isolate", "fix \u2066x\u2069", false},
		{"OK/ZeroWidthJoiner", "on-call 👩\u200d💻 approved", true},
		{"OK/LeadingSpace", "  INC-3 target fixed", true},
		{"Err/Spaces", "   ", false},
		{"Err/NoBreakAndEmSpaces", " \u00a0\u2003 ", false},
		{"Err/ZeroWidthSpace", "\u200b", false},
		{"Err/ByteOrderMark", "\ufeff", false},
		{"Err/WordJoinerAndSpace", "\u2060 \u200b", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := plan.CheckReason(tt.reason)
			if tt.ok {
				if err != nil {
					t.Errorf("CheckReason(%q): %v", tt.reason, err)
				}
				return
			}
			if !errors.Is(err, plan.ErrInvalid) || !strings.Contains(err.Error(), "reason") {
				t.Errorf("CheckReason(%q) = %v, want ErrInvalid naming the reason", tt.reason, err)
			}
		})
	}
}

func TestValidateStages(t *testing.T) {
	t.Parallel()
	if err := plan.ValidateStages(nil); err != nil {
		t.Errorf("ValidateStages(nil) = %v (a pipeline's stages are checked elsewhere for emptiness)", err)
	}
	if err := plan.ValidateStages(stageList(task.MaxStages)); err != nil {
		t.Errorf("ValidateStages(%d stages) = %v", task.MaxStages, err)
	}
	err := plan.ValidateStages(stageList(task.MaxStages + 1))
	if !errors.Is(err, plan.ErrInvalid) || !strings.Contains(err.Error(), "65 stages") {
		t.Errorf("ValidateStages(65 stages) = %v", err)
	}
}
