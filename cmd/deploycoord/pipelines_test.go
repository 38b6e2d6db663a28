package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/task"
)

const goodPipelines = `# Operator-defined pipelines.
pipelines:
  standard-deploy:
    stages:
      - name: push-config
        kind: http
        timeout: 30s
        retry: {maxAttempts: 3, backoff: exponential, baseDelay: 1s, maxDelay: 30s, jitter: 0.2}
        http:
          method: POST
          url: "https://config.internal/tenants/{{.TenantID}}/push"
          successStatus: [200, 204]
      - name: settle
        kind: sleep
        sleep: {duration: 2s}
  quick:
    stages:
      - {name: mark, kind: noop, noop: {outputs: {ready: true, count: 3}}}
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadPipelinesOK(t *testing.T) {
	t.Parallel()
	got, err := LoadPipelines(writeFile(t, "pipelines.yaml", goodPipelines))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("pipelines %v, want standard-deploy and quick", got)
	}
	std := got["standard-deploy"]
	if len(std) != 2 || std[0].Name != "push-config" || std[0].Kind != "http" || std[1].Name != "settle" {
		t.Fatalf("standard-deploy = %+v", std)
	}
	push := std[0]
	if push.Timeout.D() != 30*time.Second {
		t.Errorf("timeout %s, want 30s", push.Timeout.D())
	}
	want := task.RetryPolicy{MaxAttempts: 3, Backoff: task.BackoffExponential,
		BaseDelay: task.Duration(time.Second), MaxDelay: task.Duration(30 * time.Second), Jitter: 0.2}
	if push.Retry != want {
		t.Errorf("retry %+v, want %+v", push.Retry, want)
	}
	if cfg := string(push.Config); !strings.Contains(cfg, `"url":"https://config.internal/tenants/{{.TenantID}}/push"`) ||
		!strings.Contains(cfg, `"successStatus":[200,204]`) {
		t.Errorf("http settings %s", cfg)
	}
	if q := got["quick"]; len(q) != 1 || !strings.Contains(string(q[0].Config), `"ready":true`) {
		t.Errorf("quick = %+v", q)
	}
}

func TestLoadPipelinesErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content string
		want    []string
	}{
		{"ErrUnknownTopLevelField", "pipeline:\n  x:\n    stages: []\n", []string{"unknown field", "pipeline"}},
		{"ErrUnknownStageField", "pipelines:\n  x:\n    stages:\n      - {name: a, kind: noop, retries: 3}\n", []string{"unknown field", "retries"}},
		{"ErrBadYAML", "pipelines:\n  x: [unclosed\n", []string{"yaml"}},
		{"ErrTabs", "pipelines:\n\tx: {}\n", []string{"yaml"}},
		{"ErrNonStringKey", "pipelines:\n  x:\n    stages:\n      - {name: a, kind: noop, 1: one}\n", []string{"map key 1 is not a string"}},
		{"ErrNoPipelines", "# nothing yet\n", []string{"no pipelines defined"}},
		{"ErrBadDuration", "pipelines:\n  x:\n    stages:\n      - {name: a, kind: sleep, timeout: soon}\n", []string{"invalid duration"}},
		{"ErrAliasBomb", "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n" +
			"d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n" +
			"g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\npipelines:\n  x:\n    stages: *h\n", []string{"yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, "pipelines.yaml", tt.content)
			_, err := LoadPipelines(path)
			if err == nil {
				t.Fatal("LoadPipelines accepted the file")
			}
			for _, w := range append(tt.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	t.Run("ErrMissingFile", func(t *testing.T) {
		t.Parallel()
		_, err := LoadPipelines(filepath.Join(t.TempDir(), "none.yaml"))
		if err == nil || !strings.Contains(err.Error(), "none.yaml") {
			t.Errorf("missing file: %v", err)
		}
	})
	t.Run("ErrTooLarge", func(t *testing.T) {
		t.Parallel()
		big := goodPipelines + "#" + strings.Repeat("x", maxPipelinesFile) + "\n"
		_, err := LoadPipelines(writeFile(t, "big.yaml", big))
		if err == nil || !strings.Contains(err.Error(), "bytes, at most") {
			t.Errorf("oversized file: %v", err)
		}
	})
}

func TestYAMLToJSON(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"OK", "a: 1\nb: [x, {c: true}]\n", `{"a":1,"b":["x",{"c":true}]}`},
		{"OKQuotedNumberKey", "'1': one\n", `{"1":"one"}`},
		{"OKNestedAnyKeys", "a:\n  - {b: {c: d}}\n", `{"a":[{"b":{"c":"d"}}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := YAMLToJSON([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("YAMLToJSON = %s, want %s", got, tt.want)
			}
		})
	}
	for _, in := range []string{"true: x\n", "a:\n  - {2: x}\n", "a:\n  b:\n    1.5: x\n"} {
		if _, err := YAMLToJSON([]byte(in)); err == nil || !strings.Contains(err.Error(), "is not a string") {
			t.Errorf("YAMLToJSON(%q) = %v, want a non-string key error", in, err)
		}
	}
}
