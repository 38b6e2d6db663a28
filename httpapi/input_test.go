package httpapi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/deploycoord/deploycoord/httpapi"
)

func TestBadBodies(t *testing.T) {
	t.Parallel()
	const plans, pause = "/v1/plans", "/v1/tenants/t-001/pause"
	validPlan := `{"name": "r", "pipeline": "p", "tenants": [{"tenantId": "t-001"}]}`
	tests := []struct {
		name        string
		path        string
		body        string
		contentType string
		status      int
		code        string
		detail      string // a substring of the detail
	}{
		{"MalformedPlan", plans, `{"name": "r",`, "", 400, httpapi.CodeInvalidArgument, "malformed JSON"},
		{"MalformedSmall", pause, `{"reason": }`, "", 400, httpapi.CodeInvalidArgument, "malformed JSON"},
		{"UnknownFieldPlan", plans, `{"name": "r", "tenant": []}`, "", 400, httpapi.CodeInvalidArgument, `unknown field "tenant"`},
		{"UnknownNestedField", plans, `{"name": "r", "tenants": [{"tenantId": "t-001", "parms": {}}]}`, "", 400, httpapi.CodeInvalidArgument, `unknown field "tenants[0].parms" (known there: params, tenantId)`},
		{"CaseTenantID", plans, `{"name": "r", "pipeline": "p", "tenants": [{"tenantID": "t-001"}]}`, "", 400, httpapi.CodeInvalidArgument,
			`unknown field "tenants[0].tenantID": field names are case-sensitive, did you mean "tenantId"?`},
		{"CaseNAME", plans, `{"NAME": "r", "pipeline": "p", "tenants": [{"tenantId": "t-001"}]}`, "", 400, httpapi.CodeInvalidArgument,
			`unknown field "NAME": field names are case-sensitive, did you mean "name"?`},
		{"CaseStageTimeout", plans, `{"name": "r", "stages": [{"name": "a", "kind": "noop"}, {"name": "b", "kind": "sleep", "tImeout": "1s", "sleep": {"duration": "1s"}}], "tenants": [{"tenantId": "t-001"}]}`,
			"", 400, httpapi.CodeInvalidArgument, `unknown field "stages[1].tImeout": field names are case-sensitive, did you mean "timeout"?`},
		{"CaseRetry", plans, `{"name": "r", "stages": [{"name": "a", "kind": "noop", "retry": {"MaxAttempts": 2}}], "tenants": [{"tenantId": "t-001"}]}`,
			"", 400, httpapi.CodeInvalidArgument, `unknown field "stages[0].retry.MaxAttempts": field names are case-sensitive, did you mean "maxAttempts"?`},
		{"UnknownStageKey", plans, `{"name": "r", "stages": [{"name": "a", "kind": "http", "sleep": {}}], "tenants": [{"tenantId": "t-001"}]}`,
			"", 400, httpapi.CodeInvalidArgument, `unknown field "stages[0].sleep" (known there: http, kind, name, retry, timeout)`},
		{"CaseSmall", pause, `{"Reason": "r"}`, "", 400, httpapi.CodeInvalidArgument, `unknown field "Reason": field names are case-sensitive, did you mean "reason"?`},
		{"HostileKey", pause, `{"reason": "r", "{a}:*\u0007": 1}`, "", 400, httpapi.CodeInvalidArgument, `unknown field "{a}:*\a" (known there: reason)`},
		{"UnknownFieldSmall", pause, `{"reason": "r", "force": true}`, "", 400, httpapi.CodeInvalidArgument, `unknown field "force"`},
		{"UnknownFieldResumeOnlyOnPause", pause, `{"reason": "r", "includeOrphaned": true}`, "", 400, httpapi.CodeInvalidArgument, "unknown field"},
		{"TrailingGarbagePlan", plans, validPlan + ` x`, "", 400, httpapi.CodeInvalidArgument, "exactly one JSON value"},
		{"TrailingObjectSmall", pause, `{"reason": "r"}{"reason": "s"}`, "", 400, httpapi.CodeInvalidArgument, "exactly one JSON value"},
		{"WrongType", pause, `{"reason": 7}`, "", 400, httpapi.CodeInvalidArgument, `field "reason"`},
		{"NotAnObject", pause, `["reason"]`, "", 400, httpapi.CodeInvalidArgument, "JSON object"},
		{"Null", pause, `null`, "", 400, httpapi.CodeInvalidArgument, "JSON object"},
		{"EmptyBody", pause, ` `, "", 400, httpapi.CodeInvalidArgument, "empty"},
		{"BadDuration", plans, `{"name": "r", "lockWait": "soon"}`, "", 400, httpapi.CodeInvalidArgument, `invalid duration "soon"`},
		{"WrongContentTypePlan", plans, validPlan, "text/plain", 415, httpapi.CodeUnsupportedMediaType, "application/json"},
		{"FormSmall", pause, `reason=r`, "application/x-www-form-urlencoded", 415, httpapi.CodeUnsupportedMediaType, "application/json"},
		{"BadCharset", pause, `{"reason": "r"}`, "application/json; charset=latin1", 415, httpapi.CodeUnsupportedMediaType, "utf-8"},
		{"TooLargePlan", plans, `{"name": "` + strings.Repeat("a", 2048) + `"}`, "", 413, httpapi.CodePayloadTooLarge, "1024 bytes"},
		{"TooLargeSmall", pause, `{"reason": "` + strings.Repeat("a", 300) + `"}`, "", 413, httpapi.CodePayloadTooLarge, "256 bytes"},
		{"TooLargeTrailing", pause, `{"reason": "r"}` + strings.Repeat(" ", 300), "", 413, httpapi.CodePayloadTooLarge, "256 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := newFake()
			h, _ := newAPI(t, svc, httpapi.Config{MaxBodyBytes: 1024, MaxSmallBodyBytes: 256})
			a := serve(t, h, request{method: "POST", path: tt.path, body: tt.body, contentType: tt.contentType})
			p := a.problem(t, tt.status, tt.code)
			if !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("detail = %q, want it to mention %q", p.Detail, tt.detail)
			}
			if svc.Calls() != 0 {
				t.Errorf("service called on bad input: %+v", svc.Last())
			}
		})
	}
}

