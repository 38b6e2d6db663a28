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

// GET /readyz: the instance can serve (Config.Ready: Redis answers), with
// the checks of Config.ReadyDetail; 503 UNAVAILABLE, with the checks too,
// when not. Ready runs first: when Redis hangs, the answer reports its PING
// failing, not a deadline that ReadyDetail's self-check used up.
func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	var err error
	if a.cfg.Ready != nil {
		err = a.cfg.Ready(ctx)
	}
	var checks ReadyChecks
	if a.cfg.ReadyDetail != nil {
		checks = a.cfg.ReadyDetail(ctx)
	}
	if err == nil {
		checks.Redis = "ok"
		a.writeJSON(w, r, http.StatusOK, Readiness{Status: "ready", Version: a.cfg.Version, Checks: checks}, false)
		return
	}
	checks.Redis = err.Error()
	p := newProblem(r, http.StatusServiceUnavailable, CodeUnavailable, "not ready: "+err.Error())
	writeProblem(w, r, p, readyProblem{Problem: p, Checks: checks})
}

// readyProblem is the 503 answer of GET /readyz: a problem with the checks.
type readyProblem struct {
	Problem
	Checks ReadyChecks `json:"checks"`
}

// GET /openapi.yaml
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(openAPI)
}
