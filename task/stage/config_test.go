package stage_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
)

// TestCompile_ConfigErrors checks that bad configs are refused at compile
// time with errors that name the stage and the field.
func TestCompile_ConfigErrors(t *testing.T) {
	t.Parallel()
	r := stage.NewRegistry(stage.Options{AllowExec: true, InlineHTTPHosts: []string{"cfg.example:8080"}})
	const okURL = `"url": "http://cfg.example:8080/x"`
	huge := strings.Repeat("a", 100<<10)
	tests := []struct {
		name   string
		kind   string
		config string
		src    stage.Source
		want   error
		parts  []string
	}{
		// sleep
		{"SleepUnknownField", "sleep", `{"duration": "1s", "durration": "2s"}`, stage.SourceInline, stage.ErrInvalid,
			[]string{"sleep", `unknown field "durration"`, "known: duration"}},
		{"SleepFieldCaseMatters", "sleep", `{"Duration": "1s"}`, stage.SourceInline, stage.ErrInvalid, []string{`unknown field "Duration"`}},
		{"SleepBadDuration", "sleep", `{"duration": "2 parsecs"}`, stage.SourceInline, stage.ErrInvalid, []string{"sleep.duration", `"2 parsecs"`}},
		{"SleepWrongType", "sleep", `{"duration": true}`, stage.SourceInline, stage.ErrInvalid, []string{"sleep.duration"}},
		{"SleepMissing", "sleep", ``, stage.SourceInline, stage.ErrInvalid, []string{"sleep.duration: required"}},
		{"SleepZero", "sleep", `{"duration": "0s"}`, stage.SourceInline, stage.ErrInvalid, []string{"sleep.duration: required"}},
		{"SleepNegative", "sleep", `{"duration": "-1s"}`, stage.SourceInline, stage.ErrInvalid, []string{"sleep.duration", "out of range"}},
		{"SleepTooLong", "sleep", `{"duration": "25h"}`, stage.SourceInline, stage.ErrInvalid, []string{"sleep.duration", "out of range"}},
		{"NotAnObject", "sleep", `["1s"]`, stage.SourceInline, stage.ErrInvalid, []string{"sleep: want a JSON object"}},
		{"HostileKey", "sleep", `{"dur\u0001ation\n": "1s"}`, stage.SourceInline, stage.ErrInvalid, []string{`unknown field "dur\x01ation\n"`}},
		{"HugeKey", "noop", `{"` + huge + `": 1}`, stage.SourceInline, stage.ErrInvalid, []string{"unknown field", "(102400 bytes)"}},
		{"NoopUnknownField", "noop", `{"output": {}}`, stage.SourceInline, stage.ErrInvalid, []string{`unknown field "output"`}},

		// http
		{"HTTPBadMethod", "http", `{"method": "FETCH", ` + okURL + `}`, stage.SourceInline, stage.ErrInvalid, []string{"http.method", `"FETCH"`, "GET, POST"}},
		{"HTTPEmptyURL", "http", `{"url": ""}`, stage.SourceInline, stage.ErrInvalid, []string{"http.url: required"}},
		{"HTTPMissingURL", "http", `{"method": "GET"}`, stage.SourceOperator, stage.ErrInvalid, []string{"http.url: required"}},
		{"HTTPBadTemplate", "http", `{"url": "http://cfg.example:8080/{{.TenantID"}`, stage.SourceInline, stage.ErrInvalid, []string{"http.url", "bad template", "unclosed action"}},
		{"HTTPBraces", "http", `{"url": "http://h/{{{{}}}}"}`, stage.SourceOperator, stage.ErrInvalid, []string{"http.url", "bad template"}},
		{"HTTPUnknownTemplateField", "http", `{"url": "http://h/{{.TenantId}}"}`, stage.SourceOperator, stage.ErrInvalid,
			[]string{"http.url", `unknown field ".TenantId"`, ".TenantID"}},
		{"HTTPUnknownTemplateFieldViaDollar", "http", `{"url": "http://h/{{with .Params}}{{$.Tenant}}{{end}}"}`, stage.SourceOperator, stage.ErrInvalid,
			[]string{`unknown field ".Tenant"`}},
		{"HTTPUnknownFunction", "http", `{"url": "http://h/{{exec .TenantID}}"}`, stage.SourceOperator, stage.ErrInvalid, []string{"http.url", `function "exec" not defined`}},
		{"HTTPDefine", "http", `{"url": "http://h/{{define \"x\"}}{{template \"x\"}}{{end}}{{template \"x\"}}"}`, stage.SourceOperator, stage.ErrInvalid,
			[]string{"http.url", "define and block actions are not allowed"}},
		{"HTTPTemplateAction", "http", `{"url": "http://h/{{template \"y\"}}"}`, stage.SourceOperator, stage.ErrInvalid, []string{"template actions are not allowed"}},
		{"HTTPRangeInline", "http", `{` + okURL + `, "body": "{{range .Params}}x{{end}}"}`, stage.SourceInline, stage.ErrNotAllowed,
			[]string{"http.body", "range actions are not allowed in inline stages"}},
		{"HTTPURLControlChar", "http", `{"url": "http://h/a\u0000b"}`, stage.SourceOperator, stage.ErrInvalid, []string{"http.url", "control characters"}},
		{"HTTPURLHuge", "http", `{"url": "http://h/` + huge + `"}`, stage.SourceOperator, stage.ErrInvalid, []string{"http.url", "limit 4096"}},
		{"HTTPURLBadScheme", "http", `{"url": "file:///etc/passwd"}`, stage.SourceOperator, stage.ErrInvalid, []string{"http.url", `scheme must be http or https, not "file"`}},
		{"HTTPURLNoHost", "http", `{"url": "http:///path"}`, stage.SourceOperator, stage.ErrInvalid, []string{"http.url", "no host"}},
		{"HTTPBodyHuge", "http", `{` + okURL + `, "body": "` + huge + `"}`, stage.SourceInline, stage.ErrInvalid, []string{"http.body", "limit 65536"}},
		{"HTTPHeaderBadName", "http", `{` + okURL + `, "headers": {"Bad Header": "v"}}`, stage.SourceInline, stage.ErrInvalid,
			[]string{`http.headers["Bad Header"]`, "not a valid header name"}},
		{"HTTPHeaderReserved", "http", `{` + okURL + `, "headers": {"idempotency-key": "mine"}}`, stage.SourceInline, stage.ErrInvalid,
			[]string{"Idempotency-Key is set by deploycoord"}},
		{"HTTPHeaderTwice", "http", `{` + okURL + `, "headers": {"X-A": "1", "x-a": "2"}}`, stage.SourceInline, stage.ErrInvalid, []string{"X-A is given twice"}},
		{"HTTPHeaderCRLF", "http", `{` + okURL + `, "headers": {"X-A": "v\r\nX-Injected: 1"}}`, stage.SourceInline, stage.ErrInvalid,
			[]string{`http.headers["X-A"]`, "control characters"}},
		{"HTTPHeaderNotString", "http", `{` + okURL + `, "headers": {"X-A": 1}}`, stage.SourceInline, stage.ErrInvalid, []string{"http.headers", "want a string, got JSON number"}},
		{"HTTPStatusOutOfRange", "http", `{` + okURL + `, "successStatus": [200, 600]}`, stage.SourceInline, stage.ErrInvalid, []string{"http.successStatus", "600"}},
		{"HTTPStatusNotInt", "http", `{` + okURL + `, "successStatus": ["200"]}`, stage.SourceInline, stage.ErrInvalid, []string{"http.successStatus", "want an integer, got JSON string"}},
		{"HTTPStatusTwice", "http", `{` + okURL + `, "retryableStatus": [503, 503]}`, stage.SourceInline, stage.ErrInvalid, []string{"http.retryableStatus", "503 is listed twice"}},
		{"HTTPStatusOverlap", "http", `{` + okURL + `, "successStatus": [200], "retryableStatus": [200]}`, stage.SourceInline, stage.ErrInvalid,
			[]string{"http.retryableStatus", "200 is also in successStatus"}},
		{"HTTPPollUnknownField", "http", `{` + okURL + `, "poll": {"intervall": "1s"}}`, stage.SourceInline, stage.ErrInvalid,
			[]string{"http.poll", `unknown field "intervall"`}},
		{"HTTPPollIntervalTooShort", "http", `{` + okURL + `, "poll": {"interval": "1ms"}}`, stage.SourceInline, stage.ErrInvalid, []string{"http.poll.interval", "out of range"}},
		{"HTTPPollUntilBadField", "http", `{` + okURL + `, "poll": {"until": "{{.Body}}"}}`, stage.SourceInline, stage.ErrInvalid,
			[]string{"http.poll.until", `unknown field ".Body"`, ".Response", ".Status"}},

		// exec
		{"ExecNoArgv", "exec", `{}`, stage.SourceOperator, stage.ErrInvalid, []string{"exec.argv: required"}},
		{"ExecRelative", "exec", `{"argv": ["deploy"]}`, stage.SourceOperator, stage.ErrInvalid, []string{"exec.argv[0]", `"deploy" is not an absolute path`}},
		{"ExecTemplatedCommand", "exec", `{"argv": ["/usr/bin/{{.Stage}}"]}`, stage.SourceOperator, stage.ErrInvalid, []string{"exec.argv[0]", "must be literal"}},
		{"ExecBadArgTemplate", "exec", `{"argv": ["/bin/echo", "ok", "{{.Params.x"]}`, stage.SourceOperator, stage.ErrInvalid, []string{"exec.argv[2]", "bad template"}},
		{"ExecArgNUL", "exec", `{"argv": ["/bin/echo", "a\u0000b"]}`, stage.SourceOperator, stage.ErrInvalid, []string{"exec.argv[1]", "NUL"}},
		{"ExecReservedEnv", "exec", `{"argv": ["/bin/true"], "env": {"DEPLOYCOORD_TENANT_ID": "x"}}`, stage.SourceOperator, stage.ErrInvalid,
			[]string{`exec.env["DEPLOYCOORD_TENANT_ID"]`, "set by deploycoord"}},
		{"ExecBadEnvName", "exec", `{"argv": ["/bin/true"], "env": {"A=B": "x"}}`, stage.SourceOperator, stage.ErrInvalid, []string{`exec.env["A=B"]`, "not a valid variable name"}},
		{"ExecRelativeDir", "exec", `{"argv": ["/bin/true"], "dir": "tmp"}`, stage.SourceOperator, stage.ErrInvalid, []string{"exec.dir", "not an absolute path"}},
		{"ExecArgvNotStrings", "exec", `{"argv": "/bin/true"}`, stage.SourceOperator, stage.ErrInvalid, []string{"exec.argv", "want an array of strings"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := spec("st", tt.kind, tt.config)
			if tt.config != "" && !json.Valid(s.Config) {
				t.Fatalf("test config is not JSON: %s", tt.config)
			}
			run, err := r.Compile(s, tt.src)
			if run != nil {
				t.Errorf("Compile returned a Runnable with the error")
			}
			wantConfigError(t, err, tt.want, "st", tt.parts...)
			if len(err.Error()) > 2000 {
				t.Errorf("error is %d bytes long", len(err.Error()))
			}
		})
	}
}

// TestCompile_SpecFromJSON compiles specs read the way plans carry them.
func TestCompile_SpecFromJSON(t *testing.T) {
	t.Parallel()
	r := stage.NewRegistry(stage.Options{InlineHTTPHosts: []string{"cfg.example"}})
	var specs []task.StageSpec
	err := json.Unmarshal([]byte(`[
		{"name": "push", "kind": "http", "timeout": "30s",
		 "http": {"method": "post", "url": "https://cfg.example/tenants/{{.TenantID}}/push",
		          "body": "{\"version\":\"{{.Params.version}}\"}", "successStatus": [200, 204],
		          "poll": {"interval": "2s", "until": "{{eq .Response.state \"ok\"}}"}}},
		{"name": "settle", "kind": "sleep", "sleep": {"duration": "2s"}},
		{"name": "mark", "kind": "noop"}
	]`), &specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.CompileAll(specs, stage.SourceInline); err != nil {
		t.Fatal(err)
	}
}
