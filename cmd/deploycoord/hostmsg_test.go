package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestDisallowedHostNamesTheSetting: through the server, an inline http
// stage calling a host the server does not allow is refused with the name
// of the setting to change and what it allows — localhost is not 127.0.0.1.
func TestDisallowedHostNamesTheSetting(t *testing.T) {
	t.Parallel()
	m, _, err := runMain(t, "-inline-http-hosts", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	n := local(t, m)
	st, body := n.do("POST", "/v1/plans", map[string]any{"name": "h", "tenants": tenants("h-1"),
		"stages": []any{map[string]any{"name": "push", "kind": "http", "http": map[string]any{"url": "http://localhost:9000/push"}}}})
	if st != http.StatusBadRequest {
		t.Fatalf("POST /v1/plans with a localhost stage: %d %s, want 400", st, body)
	}
	for _, w := range []string{`host \"localhost:9000\" is not allowed`, "DEPLOYCOORD_INLINE_HTTP_HOSTS allows only 127.0.0.1",
		"localhost, 127.0.0.1 and ::1 are different entries"} {
		if !strings.Contains(string(body), w) {
			t.Errorf("answer %s does not say %s", body, w)
		}
	}
}
