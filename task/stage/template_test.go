package stage_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/deploycoord/deploycoord/task/stage"
)

func TestTemplate(t *testing.T) {
	t.Parallel()
	operator := stage.Env{Source: stage.SourceOperator, MaxOutputBytes: 256}
	inline := stage.Env{Source: stage.SourceInline, MaxOutputBytes: 256}
	tests := []struct {
		name    string
		text    string
		env     stage.Env
		want    string // rendered over input("s")
		compile error  // sentinel NewTemplate fails with
		render  string // part of the Render error
	}{
		{"OKFields", "{{.TenantID}} {{.Stage}} {{.StageIndex}} {{.Attempt}}.{{.StageAttempt}}", inline, "t-001 s 1 2.3", nil, ""},
		{"OKIdempotencyKey", "{{.IdempotencyKey}}", inline, input("s").IdempotencyKey(), nil, ""},
		{"OKJSON", `{{json .Params.version}} {{json .Params.count}} {{json .Outputs.push}}`, inline, `"1.2.3" 1000000 {"id":"abc"}`, nil, ""},
		{"OKIndexForDashedNames", `{{index .Outputs "push" "id"}}`, inline, "abc", nil, ""},
		{"OKWithAndDollar", `{{with .Outputs.push}}{{.id}}-{{$.TenantID}}{{end}}`, inline, "abc-t-001", nil, ""},
		{"OKIfElse", `{{if eq .Params.version "1.2.3"}}same{{else}}other{{end}}`, inline, "same", nil, ""},
		{"OKRangeOperator", `{{range $k, $v := .Outputs}}{{$k}}{{end}}`, operator, "push", nil, ""},
		{"OKPrintf", `{{printf "%05.1f|%s" 3.14159 .TenantID}}`, inline, "003.1|t-001", nil, ""},
		{"ErrNotAllowedRangeInline", `{{range .Outputs}}x{{end}}`, inline, "", stage.ErrNotAllowed, ""},
		{"ErrInvalidUnknownField", `{{.Tenant}}`, inline, "", stage.ErrInvalid, ""},
		{"ErrInvalidUnknownFieldInIf", `{{if .Paramz}}x{{end}}`, inline, "", stage.ErrInvalid, ""},
		{"ErrInvalidUnknownFieldInPipe", `{{.TenantID | printf "%s-%s" .Plan}}`, inline, "", stage.ErrInvalid, ""},
		{"ErrInvalidBlock", `{{block "b" .}}x{{end}}`, operator, "", stage.ErrInvalid, ""},
		{"ErrInvalidTooLong", strings.Repeat("x", stage.MaxTemplateLen+1), operator, "", stage.ErrInvalid, ""},
		{"RenderMissingKey", `{{.Params.nope}}`, inline, "", nil, `map has no entry for key "nope"`},
		{"RenderTooLong", `{{.TenantID}}` + strings.Repeat("y", 300), inline, "", nil, "exceeds 256 bytes"},
		{"RenderPrintTooLong", `{{print .Params.version .Params.version}}`, stage.Env{MaxOutputBytes: 8}, "", nil, "exceeds 8 bytes"},
		{"RenderPrintfStarWidth", `{{printf "%*d" 100 1}}`, inline, "", nil, "* widths are not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tmpl, err := stage.NewTemplate("f", tt.text, tt.env)
			if tt.compile != nil {
				var ce *stage.ConfigError
				if !errors.Is(err, tt.compile) || !errors.As(err, &ce) || ce.Field != "f" {
					t.Fatalf("NewTemplate = %v, want a *ConfigError for field f matching %v", err, tt.compile)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewTemplate: %v", err)
			}
			got, err := tmpl.Render(input("s"))
			if tt.render != "" {
				if err == nil || !strings.Contains(err.Error(), tt.render) || !strings.HasPrefix(err.Error(), "f: ") {
					t.Fatalf("Render = %q, %v; want an error about field f containing %q", got, err, tt.render)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Render = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestOptions_Validate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts stage.Options
		ok   bool
	}{
		{"OK", stage.Options{InlineKinds: []string{"noop"}, InlineHTTPHosts: []string{"cfg.example", "127.0.0.1:8080", "[::1]:9000"}}, true},
		{"OKZero", stage.Options{}, true},
		{"ErrInvalidHost", stage.Options{InlineHTTPHosts: []string{"http://cfg.example/"}}, false},
		{"ErrInvalidMetadataHost", stage.Options{InlineHTTPHosts: []string{"169.254.169.254"}}, false},
		{"ErrInvalidPort", stage.Options{InlineHTTPHosts: []string{"cfg.example:http"}}, false},
		{"ErrInvalidKind", stage.Options{InlineKinds: []string{"no op"}}, false},
		{"ErrInvalidMaxOutput", stage.Options{MaxOutputBytes: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.opts.Validate()
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, stage.ErrInvalid)) {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}
