package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/repository"
)

const createBody = `{"name": "r", "pipeline": "standard-deploy", "tenants": [{"tenantId": "t-001"}]}`

// idemStore returns the idempotency store on a Redis of backend b.
func idemStore(t *testing.T, c redis.UniversalClient, prefix string) *repository.Idempotency {
	t.Helper()
	rs, err := repository.NewRedis(c, repository.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return rs.Idempotency()
}

func withKey(key string, hdr map[string]string) map[string]string {
	out := map[string]string{httpapi.HeaderIdempotencyKey: key}
	for k, v := range hdr {
		out[k] = v
	}
	return out
}

// countCalls counts the service's calls of method.
func countCalls(svc *fakeService, method string) func() int {
	var (
		mu sync.Mutex
		n  int
	)
	svc.Hook = func(m string) {
		if m == method {
			mu.Lock()
			n++
			mu.Unlock()
		}
	}
	return func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func TestIdempotency(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			c, prefix := b.New(t)
			store := idemStore(t, c, prefix)
			newH := func(svc *fakeService) (http.Handler, *syncBuffer) {
				return newAPI(t, svc, httpapi.Config{Tokens: testTokens(), Idempotency: store})
			}
			ops := bearer(opsSecret)

			t.Run("CreatePlanReplayed", func(t *testing.T) {
				t.Parallel()
				svc := newFake()
				calls := countCalls(svc, "CreatePlan")
				h, logs := newH(svc)
				first := serve(t, h, request{method: "POST", path: "/v1/plans", body: createBody, header: withKey("create-1", ops)})
				if first.Status != 201 || first.Header.Get(httpapi.HeaderIdempotentReplayed) != "" {
					t.Fatalf("first = %d, replayed %q", first.Status, first.Header.Get(httpapi.HeaderIdempotentReplayed))
				}
				// White space does not make another request.
				spaced := strings.ReplaceAll(createBody, ", ", ",\n   ")
				again := serve(t, h, request{method: "POST", path: "/v1/plans", body: spaced, header: withKey("create-1", ops)})
				if again.Status != 201 || string(again.Body) != string(first.Body) ||
					again.Header.Get(httpapi.HeaderIdempotentReplayed) != "true" ||
					again.Header.Get("Location") != first.Header.Get("Location") ||
					again.Header.Get("Content-Type") != "application/json" {
					t.Fatalf("repeat = %d %q (Location %q, replayed %q), want the first answer %s",
						again.Status, again.Body, again.Header.Get("Location"), again.Header.Get(httpapi.HeaderIdempotentReplayed), first.Body)
				}
				if again.Header.Get(httpapi.HeaderRequestID) == first.Header.Get(httpapi.HeaderRequestID) {
					t.Error("the replay carries the first request's id")
				}
				if n := calls(); n != 1 {
					t.Fatalf("CreatePlan called %d times, want 1", n)
				}
				replays := 0
				for _, l := range logs.Lines(t, "audit") {
					if l["idempotency_key"] == "create-1" && l["replayed"] == true && l["status"] == 201.0 && l["plan_id"] == planID {
						replays++
					}
				}
				if replays != 1 {
					t.Errorf("%d audit lines of the replay, want 1:\n%s", replays, logs)
				}

				other := serve(t, h, request{method: "POST", path: "/v1/plans", body: strings.Replace(createBody, `"r"`, `"s"`, 1), header: withKey("create-1", ops)})
				other.problem(t, 409, httpapi.CodeIdempotencyKeyReused)
				if n := calls(); n != 1 {
					t.Fatalf("CreatePlan called %d times after a reused key, want 1", n)
				}
				serve(t, h, request{method: "POST", path: "/v1/plans", body: createBody, header: withKey("create-2", ops)})
				if n := calls(); n != 2 {
					t.Fatalf("a new key: CreatePlan called %d times, want 2", n)
				}
			})

			t.Run("ScopedPerToken", func(t *testing.T) {
				t.Parallel()
				tokens := append(testTokens(), httpapi.Token{Name: "ops2", Role: httpapi.RoleOperator, Hash: httpapi.HashSecret("ops2-secret-0123456789abcdef")})
				svc := newFake()
				calls := countCalls(svc, "CreatePlan")
				h, _ := newAPI(t, svc, httpapi.Config{Tokens: tokens, Idempotency: store})
				serve(t, h, request{method: "POST", path: "/v1/plans", body: createBody, header: withKey("shared", ops)})
				a := serve(t, h, request{method: "POST", path: "/v1/plans", body: createBody, header: withKey("shared", bearer("ops2-secret-0123456789abcdef"))})
				if a.Status != 201 || a.Header.Get(httpapi.HeaderIdempotentReplayed) != "" || calls() != 2 {
					t.Fatalf("another token's key = %d, replayed %q, %d calls; want its own run", a.Status, a.Header.Get(httpapi.HeaderIdempotentReplayed), calls())
				}
			})

			t.Run("RetryReplayed", func(t *testing.T) {
				t.Parallel()
				svc := newFake()
				calls := countCalls(svc, "Retry")
				h, _ := newH(svc)
				body := `{"reason": "INC-5", "expectedAttempt": 1}`
				first := serve(t, h, request{method: "POST", path: "/v1/tenants/t-001/retry", body: body, header: withKey("retry-1", ops)})
				again := serve(t, h, request{method: "POST", path: "/v1/tenants/t-001/retry", body: body, header: withKey("retry-1", ops)})
				if first.Status != 202 || again.Status != 202 || string(again.Body) != string(first.Body) || calls() != 1 {
					t.Fatalf("retry twice = %d then %d after %d calls", first.Status, again.Status, calls())
				}
				// Another tenant is another request.
				serve(t, h, request{method: "POST", path: "/v1/tenants/t-002/retry", body: body, header: withKey("retry-1", ops)}).
					problem(t, 409, httpapi.CodeIdempotencyKeyReused)
				if calls() != 1 {
					t.Fatalf("Retry called %d times, want 1", calls())
				}
			})

			t.Run("ClientErrorKept", func(t *testing.T) {
				t.Parallel()
				svc := newFake()
				calls := countCalls(svc, "Retry")
				h, _ := newH(svc)
				svc.Err = fmt.Errorf("retry: %w", facade.ErrAttemptMismatch)
				rq := request{method: "POST", path: "/v1/tenants/t-001/retry", body: `{"reason": "r"}`, header: withKey("retry-409", ops)}
				serve(t, h, rq).problem(t, 409, httpapi.CodeAttemptMismatch)
				svc.Err = nil
				a := serve(t, h, rq)
				// The replay is the first answer byte for byte: its
				// requestId is the first request's (the one in the logs).
				if p := a.JSON(t); a.Status != 409 || p["code"] != httpapi.CodeAttemptMismatch || p["requestId"] == a.Header.Get(httpapi.HeaderRequestID) {
					t.Fatalf("repeat of a 409 = %d %s", a.Status, a.Body)
				}
				if a.Header.Get(httpapi.HeaderIdempotentReplayed) != "true" || calls() != 1 {
					t.Fatalf("repeat of a 409 = replayed %q after %d calls", a.Header.Get(httpapi.HeaderIdempotentReplayed), calls())
				}
			})

			t.Run("ServerErrorReleased", func(t *testing.T) {
				t.Parallel()
				svc := newFake()
				calls := countCalls(svc, "CreatePlan")
				h, _ := newH(svc)
				svc.Err = fmt.Errorf("store: %w", facade.ErrUnavailable)
				rq := request{method: "POST", path: "/v1/plans", body: createBody, header: withKey("create-503", ops)}
				serve(t, h, rq).problem(t, 503, httpapi.CodeUnavailable)
				svc.Err = nil
				if a := serve(t, h, rq); a.Status != 201 || a.Header.Get(httpapi.HeaderIdempotentReplayed) != "" || calls() != 2 {
					t.Fatalf("repeat after a 503 = %d, replayed %q, %d calls; want a new run", a.Status, a.Header.Get(httpapi.HeaderIdempotentReplayed), calls())
				}
			})

			t.Run("InProgress", func(t *testing.T) {
				t.Parallel()
				svc := newFake()
				entered, release := make(chan struct{}), make(chan struct{})
				svc.Hook = func(m string) {
					if m == "CreatePlan" {
						close(entered)
						<-release
					}
				}
				h, _ := newH(svc)
				rq := request{method: "POST", path: "/v1/plans", body: createBody, header: withKey("slow", ops)}
				done := make(chan answer)
				go func() { done <- serve(t, h, rq) }()
				<-entered
				a := serve(t, h, rq)
				a.problem(t, 409, httpapi.CodeIdempotencyInProgress)
				if a.Header.Get("Retry-After") == "" {
					t.Error("no Retry-After")
				}
				close(release)
				if first := <-done; first.Status != 201 {
					t.Fatalf("first = %d", first.Status)
				}
				if a := serve(t, h, rq); a.Status != 201 || a.Header.Get(httpapi.HeaderIdempotentReplayed) != "true" {
					t.Fatalf("repeat after the first finished = %d, replayed %q", a.Status, a.Header.Get(httpapi.HeaderIdempotentReplayed))
				}
			})

			t.Run("BadKey", func(t *testing.T) {
				t.Parallel()
				svc := newFake()
				h, _ := newH(svc)
				for _, key := range []string{"has space", strings.Repeat("k", 129), "ünïcode", "a/b"} {
					serve(t, h, request{method: "POST", path: "/v1/plans", body: createBody, header: withKey(key, ops)}).
						problem(t, 400, httpapi.CodeInvalidArgument)
				}
				req := httptest.NewRequest("POST", "/v1/plans", strings.NewReader(createBody))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+opsSecret)
				req.Header.Add(httpapi.HeaderIdempotencyKey, "a")
				req.Header.Add(httpapi.HeaderIdempotencyKey, "b")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 400 {
					t.Errorf("two keys = %d, want 400", rec.Code)
				}
				if svc.Calls() != 0 {
					t.Fatalf("service called %d times for bad keys", svc.Calls())
				}
			})
		})
	}
}