func TestBodyLimitsDefault(t *testing.T) {
	t.Parallel()
	svc := newFake()
	h, _ := newAPI(t, svc, httpapi.Config{})
	// 100 KiB is over the small default (64 KiB) for a task action...
	big := `{"reason": "` + strings.Repeat("a", 100<<10) + `"}`
	serve(t, h, request{method: "POST", path: "/v1/tenants/t-001/cancel", body: big}).problem(t, 413, httpapi.CodePayloadTooLarge)
	// ...and far under the plan default (16 MiB): 20 000 tenants.
	var b strings.Builder
	b.WriteString(`{"name": "big", "pipeline": "p", "tenants": [`)
	for i := range 20000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"tenantId": "tenant-%06d", "params": {"version": "1.2.3"}}`, i)
	}
	b.WriteString(`]}`)
	if a := serve(t, h, request{method: "POST", path: "/v1/plans", body: b.String()}); a.Status != 201 {
		t.Fatalf("plan of %d bytes: %d %s", b.Len(), a.Status, a.Body)
	}
	if n := len(svc.Last().Spec.Tenants); n != 20000 {
		t.Errorf("spec has %d tenants", n)
	}
}

func TestBadPathIDs(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 200)
	bad := []struct {
		name, raw string // raw is the escaped path segment
	}{
		{"Braces", "%7Bt-001%7D"},
		{"Colon", "t:001"},
		{"Star", "t-*"},
		{"Newline", "t-001%0Ainjected"},
		{"NUL", "t%00"},
		{"Slash", "a%2Fb"},
		{"Dots", ".."},
		{"Space", "t%20001"},
		{"Unicode", "t-%C3%A9"},
		{"Long", long},
	}
	routes := []struct {
		method, prefix, suffix, body string
	}{
		{"GET", "/v1/tenants/", "/task", ""},
		{"GET", "/v1/tenants/", "/checkpoint", ""},
		{"HEAD", "/v1/tenants/", "/checkpoint", ""},
		{"GET", "/v1/tenants/", "/history", ""},
		{"GET", "/v1/tenants/", "/timeline", ""},
		{"POST", "/v1/tenants/", "/retry", `{"reason": "r"}`},
		{"POST", "/v1/tenants/", "/pause", `{"reason": "r"}`},
		{"POST", "/v1/tenants/", "/resume", `{"reason": "r"}`},
		{"POST", "/v1/tenants/", "/cancel", `{"reason": "r"}`},
		{"GET", "/v1/tenants/", "/lock", ""},
		{"DELETE", "/v1/tenants/", "/lock", `{"reason": "r", "expectedFence": 1}`},
		{"GET", "/v1/plans/", "", ""},
		{"GET", "/v1/plans/", "/tasks", ""},
		{"POST", "/v1/plans/", "/start", `{"reason": "r"}`},
		{"POST", "/v1/plans/", "/pause", `{"reason": "r"}`},
		{"POST", "/v1/plans/", "/resume", `{"reason": "r"}`},
		{"POST", "/v1/plans/", "/cancel", `{"reason": "r"}`},
		{"GET", "/v1/tasks/", "", ""},
	}
	extra := []struct{ name, raw string }{
		// Valid tenant ids that are not plan or task ids.
		{"NotAPlanOrTaskID", "t-001"},
		{"LowercaseULID", "plan-01jdqzv5x8m7r2k9c3b4n6p0qs"},
	}
	for _, rt := range routes {
		cases := bad
		if rt.prefix != "/v1/tenants/" {
			cases = append(append(cases[:0:0], bad...), extra...)
		}
		for _, c := range cases {
			t.Run(rt.method+rt.prefix+rt.suffix+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				svc := newFake()
				h, _ := newAPI(t, svc, httpapi.Config{})
				a := serve(t, h, request{method: rt.method, path: rt.prefix + c.raw + rt.suffix, body: rt.body})
				if rt.method == "HEAD" {
					if a.Status != 400 || len(a.Body) != 0 {
						t.Fatalf("HEAD answer = %d %q", a.Status, a.Body)
					}
				} else {
					p := a.problem(t, 400, httpapi.CodeInvalidArgument)
					if strings.ContainsAny(p.Detail, "\n\r\x00") || len(p.Detail) > 300 {
						t.Errorf("detail echoes raw input: %q", p.Detail)
					}
				}
				if svc.Calls() != 0 {
					t.Errorf("service called with a bad id: %+v", svc.Last())
				}
			})
		}
	}
}

func TestBadQueries(t *testing.T) {
	t.Parallel()
	pp := "/v1/plans/" + planID
	tests := []struct{ name, path string }{
		{"PlansStatusLowercase", "/v1/plans?status=running"},
		{"PlansStatusTask", "/v1/plans?status=PENDING"},
		{"PlansLimitZero", "/v1/plans?limit=0"},
		{"PlansLimitOver", "/v1/plans?limit=1001"},
		{"PlansLimitNotANumber", "/v1/plans?limit=ten"},
		{"PlansCursorHostile", "/v1/plans?cursor=%0Aa%7Bb%7D"},
		{"PlansCursorLong", "/v1/plans?cursor=" + strings.Repeat("a", 257)},
		{"PlansUnknownParam", "/v1/plans?state=RUNNING"},
		{"PlansRepeated", "/v1/plans?limit=1&limit=2"},
		{"TasksStatusPlan", pp + "/tasks?status=CREATED"},
		{"TasksOrphanedYes", pp + "/tasks?orphaned=yes"},
		{"TasksOrphaned1", pp + "/tasks?orphaned=1"},
		{"TasksLimitNegative", pp + "/tasks?limit=-1"},
		{"HistoryLimitOver", "/v1/tenants/t-001/history?limit=1001"},
		{"TimelineLimitOver", "/v1/tenants/t-001/timeline?limit=201"},
		{"TaskUnknownParam", "/v1/tenants/t-001/task?verbose=true"},
		{"PlanUnknownParam", pp + "?x=1"},
		{"MalformedQuery", "/v1/plans?limit=%zz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := newFake()
			h, _ := newAPI(t, svc, httpapi.Config{})
			p := serve(t, h, request{method: "GET", path: tt.path}).problem(t, 400, httpapi.CodeInvalidArgument)
			if strings.ContainsAny(p.Detail, "\n\r") {
				t.Errorf("detail echoes raw input: %q", p.Detail)
			}
			if svc.Calls() != 0 {
				t.Errorf("service called on a bad query: %+v", svc.Last())
			}
		})
	}
}

func TestTenantsStatusBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, body, detail string }{
		{"TooMany", tenantIDs(httpapi.MaxStatusTenants+1, 0), "1001 ids, at most 1000"},
		{"None", `{"tenantIds": []}`, "at least one"},
		{"Missing", `{}`, "at least one"},
		{"BadID", `{"tenantIds": ["t-001", "t:002"]}`, `tenantIds[1]: tenant id "t:002"`},
		{"NotStrings", `{"tenantIds": [1]}`, "tenantIds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := newFake()
			h, _ := newAPI(t, svc, httpapi.Config{})
			p := serve(t, h, request{method: "POST", path: "/v1/tenants:status", body: tt.body}).problem(t, 400, httpapi.CodeInvalidArgument)
			if !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("detail = %q, want %q", p.Detail, tt.detail)
			}
			if svc.Calls() != 0 {
				t.Errorf("service called %d times", svc.Calls())
			}
		})
	}
}
