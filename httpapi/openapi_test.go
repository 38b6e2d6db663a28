package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/deploycoord/deploycoord/httpapi"
)

// TestOpenAPIMatchesRouter checks that every route of the router is an
// operation of docs/openapi.yaml and every operation a route.
func TestOpenAPIMatchesRouter(t *testing.T) {
	t.Parallel()
	doc, _ := openAPISpec(t)
	h, _ := newAPI(t, newFake(), httpapi.Config{})
	routes, ok := h.(chi.Routes)
	if !ok {
		t.Fatalf("httpapi.New returned a %T, not a chi router", h)
	}
	var routed []string
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routed = append(routed, method+" "+strings.TrimSuffix(route, "/*"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	slices.Sort(routed)
	slices.Sort(documented)
	for _, r := range routed {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in docs/openapi.yaml", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routed, d) {
			t.Errorf("docs/openapi.yaml describes %s, which the router does not serve", d)
		}
	}
	if len(routed) < 20 {
		t.Errorf("only %d routes walked: %v", len(routed), routed)
	}
}

// TestOpenAPICopyIsCurrent fails when the copy embedded in the package
// differs from docs/openapi.yaml: run `go generate ./httpapi`.
func TestOpenAPICopyIsCurrent(t *testing.T) {
	t.Parallel()
	canonical, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(httpapi.OpenAPI(), canonical) {
		t.Fatal("httpapi/openapi.yaml differs from docs/openapi.yaml: run `go generate ./httpapi`")
	}
	h, _ := newAPI(t, newFake(), httpapi.Config{})
	a := serve(t, h, request{method: "GET", path: "/openapi.yaml"})
	if a.Status != 200 || !bytes.Equal(a.Body, canonical) || a.Header.Get("Content-Type") != "application/yaml" {
		t.Fatalf("GET /openapi.yaml = %d %q, %d bytes", a.Status, a.Header.Get("Content-Type"), len(a.Body))
	}
}

// TestOpenAPIRejectsWrongAnswers makes sure the conformance check used by
// every test can fail: answers that break the document are caught.
func TestOpenAPIRejectsWrongAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, method, path string
		status             int
		contentType, body  string
	}{
		{"MissingField", "GET", "/v1/tenants/t-001/lock", 200, "application/json", `{"tenantId": "t-001", "held": true}`},
		{"ZeroTimeNotNull", "GET", "/v1/plans/" + planID, 200, "application/json", strings.Replace(planBody(t), `"finishedAt":null`, `"finishedAt":""`, 1)},
		{"BadStatus", "GET", "/v1/plans/" + planID, 200, "application/json", strings.Replace(planBody(t), `"RUNNING"`, `"running"`, 1)},
		{"StatusTaskIncomplete", "POST", "/v1/tenants:status", 200, "application/json", `{"tasks": {"t-1": null, "t-2": {"taskId": "x"}}}`},
		{"DetailWithoutCheckpoint", "GET", "/v1/tenants/t-001/task", 200, "application/json", listedTaskBody(t)},
		{"UndocumentedStatus", "GET", "/v1/tenants/t-001/lock", 418, "application/json", `{}`},
		{"FeedWithoutCursor", "GET", "/v1/events", 200, "application/json", `{"events": []}`},
		{"FeedEventWithoutData", "GET", "/v1/events", 200, "application/json",
			`{"events": [{"id": "1-0", "type": "task.failed", "at": "2026-11-21T09:30:00Z", "planId": "", "taskId": "", "tenantId": ""}], "nextCursor": "1-0"}`},
		{"StreamOnOtherRoute", "GET", "/v1/instances", 200, "text/event-stream", ": ping\n\n"},
		{"ReadyWithoutChecks", "GET", "/readyz", 200, "application/json", `{"status": "ready", "version": "1"}`},
		{"UnknownCode", "GET", "/v1/tenants/t-001/task", 404, "application/problem+json",
			`{"type": "about:blank", "title": "Not Found", "status": 404, "code": "GONE", "detail": "x"}`},
	}
	_, router := openAPISpec(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ft := &fakeT{}
			req, _ := http.NewRequest(tt.method, tt.path, nil)
			if _, _, err := router.FindRoute(req); err != nil {
				t.Fatalf("document does not route %s %s: %v", tt.method, tt.path, err)
			}
			conformT(ft, req, tt.status, http.Header{"Content-Type": {tt.contentType}}, []byte(tt.body))
			if !ft.failed {
				t.Errorf("a wrong answer passed the OpenAPI check")
			}
		})
	}
}

// listedTaskBody is a task as listings answer it: without the checkpoint
// fields a single-task answer must carry.
func listedTaskBody(t *testing.T) string {
	t.Helper()
	h, _ := newAPI(t, newFake(), httpapi.Config{})
	a := serve(t, h, request{method: "GET", path: "/v1/plans/" + planID + "/tasks"})
	var l httpapi.TaskList
	if err := json.Unmarshal(a.Body, &l); err != nil || len(l.Tasks) != 1 {
		t.Fatalf("task list %s: %v", a.Body, err)
	}
	b, _ := json.Marshal(l.Tasks[0])
	return string(b)
}

func planBody(t *testing.T) string {
	t.Helper()
	h, _ := newAPI(t, newFake(), httpapi.Config{})
	a := serve(t, h, request{method: "GET", path: "/v1/plans/" + planID})
	if a.Status != 200 || !strings.Contains(string(a.Body), `"finishedAt":null`) {
		t.Fatalf("plan answer = %d %s", a.Status, a.Body)
	}
	return string(a.Body)
}
