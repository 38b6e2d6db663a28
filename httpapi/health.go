package httpapi

import (
	"context"
	_ "embed"
	"net/http"
)

// openAPI is a copy of docs/openapi.yaml, the canonical file: go:embed cannot
// reach outside the package directory. TestOpenAPICopyIsCurrent fails when
// the two differ; `go generate ./httpapi` refreshes the copy.
//
//go:generate cp ../docs/openapi.yaml openapi.yaml
//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the OpenAPI 3.0 description of the API (docs/openapi.yaml).
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

// Health answers GET /healthz.
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version"`
}

// GET /healthz: the process is alive.
func (a *api) healthz(w http.ResponseWriter, r *http.Request) {
	a.writeJSON(w, r, http.StatusOK, Health{Status: "ok", Version: a.cfg.Version}, false)
}

// GET /readyz: the instance can serve (Config.Ready).
func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := a.cfg.Ready(ctx); err != nil {
			WriteProblem(w, r, http.StatusServiceUnavailable, CodeUnavailable, "not ready: "+err.Error())
			return
		}
	}
	a.writeJSON(w, r, http.StatusOK, Health{Status: "ready", Version: a.cfg.Version}, false)
}

// GET /openapi.yaml
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(openAPI)
}
