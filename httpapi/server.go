package httpapi

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/httprate"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/hlog"

	"github.com/deploycoord/deploycoord/facade"
)

// Defaults of Config and ServerConfig.
const (
	// MaxBodyBytesDefault bounds a plan creation body: plans may list
	// 100 000 tenants with their params.
	MaxBodyBytesDefault = 16 << 20
	// MaxSmallBodyBytesDefault bounds every other request body.
	MaxSmallBodyBytesDefault = 64 << 10
	// statusBodyBytes is the least a POST /v1/tenants:status body may hold:
	// MaxStatusTenants quoted tenant ids of the longest length.
	statusBodyBytes = 256 << 10
	// MaxStatusTenants is the most tenant ids one POST /v1/tenants:status
	// accepts.
	MaxStatusTenants = 1000
	// readyTimeout bounds one /readyz check.
	readyTimeout = 5 * time.Second

	// ReadHeaderTimeoutDefault bounds reading a request's headers.
	ReadHeaderTimeoutDefault = 10 * time.Second
	// ReadTimeoutDefault bounds reading a whole request (a 16 MiB plan).
	ReadTimeoutDefault = 60 * time.Second
	// WriteTimeoutDefault bounds serving a request. Long polls and event
	// streams of the feed move their own write deadline past it.
	WriteTimeoutDefault = 60 * time.Second
	// IdleTimeoutDefault bounds an idle keep-alive connection.
	IdleTimeoutDefault = 120 * time.Second
	// MaxHeaderBytesDefault bounds a request's headers.
	MaxHeaderBytesDefault = 64 << 10

	// RateLimitDefault is how many mutating requests a token may send per
	// RateWindowDefault.
	RateLimitDefault = 60
	// RateWindowDefault is the window of the rate limit.
	RateWindowDefault = time.Minute
	// MaxInFlightDefault bounds the requests served at once.
	MaxInFlightDefault = 256
	// IdempotencyTTLDefault is how long the first answer to a request with
	// an Idempotency-Key is replayed.
	IdempotencyTTLDefault = 24 * time.Hour
)

// HeaderDegraded is set to "true" on answers that came from memory because
// Redis was unreachable.
const HeaderDegraded = "X-Deploycoord-Degraded"

