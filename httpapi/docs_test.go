package httpapi_test

import (
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/docstest"
)

// docsCall is an HTTP call of a document's shell block.
type docsCall struct{ method, path, line string }

var (
	// docsURL is the API address of a curl command: $DC, localhost:8080
	// or an instance on 127.0.0.1, then the path (up to the query or the
	// end of the word).
	docsURL = regexp.MustCompile(`(?:\$DC|https?://127\.0\.0\.1:\d+|localhost:\d+|127\.0\.0\.1:\d+)(/[^\s"'?;|)]*)`)
	// docsMethod is curl's -X.
	docsMethod = regexp.MustCompile(`-X\s+([A-Z]+)`)
)

// docsCalls returns the curl calls to the API in a Markdown document's
// shell blocks (continuation lines joined): the method (-X; POST with -d
// and no -X, as curl does; else GET) and the path, its variables given
// sample values.
func docsCalls(doc string) []docsCall {
	vars := strings.NewReplacer("$PLAN", "plan-01M80EY974CD6269H6GG9KXZ9H", "$BULK", "plan-01M887BG10WVJKZ3G8HMMSAVMC",
		"$HOTFIX", "plan-01M887BG10WVJKZ3G8HMMSAVMC")
	var out []docsCall
	for _, full := range docstest.ShellLines(doc) {
		// Each curl of the line, up to the next command.
		for _, part := range strings.Split(full, "curl ")[1:] {
			part, _, _ = strings.Cut(part, "| ")
			m := docsURL.FindStringSubmatch(part)
			if m == nil || !apiPath(m[1]) {
				continue
			}
			method := http.MethodGet
			if mm := docsMethod.FindStringSubmatch(part); mm != nil {
				method = mm[1]
			} else if strings.Contains(part, " -d ") || strings.Contains(part, " --data") {
				method = http.MethodPost
			}
			out = append(out, docsCall{method: method, path: vars.Replace(m[1]), line: strings.TrimSpace(full)})
		}
	}
	return out
}

// apiPath reports whether path is the API's (not the console's, not a
// deployment target's).
func apiPath(path string) bool {
	return strings.HasPrefix(path, "/v1/") || slices.Contains([]string{"/healthz", "/readyz", "/metrics", "/openapi.yaml"}, path)
}

// docsRoute is a route named in a document's text: `GET /v1/plans/{planId}`.
var docsRoute = regexp.MustCompile("`(GET|HEAD|POST|PUT|PATCH|DELETE) (/[^`\\s]*)`")

// docsRoutes returns the routes a document names in code spans, each path
// parameter ({name}) given a sample value and the query left out.
func docsRoutes(doc string) []docsCall {
	param := regexp.MustCompile(`\{[^}]+\}`)
	var out []docsCall
	for _, m := range docsRoute.FindAllStringSubmatch(doc, -1) {
		path, _, _ := strings.Cut(m[2], "?")
		if !apiPath(path) {
			continue // the console (GET /), the demo target (POST /fix)
		}
		out = append(out, docsCall{method: m[1], path: param.ReplaceAllString(path, "x-1"), line: m[0]})
	}
	return out
}

// TestDocsCallsAreRoutes checks every API call of the README's, the
// runbook's and the API document's shell blocks, and every route they name
// in the text (`GET /v1/...`), against the router: the method and path of
// each must be a route (so a document never shows a call the server
// answers 404 or 405).
func TestDocsCallsAreRoutes(t *testing.T) {
	t.Parallel()
	h, _ := newAPI(t, newFake(), httpapi.Config{})
	routes, ok := h.(chi.Routes)
	if !ok {
		t.Fatalf("httpapi.New returned a %T, not a chi router", h)
	}
	for _, doc := range []string{"../README.md", "../docs/operations.md", "../docs/api.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		calls := append(docsCalls(string(b)), docsRoutes(string(b))...)
		if len(calls) < 10 {
			t.Fatalf("%s: %d API calls found, want at least 10", doc, len(calls))
		}
		for _, c := range calls {
			if !routes.Match(chi.NewRouteContext(), c.method, c.path) {
				t.Errorf("%s: %s %s is not a route of the API\n  %s", doc, c.method, c.path, c.line)
			}
		}
		t.Logf("%s: %d API calls and routes named, each a route", doc, len(calls))
	}
}
