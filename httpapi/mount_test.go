package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deploycoord/deploycoord/httpapi"
)

// TestMounts: a handler of Config.Mounts is served under its path inside
// the API's request id and logs, without the /v1 token check; what it says
// of its caller reaches the access and audit logs, and its refused actions
// the event feed. GET / redirects to Config.Home.
func TestMounts(t *testing.T) {
	t.Parallel()
	svc := newFake()
	var seenID, seenAddr string
	mounted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenID, seenAddr = httpapi.RequestID(r.Context()), httpapi.ClientAddr(r.Context())
		httpapi.SetCaller(r, "alice", httpapi.RoleViewer)
		switch r.URL.Path {
		case "/ui/act":
			httpapi.AuditAction(r, "", "t-001", "INC-1 <b>fixed</b>")
			httpapi.Deny(r, "role viewer may not change state")
			w.WriteHeader(http.StatusForbidden)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	h, logs := newAPI(t, svc, httpapi.Config{
		Tokens: []httpapi.Token{{Name: "ops", Role: httpapi.RoleOperator, Hash: httpapi.HashSecret("s3cret-s3cret-s3cret")}},
		Mounts: []httpapi.Mount{{Path: "/ui", Handler: mounted}},
		Home:   "/ui/",
	})
	do := func(method, path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = "192.0.2.9:1234"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}

	t.Run("HomeRedirects", func(t *testing.T) {
		rec := do("GET", "/")
		if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ui/" {
			t.Fatalf("GET / = %d Location %q, want 303 /ui/", rec.Code, rec.Header().Get("Location"))
		}
	})
	t.Run("ServedWithoutBearerToken", func(t *testing.T) {
		rec := do("GET", "/ui/plans")
		if rec.Code != http.StatusNoContent {
			t.Fatalf("GET /ui/plans = %d, want the mounted handler's 204", rec.Code)
		}
		if seenID == "" || seenID != rec.Header().Get(httpapi.HeaderRequestID) || seenAddr != "192.0.2.9" {
			t.Fatalf("mounted handler saw request id %q (header %q), client %q", seenID, rec.Header().Get(httpapi.HeaderRequestID), seenAddr)
		}
		access := logs.Lines(t, "request")
		if last := access[len(access)-1]; last["actor"] != "alice" || last["route"] != "/ui/*" {
			t.Fatalf("access line %v, want actor alice on route /ui/*", last)
		}
	})
	t.Run("ActionAudited", func(t *testing.T) {
		do("POST", "/ui/act")
		audit := logs.Lines(t, "audit")
		if len(audit) != 1 {
			t.Fatalf("%d audit lines, want 1", len(audit))
		}
		a := audit[0]
		if a["actor"] != "alice" || a["role"] != "viewer" || a["tenant_id"] != "t-001" || a["reason"] != "INC-1 <b>fixed</b>" ||
			a["status"] != float64(403) || !strings.Contains(a["denied"].(string), "viewer") {
			t.Fatalf("audit line %v", a)
		}
		refusals := svc.Refusals()
		if len(refusals) != 1 || refusals[0].Actor.Name != "alice" || refusals[0].TenantID != "t-001" || refusals[0].Status != 403 {
			t.Fatalf("refusals %+v, want alice's 403 on t-001", refusals)
		}
	})
	t.Run("V1StillNeedsToken", func(t *testing.T) {
		if rec := do("GET", "/v1/plans"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("GET /v1/plans without token = %d, want 401", rec.Code)
		}
	})
}