// Config configures the HTTP API. Zero fields mean the default.
type Config struct {
	// Logger receives the access log, the audit log and errors
	// (zerolog.Nop()).
	Logger *zerolog.Logger
	// MaxBodyBytes bounds a POST /v1/plans body (MaxBodyBytesDefault).
	MaxBodyBytes int64
	// MaxSmallBodyBytes bounds every other body (MaxSmallBodyBytesDefault;
	// POST /v1/tenants:status accepts at least 256 KiB, enough for
	// MaxStatusTenants ids).
	MaxSmallBodyBytes int64
	// Ready reports whether the instance can serve (Redis reachable); nil
	// means always ready. GET /readyz answers 503 when it returns an error.
	Ready func(ctx context.Context) error
	// ReadyDetail, when set, adds what the instance knows about its storage
	// to the checks of GET /readyz, 200 and 503 alike: degraded, pending
	// writes, the Redis self-check (its Redis field is set from Ready). It
	// does not decide readiness.
	ReadyDetail func(ctx context.Context) ReadyChecks
	// Version is reported by GET /healthz.
	Version string

	// Tokens are the API tokens (see auth.go). Empty turns authentication
	// off: every request is served as "anonymous" with role operator, which
	// the server allows only on a loopback listener. They must pass
	// ValidateTokens; New panics otherwise.
	Tokens []Token
	// TrustedProxies are the addresses of reverse proxies whose
	// X-Forwarded-For header is believed (none: the client address is the
	// connection's).
	TrustedProxies []netip.Prefix
	// RateLimit is how many mutating requests (POST and DELETE, except the
	// read-only POST /v1/tenants:status) one token, or one client address
	// when authentication is off, may send per RateWindow on this instance
	// (RateLimitDefault); negative means no limit.
	RateLimit int
	// RateWindow is the window of RateLimit (RateWindowDefault).
	RateWindow time.Duration
	// MaxInFlight bounds the requests served at once, health checks aside
	// (MaxInFlightDefault); negative means no bound. An event stream counts
	// until it holds a MaxStreams slot, and from then on only there.
	MaxInFlight int
	// Idempotency keeps the first answer to POST /v1/plans, POST
	// /v1/plans/{planId}/retry and POST /v1/tenants/{tenantId}/retry sent
	// with an Idempotency-Key header (*repository.Idempotency implements
	// it). Nil: the header is checked and otherwise ignored.
	Idempotency IdempotencyStore
	// IdempotencyTTL is how long a first answer is replayed
	// (IdempotencyTTLDefault).
	IdempotencyTTL time.Duration
	// Metrics serves GET /metrics (nil: 404). Clients on loopback need no
	// token; others need any valid token.
	Metrics http.Handler
	// Observe, when set, is called once per request when its answer is
	// written, with the route pattern ("unmatched" for unknown routes), the
	// status and the time taken: the hook of the HTTP metrics.
	Observe func(route string, status int, d time.Duration)

	// StreamKeepAlive is how often an idle event stream (GET /v1/events
	// with Accept: text/event-stream) gets a keep-alive comment; each of
	// its polls waits at most that long (StreamKeepAliveDefault).
	StreamKeepAlive time.Duration
	// MaxLongPolls bounds the long polls of the event feed waiting at once
	// (MaxLongPollsDefault); negative means no bound. Each holds a Redis
	// connection while it waits, so the Redis client's pool must be larger
	// than this by what the task writes, lease renewals and queries need.
	// A long poll beyond it is answered 503 UNAVAILABLE with Retry-After; a
	// stream polls without waiting, once a second.
	MaxLongPolls int
	// MaxStreams bounds the event streams open at once (MaxStreamsDefault);
	// negative means no bound. A stream holds its slot for its life instead
	// of a MaxInFlight one; one beyond it is answered 503 UNAVAILABLE with
	// Retry-After.
	MaxStreams int

	// Mounts are handlers served by the API's router under a path (a chi
	// Mount: the handler routes the rest of the path): inside its request
	// id, access log, panic recovery and in-flight limit, outside the /v1
	// authentication. They authenticate their own way and tell the API who
	// calls with SetCaller and AuditAction (the web console, see
	// httpapi/console).
	Mounts []Mount
	// Home, when set, is where GET / redirects (303): the web console.
	Home string

	// Middlewares wrap every /v1 route, outermost first, after
	// authentication, authorization and rate limiting and before path
	// validation. They may answer with WriteProblem.
	Middlewares []func(http.Handler) http.Handler
	// ActorFunc says who makes a request, for the audit trail (default: the
	// token's name and role — "anonymous" and "operator" with
	// authentication off — the request id and the client address). A
	// RequestID it leaves empty is filled in.
	ActorFunc func(*http.Request) facade.Actor
}

// Mount is a handler of Config.Mounts served under Path (like "/ui").
type Mount struct {
	Path    string
	Handler http.Handler
}

type api struct {
	// The parts of the Service that each group of routes calls.
	plans    PlanService
	tenants  TenantService
	feed     FeedService
	refusals RefusalRecorder

	cfg     Config
	log     zerolog.Logger
	keys    keyring
	limiter *httprate.RateLimiter
	slots   chan struct{}
	// polls holds a token per long poll waiting (nil: no bound).
	polls chan struct{}
	// streams holds a token per open event stream (nil: no bound).
	streams chan struct{}
}

