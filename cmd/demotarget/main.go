// Command demotarget is a toy deployment target for the README's tour and for
// trying deploycoord by hand. It answers every request to
// /tenants/{tenantId}/{stage} with 200 and a small JSON object (which becomes
// the stage's outputs), except the ones it is told to fail, which get a 500.
// Standard library only; it keeps nothing on disk.
//
//	go run ./cmd/demotarget -listen 127.0.0.1:9000 -fail t-03/verify,t-07
//
// A -fail entry is a tenant (every stage of it fails) or tenant/stage (only
// that stage fails).
//
// Endpoints:
//
//	ANY  /tenants/{tenantId}/{stage}   200 {"tenant","stage","call","idempotencyKey"[,"body"]},
//	                                   or 500 {"error": "..."} when set to fail
//	POST /fail?tenant=t-03[&stage=x]   make t-03 (or only its stage x) fail from now on
//	POST /fix?tenant=t-03              make every stage of t-03 succeed again
//	POST /fix                          make everything succeed again
//	GET  /calls                        how often each tenant/stage was called
//
// It is not part of the server and is not meant for production.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to listen on")
	fail := flag.String("fail", "", "what answers HTTP 500: tenants or tenant/stage pairs (comma-separated)")
	flag.Parse()

	t := newTarget(splitList(*fail))
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("demotarget: %v", err)
	}
	srv := &http.Server{Handler: t.routes(), ReadHeaderTimeout: 10 * time.Second}
	log.Printf("demotarget: listening on %s; failing: %s", ln.Addr(), t.failingList())

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-stop
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("demotarget: %v", err)
	}
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// target is the state of the demo target: what fails and how often each
// tenant/stage was called.
type target struct {
	mu sync.Mutex
	// failing holds tenants ("t-03") and tenant stages ("t-03/verify").
	failing map[string]bool
	calls   map[string]int
}

func newTarget(failing []string) *target {
	t := &target{failing: map[string]bool{}, calls: map[string]int{}}
	for _, id := range failing {
		t.failing[id] = true
	}
	return t
}

func (t *target) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/tenants/{tenant}/{stage}", t.stage)
	mux.HandleFunc("POST /fail", t.setFailing(true))
	mux.HandleFunc("POST /fix", t.setFailing(false))
	mux.HandleFunc("GET /calls", t.listCalls)
	return mux
}

// stage answers one stage call: 200 with JSON, or 500 for a failing tenant.
func (t *target) stage(w http.ResponseWriter, r *http.Request) {
	tenant, stage := r.PathValue("tenant"), r.PathValue("stage")
	var body any
	if b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10)); err == nil && len(b) > 0 {
		if json.Unmarshal(b, &body) != nil {
			body = string(b)
		}
	}
	t.mu.Lock()
	key := tenant + "/" + stage
	t.calls[key]++
	n := t.calls[key]
	failing := t.failing[tenant] || t.failing[key]
	t.mu.Unlock()

	if failing {
		log.Printf("demotarget: %s %q -> 500 (set to fail)", r.Method, r.URL.Path)
		writeJSON(w, http.StatusInternalServerError, map[string]any{
			"error": fmt.Sprintf("demo failure: %s is set to fail (POST /fix?tenant=%s fixes it)", key, tenant),
		})
		return
	}
	log.Printf("demotarget: %s %q -> 200 (call %d)", r.Method, r.URL.Path, n)
	out := map[string]any{"tenant": tenant, "stage": stage, "call": n, "idempotencyKey": r.Header.Get("Idempotency-Key")}
	if body != nil {
		out["body"] = body
	}
	writeJSON(w, http.StatusOK, out)
}

func (t *target) setFailing(fail bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tenant, stage := r.URL.Query().Get("tenant"), r.URL.Query().Get("stage")
		t.mu.Lock()
		switch {
		case tenant != "" && fail:
			if stage != "" {
				t.failing[tenant+"/"+stage] = true
			} else {
				t.failing[tenant] = true
			}
		case tenant != "":
			for k := range t.failing {
				if k == tenant || strings.HasPrefix(k, tenant+"/") {
					delete(t.failing, k)
				}
			}
		case fail:
			t.mu.Unlock()
			writeJSONLine(w, http.StatusBadRequest, map[string]any{"error": "POST /fail needs ?tenant=<tenantId>[&stage=<stage>]"})
			return
		default:
			clear(t.failing)
		}
		t.mu.Unlock()
		log.Printf("demotarget: failing now: %s", t.failingList())
		writeJSONLine(w, http.StatusOK, map[string]any{"failing": t.failingSlice()})
	}
}

func (t *target) listCalls(w http.ResponseWriter, _ *http.Request) {
	t.mu.Lock()
	out := make(map[string]int, len(t.calls))
	for k, v := range t.calls {
		out[k] = v
	}
	t.mu.Unlock()
	writeJSONLine(w, http.StatusOK, out)
}

func (t *target) failingSlice() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.failing))
	for id := range t.failing {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func (t *target) failingList() string {
	if s := t.failingSlice(); len(s) > 0 {
		return strings.Join(s, ", ")
	}
	return "(none)"
}

// writeJSON answers v as JSON. Stage answers carry no trailing newline (a
// failing one ends up in the task's lastError); the control endpoints add
// one for the terminal.
func writeJSON(w http.ResponseWriter, status int, v any) { writeBody(w, status, v, "") }

func writeJSONLine(w http.ResponseWriter, status int, v any) { writeBody(w, status, v, "\n") }

func writeBody(w http.ResponseWriter, status int, v any, end string) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, end...))
}
