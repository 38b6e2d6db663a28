package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestTarget(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(newTarget([]string{"t-03/verify", "t-07"}).routes())
	t.Cleanup(srv.Close)
	send := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "task-1/push/1.1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s %s: not JSON: %s", method, path, b)
		}
		return resp.StatusCode, out
	}
	steps := []struct {
		name     string
		method   string
		path     string
		body     string
		wantCode int
		check    func(map[string]any) bool
	}{
		{"OKStage", "POST", "/tenants/t-01/push", `{"version":"1.2.3"}`, 200, func(m map[string]any) bool {
			body, _ := m["body"].(map[string]any)
			return m["tenant"] == "t-01" && m["stage"] == "push" && m["call"] == 1.0 &&
				m["idempotencyKey"] == "task-1/push/1.1" && body["version"] == "1.2.3"
		}},
		{"OKSecondCallCounted", "GET", "/tenants/t-01/push", "", 200, func(m map[string]any) bool { return m["call"] == 2.0 }},
		{"OKOtherStageOfFailingTenant", "POST", "/tenants/t-03/push", "", 200, nil},
		{"ErrFailingStage", "POST", "/tenants/t-03/verify", "", 500, func(m map[string]any) bool {
			return strings.Contains(m["error"].(string), "t-03/verify")
		}},
		{"ErrFailingTenant", "POST", "/tenants/t-07/push", "", 500, nil},
		{"OKFixTenant", "POST", "/fix?tenant=t-03", "", 200, nil},
		{"OKFixedStage", "POST", "/tenants/t-03/verify", "", 200, func(m map[string]any) bool { return m["call"] == 2.0 }},
		{"ErrStillFailing", "POST", "/tenants/t-07/verify", "", 500, nil},
		{"OKFailOneStage", "POST", "/fail?tenant=t-01&stage=verify", "", 200, nil},
		{"ErrNewlyFailing", "POST", "/tenants/t-01/verify", "", 500, nil},
		{"ErrFailWithoutTenant", "POST", "/fail", "", 400, nil},
		{"OKFixAll", "POST", "/fix", "", 200, func(m map[string]any) bool { return len(m["failing"].([]any)) == 0 }},
		{"OKAllFixed", "POST", "/tenants/t-07/verify", "", 200, nil},
		{"OKCalls", "GET", "/calls", "", 200, func(m map[string]any) bool {
			return m["t-01/push"] == 2.0 && m["t-03/verify"] == 2.0 && m["t-07/verify"] == 2.0
		}},
	}
	for _, s := range steps {
		code, out := send(s.method, s.path, s.body)
		if code != s.wantCode || (s.check != nil && !s.check(out)) {
			t.Fatalf("%s: %s %s = %d %v, want %d", s.name, s.method, s.path, code, out, s.wantCode)
		}
	}
}