// New returns the HTTP API serving svc: every route of docs/api.md under /v1,
// plus /healthz, /readyz, /openapi.yaml and /metrics. It panics when
// cfg.Tokens do not pass ValidateTokens.
func New(svc Service, cfg Config) http.Handler {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = MaxBodyBytesDefault
	}
	if cfg.MaxSmallBodyBytes <= 0 {
		cfg.MaxSmallBodyBytes = MaxSmallBodyBytesDefault
	}
	if cfg.RateLimit == 0 {
		cfg.RateLimit = RateLimitDefault
	}
	if cfg.RateWindow <= 0 {
		cfg.RateWindow = RateWindowDefault
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = MaxInFlightDefault
	}
	if cfg.IdempotencyTTL <= 0 {
		cfg.IdempotencyTTL = IdempotencyTTLDefault
	}
	if cfg.StreamKeepAlive <= 0 {
		cfg.StreamKeepAlive = StreamKeepAliveDefault
	}
	if cfg.MaxLongPolls == 0 {
		cfg.MaxLongPolls = MaxLongPollsDefault
	}
	if cfg.MaxStreams == 0 {
		cfg.MaxStreams = MaxStreamsDefault
	}
	if cfg.ActorFunc == nil {
		cfg.ActorFunc = defaultActor
	}
	keys, err := newKeyring(cfg.Tokens)
	if err != nil {
		panic("httpapi.New: " + err.Error())
	}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	a := &api{plans: svc, tenants: svc, feed: svc, refusals: svc,
		cfg: cfg, log: log.With().Str("component", "httpapi").Logger(), keys: keys}
	if cfg.RateLimit > 0 {
		a.limiter = httprate.NewRateLimiter(cfg.RateLimit, cfg.RateWindow,
			httprate.WithLimitHandler(a.rateLimited),
			httprate.WithResponseHeaders(httprate.ResponseHeaders{
				Limit: "X-RateLimit-Limit", Remaining: "X-RateLimit-Remaining", Reset: "X-RateLimit-Reset",
				RetryAfter: "Retry-After",
			}))
	}
	if cfg.MaxInFlight > 0 {
		a.slots = make(chan struct{}, cfg.MaxInFlight)
	}
	if cfg.MaxLongPolls > 0 {
		a.polls = make(chan struct{}, cfg.MaxLongPolls)
	}
	if cfg.MaxStreams > 0 {
		a.streams = make(chan struct{}, cfg.MaxStreams)
	}
	return a.routes()
}

// defaultActor is the caller as authenticated (see requestInfo).
func defaultActor(r *http.Request) facade.Actor {
	info := infoOf(r)
	return facade.Actor{Name: info.actor, Role: string(info.role), RequestID: info.id, Addr: info.client}
}

func (a *api) actor(r *http.Request) facade.Actor {
	act := a.cfg.ActorFunc(r)
	if act.RequestID == "" {
		act.RequestID = RequestID(r.Context())
	}
	return act
}

