package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
)

// logSink collects a Main's log lines, safe for concurrent use.
type logSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines returns the JSON log lines decoded.
func (s *logSink) lines() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(s.b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runMain parses args (with an empty environment: no DEPLOYCOORD_* of the
// test's own environment applies) and runs a Main in this process, closed
// when the test ends. It returns Run's error.
func runMain(t *testing.T, args ...string) (*Main, *logSink, error) {
	t.Helper()
	logs := &logSink{}
	m := NewMain(logs, io.Discard)
	if err := m.ParseFlags(append([]string{"-listen", "127.0.0.1:0"}, args...), env()); err != nil {
		t.Fatal(err)
	}
	err := m.Run(context.Background())
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if t.Failed() {
			t.Logf("logs:\n%s", logs)
		}
	})
	return m, logs, err
}

// local returns an API client of an in-process Main.
func local(t *testing.T, m *Main) *node {
	return &node{t: t, name: m.Config.InstanceID, base: "http://" + m.Addr}
}

// TestEmbeddedRedis is `go run ./cmd/deploycoord` without DEPLOYCOORD_REDIS_URL:
// a loud warning, an API that answers, and an embedded Redis whose clock
// moves so that leases expire.
func TestEmbeddedRedis(t *testing.T) {
	t.Parallel()
	m, logs, err := runMain(t, "-instance-id", "embedded-1", "-lock-lease", "3s")
	if err != nil {
		t.Fatal(err)
	}
	warned := false
	for _, l := range logs.lines() {
		msg, _ := l["message"].(string)
		if l["level"] == "warn" && strings.Contains(msg, "EMBEDDED") && strings.Contains(msg, "NOT durable") &&
			strings.Contains(msg, "DEPLOYCOORD_REDIS_URL") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning about the embedded Redis in the logs:\n%s", logs)
	}
	// Task starts take the tenant lock in their RUNNING write (the store's
	// and the locker's keys agree); the lock below is such a start's lease.
	if !strings.Contains(logs.String(), `"starts_take_lock":true`) {
		t.Errorf("the listening line does not say starts take the lock:\n%s", logs)
	}

	in := local(t, m)
	for _, path := range []string{"/healthz", "/readyz"} {
		if st, body := in.do("GET", path, nil); st != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, st, body)
		}
	}
	p := in.createPlan(map[string]any{
		"name": "embedded", "stages": []any{sleepStage("hold", "2s")}, "tenants": tenants("emb-1"),
	})
	// A lease renews every lease/3; between renewals its TTL must go down,
	// which it does only if the embedded Redis's clock moves.
	until(t, 10*time.Second, func() (bool, string) {
		l := must[httpapi.Lock](in, "GET", "/v1/tenants/emb-1/lock", nil, http.StatusOK)
		return l.Held && l.TTLMs > 0 && l.TTLMs <= 2700, fmt.Sprintf("lock %+v: want held with a TTL going down from 3000ms", l)
	})
	in.waitPlan(p.PlanID, 15*time.Second, "COMPLETED")
	if l := must[httpapi.Lock](in, "GET", "/v1/tenants/emb-1/lock", nil, http.StatusOK); l.Held {
		t.Errorf("lock after the task completed: %+v, want released", l)
	}
}

func TestRunRedisUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	m, logs, err := runMain(t, "-redis-url", "redis://"+addr)
	if err != nil {
		t.Fatalf("Run should start without Redis (queries fail until it answers): %v", err)
	}
	if !strings.Contains(logs.String(), "redis unreachable at start") {
		t.Errorf("no log line about the unreachable Redis:\n%s", logs)
	}
	in := local(t, m)
	if st, body := in.do("GET", "/readyz", nil); st != http.StatusServiceUnavailable {
		t.Errorf("GET /readyz without Redis: %d %s, want 503", st, body)
	}
	if st, body := in.do("GET", "/healthz", nil); st != http.StatusOK {
		t.Errorf("GET /healthz without Redis: %d %s, want 200", st, body)
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"ErrKeyPrefix", []string{"-key-prefix", "prod executor"}, []string{"key prefix"}},
		{"ErrPipelinesFile", []string{"-pipelines", "/nonexistent/pipelines.yaml"}, []string{"pipelines", "/nonexistent/pipelines.yaml"}},
		{"ErrInlineHost", []string{"-inline-http-hosts", "http://cfg.internal"}, []string{"stage settings", "inline http host"}},
		{"ErrListenInUse", []string{"-listen", busy.Addr().String()}, []string{"listen on " + busy.Addr().String()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := runMain(t, tt.args...)
			if err == nil {
				t.Fatal("Run started")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestRunRefusesHostilePipelines: a pipelines file whose pipeline or stage
// names hold braces, colons, globs or control characters, or whose stages
// are unknown or duplicated, stops the server at start with an error naming
// the pipeline; nothing listens.
func TestRunRefusesHostilePipelines(t *testing.T) {
	t.Parallel()
	stage := "    stages:\n      - {name: a, kind: noop}\n"
	tests := []struct{ name, content, want string }{
		{"PipelineNameBraces", "pipelines:\n  'a{b}':\n" + stage, `"a{b}"`},
		{"PipelineNameColon", "pipelines:\n  'a:b':\n" + stage, `"a:b"`},
		{"PipelineNameGlob", "pipelines:\n  'a*?':\n" + stage, `"a*?"`},
		{"PipelineNameControl", "pipelines:\n  \"a\\x1b[2Jb\":\n" + stage, `\x1b`},
		{"PipelineNameLong", "pipelines:\n  " + strings.Repeat("p", 300) + ":\n" + stage, "pipeline name"},
		{"StageNameControl", "pipelines:\n  x:\n    stages:\n      - {name: \"a\\nb\", kind: noop}\n", "pipeline x"},
		{"StageNameGlob", "pipelines:\n  x:\n    stages:\n      - {name: 'a*{b}', kind: noop}\n", "pipeline x"},
		{"StageDuplicate", "pipelines:\n  x:\n    stages:\n      - {name: a, kind: noop}\n      - {name: a, kind: noop}\n", "used twice"},
		{"UnknownKind", "pipelines:\n  x:\n    stages:\n      - {name: a, kind: teleport}\n", "pipeline x"},
		{"NoStages", "pipelines:\n  x:\n    stages: []\n", "no stages"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, "pipelines.yaml", tt.content)
			m, _, err := runMain(t, "-pipelines", path)
			if err == nil {
				t.Fatalf("Run started on %s with a hostile pipelines file", m.Addr)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

const execPipelines = `pipelines:
  migrate:
    stages:
      - name: migrate
        kind: exec
        exec:
          argv: ["/bin/sh", "-c", "echo \"{\\\"migrated\\\": \\\"$DEPLOYCOORD_TENANT_ID\\\"}\""]
`

// TestExecPipeline: an operator pipeline with an exec stage needs
// DEPLOYCOORD_ALLOW_EXEC; without it the server refuses to start.
func TestExecPipeline(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("exec stages need a Unix shell")
	}
	path := writeFile(t, "pipelines.yaml", execPipelines)

	t.Run("ErrWithoutAllowExec", func(t *testing.T) {
		t.Parallel()
		_, _, err := runMain(t, "-pipelines", path)
		if err == nil {
			t.Fatal("Run started with an exec pipeline and exec disabled")
		}
		for _, w := range []string{"pipeline migrate", "exec", "disabled"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not contain %q", err, w)
			}
		}
	})
	t.Run("OKWithAllowExec", func(t *testing.T) {
		t.Parallel()
		m, logs, err := runMain(t, "-pipelines", path, "-allow-exec=true")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(logs.String(), `"pipelines":1`) {
			t.Errorf("the listening line does not count the pipeline:\n%s", logs)
		}
		in := local(t, m)
		p := in.createPlan(map[string]any{"name": "migrate", "pipeline": "migrate", "tenants": tenants("ex-1")})
		in.waitPlan(p.PlanID, 15*time.Second, "COMPLETED")
		ck := must[httpapi.Checkpoint](in, "GET", "/v1/tenants/ex-1/checkpoint", nil, http.StatusOK)
		out, _ := ck.ContextData["migrate"].(map[string]any)
		if out["migrated"] != "ex-1" {
			t.Errorf("exec stage outputs %v, want migrated: ex-1", ck.ContextData)
		}
		// exec is never allowed inline, whatever the server allows.
		st, body := in.do("POST", "/v1/plans", map[string]any{
			"name": "inline-exec", "tenants": tenants("ex-2"),
			"stages": []any{map[string]any{"name": "x", "kind": "exec", "exec": map[string]any{"argv": []string{"/bin/true"}}}},
		})
		var pb problem
		_ = json.Unmarshal(body, &pb)
		if st != http.StatusBadRequest || pb.Code != "INVALID_ARGUMENT" {
			t.Errorf("inline exec stage: %d %s, want 400 INVALID_ARGUMENT", st, body)
		}
		st, body = in.do("POST", "/v1/plans", map[string]any{"name": "x", "pipeline": "nope", "tenants": tenants("ex-3")})
		if st != http.StatusBadRequest || !strings.Contains(string(body), "migrate") {
			t.Errorf("unknown pipeline: %d %s, want 400 listing the defined pipelines", st, body)
		}
	})
}