// TestIdempotencyAcrossInstances sends the first request to one instance and
// the repeat to another over the same Redis: real HTTP servers, one store.
func TestIdempotencyAcrossInstances(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			c, prefix := b.New(t)
			var (
				svcs  [2]*fakeService
				calls [2]func() int
				urls  [2]string
			)
			for i := range svcs {
				svcs[i] = newFake()
				calls[i] = countCalls(svcs[i], "CreatePlan")
				h, _ := newAPI(t, svcs[i], httpapi.Config{Tokens: testTokens(), Idempotency: idemStore(t, c, prefix)})
				srv := httptest.NewServer(h)
				t.Cleanup(srv.Close)
				urls[i] = srv.URL
			}
			post := func(url string) (int, string, string) {
				req, _ := http.NewRequest("POST", url+"/v1/plans", strings.NewReader(createBody))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+opsSecret)
				req.Header.Set(httpapi.HeaderIdempotencyKey, "across-1")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(body), resp.Header.Get(httpapi.HeaderIdempotentReplayed)
			}
			s1, b1, r1 := post(urls[0])
			s2, b2, r2 := post(urls[1])
			if s1 != 201 || s2 != 201 || b1 != b2 || r1 != "" || r2 != "true" {
				t.Fatalf("instance A = %d %q, instance B = %d %q (replayed %q)", s1, r1, s2, r2, r2)
			}
			if calls[0]() != 1 || calls[1]() != 0 {
				t.Fatalf("CreatePlan called %d times on A and %d on B, want 1 and 0", calls[0](), calls[1]())
			}
		})
	}
}