func (a *api) routes() *chi.Mux {
	r := chi.NewRouter()
	r.Use(hlog.NewHandler(a.log), a.withRequest, hlog.AccessHandler(a.logRequest), a.recoverPanic,
		securityHeaders, a.limitInFlight)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		WriteProblem(w, r, http.StatusNotFound, CodeNotFound, "no such route")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Allow", strings.Join(allowed(r, req), ", "))
		WriteProblem(w, req, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method "+req.Method+" is not allowed here")
	})

	r.Get("/healthz", a.healthz)
	r.Get("/readyz", a.readyz)
	r.Get("/openapi.yaml", serveOpenAPI)
	r.Get("/metrics", a.metrics)
	if home := a.cfg.Home; home != "" {
		r.Get("/", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, home, http.StatusSeeOther) })
	}
	for _, m := range a.cfg.Mounts {
		r.Mount(m.Path, m.Handler)
	}

	r.Group(func(r chi.Router) {
		r.Use(a.authenticate, a.authorize, a.rateLimit)
		r.Use(a.cfg.Middlewares...)

		r.With(a.idempotent(a.cfg.MaxBodyBytes)).Post("/v1/plans", a.createPlan)
		r.Get("/v1/plans", a.listPlans)
		r.With(validPlan).Get("/v1/plans/{planId}", a.getPlan)
		r.With(validPlan).Get("/v1/plans/{planId}/tasks", a.planTasks)
		r.With(validPlan).Post("/v1/plans/{planId}/start", a.startPlan)
		r.With(validPlan).Post("/v1/plans/{planId}/pause", a.pausePlan)
		r.With(validPlan).Post("/v1/plans/{planId}/resume", a.resumePlan)
		r.With(validPlan).Post("/v1/plans/{planId}/cancel", a.cancelPlan)
		r.With(validPlan).Post("/v1/plans/{planId}/repair-counts", a.repairCounts)
		r.With(validPlan, a.idempotent(a.retryPlanBodyBytes())).Post("/v1/plans/{planId}/retry", a.retryPlan)

		r.Post("/v1/tenants:status", a.tenantsStatus)
		r.Group(func(r chi.Router) {
			r.Use(validTenant)
			r.Get("/v1/tenants/{tenantId}/task", a.tenantTask)
			r.Get("/v1/tenants/{tenantId}/checkpoint", a.getCheckpoint)
			r.Head("/v1/tenants/{tenantId}/checkpoint", a.headCheckpoint)
			r.Get("/v1/tenants/{tenantId}/history", a.history)
			r.Get("/v1/tenants/{tenantId}/timeline", a.timeline)
			r.With(a.idempotent(a.cfg.MaxSmallBodyBytes)).Post("/v1/tenants/{tenantId}/retry", a.retry)
			r.Post("/v1/tenants/{tenantId}/pause", a.pauseTask)
			r.Post("/v1/tenants/{tenantId}/resume", a.resumeTask)
			r.Post("/v1/tenants/{tenantId}/cancel", a.cancelTask)
			r.Get("/v1/tenants/{tenantId}/lock", a.getLock)
			r.Delete("/v1/tenants/{tenantId}/lock", a.releaseLock)
		})

		r.Get("/v1/tasks", a.searchTasks)
		r.With(validTask).Get("/v1/tasks/{taskId}", a.getTask)

		r.Get("/v1/events", a.events)
		r.Get("/v1/instances", a.instances)
	})
	return r
}

// allowed lists the methods routed for the request's path.
func allowed(mux *chi.Mux, r *http.Request) []string {
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if mux.Match(chi.NewRouteContext(), m, path) {
			out = append(out, m)
		}
	}
	return out
}

// writeJSON answers v with status; degraded sets the degraded header.
func (a *api) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any, degraded bool) {
	body, err := marshal(v)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	defer body.release()
	b := body.b
	if degraded {
		w.Header().Set(HeaderDegraded, "true")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// ServerConfig holds the timeouts of the http.Server made by NewServer.
// Zero fields mean the default.
type ServerConfig struct {
	// ReadHeaderTimeout bounds reading a request's headers
	// (ReadHeaderTimeoutDefault).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included
	// (ReadTimeoutDefault).
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of the answer (WriteTimeoutDefault).
	WriteTimeout time.Duration
	// IdleTimeout bounds an idle keep-alive connection (IdleTimeoutDefault).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (MaxHeaderBytesDefault).
	MaxHeaderBytes int
}

// NewServer returns an http.Server serving h on addr with cfg's timeouts;
// the caller runs and shuts it down.
func NewServer(addr string, h http.Handler, cfg ServerConfig) *http.Server {
	or := func(d, def time.Duration) time.Duration {
		if d <= 0 {
			return def
		}
		return d
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = MaxHeaderBytesDefault
	}
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: or(cfg.ReadHeaderTimeout, ReadHeaderTimeoutDefault),
		ReadTimeout:       or(cfg.ReadTimeout, ReadTimeoutDefault),
		WriteTimeout:      or(cfg.WriteTimeout, WriteTimeoutDefault),
		IdleTimeout:       or(cfg.IdleTimeout, IdleTimeoutDefault),
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
	}
}
