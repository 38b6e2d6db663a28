package httpapi

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"
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
// when not.
func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	var checks ReadyChecks
	if a.cfg.ReadyDetail != nil {
		checks = a.cfg.ReadyDetail(ctx)
	}
	checks.Redis = "ok"
	var err error
	if a.cfg.Ready != nil {
		err = a.cfg.Ready(ctx)
	}
	if err == nil {
		a.writeJSON(w, r, http.StatusOK, Readiness{Status: "ready", Version: a.cfg.Version, Checks: checks}, false)
		return
	}
	checks.Redis = err.Error()
	detail := "not ready: " + err.Error()
	if len(detail) > maxDetailLen {
		detail = detail[:maxDetailLen] + "…"
	}
	p := readyProblem{
		Problem: Problem{Type: "about:blank", Title: http.StatusText(http.StatusServiceUnavailable),
			Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Detail: strings.ToValidUTF8(detail, string(utf8.RuneError)), RequestID: RequestID(r.Context())},
		Checks: checks,
	}
	b, _ := json.Marshal(p) // strings, ints and bools
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(append(b, '\n'))
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
