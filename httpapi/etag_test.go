package httpapi_test

import (
	"strings"
	"testing"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

func TestETag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		path   string
		change func(f *fakeService)
	}{
		{"Plan", "/v1/plans/" + planID, func(f *fakeService) { f.PlanV.Plan.Status = plan.StatusPaused }},
		{"PlanTasks", "/v1/plans/" + planID + "/tasks", func(f *fakeService) { f.TasksV[0].Orphaned = true }},
		{"TenantTask", "/v1/tenants/t-001/task", func(f *fakeService) { f.TaskV.Orphaned = true }},
		{"TaskByID", "/v1/tasks/" + taskID, func(f *fakeService) { f.TaskV.Task.Status = task.StatusRunning }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc := newFake()
			h, _ := newAPI(t, svc, httpapi.Config{})
			first := serve(t, h, request{method: "GET", path: tt.path})
			etag := first.Header.Get("ETag")
			if first.Status != 200 || !strings.HasPrefix(etag, `"`) || !strings.HasSuffix(etag, `"`) || len(etag) < 20 {
				t.Fatalf("first answer = %d, ETag %q", first.Status, etag)
			}
			if again := serve(t, h, request{method: "GET", path: tt.path}); again.Header.Get("ETag") != etag || string(again.Body) != string(first.Body) {
				t.Fatalf("same answer, different ETag: %q then %q", etag, again.Header.Get("ETag"))
			}
			for _, inm := range []string{etag, "W/" + etag, `"other", ` + etag, "*"} {
				nm := serve(t, h, request{method: "GET", path: tt.path, header: map[string]string{"If-None-Match": inm}})
				if nm.Status != 304 || len(nm.Body) != 0 || nm.Header.Get("ETag") != etag {
					t.Fatalf("If-None-Match %s = %d, ETag %q, %d bytes; want 304, the ETag, no body", inm, nm.Status, nm.Header.Get("ETag"), len(nm.Body))
				}
			}
			if other := serve(t, h, request{method: "GET", path: tt.path, header: map[string]string{"If-None-Match": `"stale"`}}); other.Status != 200 || len(other.Body) == 0 {
				t.Fatalf("stale If-None-Match = %d", other.Status)
			}
			tt.change(svc)
			changed := serve(t, h, request{method: "GET", path: tt.path, header: map[string]string{"If-None-Match": etag}})
			if changed.Status != 200 || changed.Header.Get("ETag") == etag || len(changed.Body) == 0 {
				t.Fatalf("after a change: %d, ETag %q (was %q)", changed.Status, changed.Header.Get("ETag"), etag)
			}
		})
	}
	t.Run("ChangesHaveNone", func(t *testing.T) {
		t.Parallel()
		h, _ := newAPI(t, newFake(), httpapi.Config{})
		a := serve(t, h, request{method: "POST", path: "/v1/plans/" + planID + "/pause", body: `{"reason": "r"}`})
		if a.Status != 200 || a.Header.Get("ETag") != "" {
			t.Fatalf("POST answer = %d with ETag %q", a.Status, a.Header.Get("ETag"))
		}
	})
}
