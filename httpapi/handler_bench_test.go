package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/deploycoord/deploycoord/httpapi"
)

// BenchmarkTenantQueryHandler: the whole handler chain of
// GET /v1/tenants/{id}/task (middleware, routing, the answer and its ETag)
// over a service answering at once, as the benchmark command's query
// section serves it (httpapi.New, default Config). What it costs beyond the
// store's read is what this measures.
func BenchmarkTenantQueryHandler(b *testing.B) {
	h := httpapi.New(newFake(), httpapi.Config{})
	req := httptest.NewRequest(http.MethodGet, "/v1/tenants/"+tenantID+"/task", nil)
	req.RemoteAddr = "127.0.0.1:40000"
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}
