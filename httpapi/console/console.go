package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// Defaults of Config.
const (
	// SessionTTLDefault is how long a sign-in lasts.
	SessionTTLDefault = 12 * time.Hour
	// PollIntervalDefault is how often an event stream reads the feed.
	PollIntervalDefault = time.Second
	// KeepAliveDefault is how often an idle event stream gets a comment.
	KeepAliveDefault = 15 * time.Second
	// MaxStreamsDefault bounds the console's event streams open at once;
	// browsers beyond it fall back to polling.
	MaxStreamsDefault = 64
	// PageSize is how many tenants the plan page shows at once.
	PageSize = 100
	// PlansPageSize is how many plans the plan list shows at once.
	PlansPageSize = 50
)

// Path is where the console is served, under Config.BasePath.
const Path = "/ui"

// anonymous is the caller when authentication is off, as in the API.
const anonymous = "anonymous"

// Service is what the console needs from the coordinator;
// *facade.Coordinator implements it. Errors match the facade's sentinels,
// answered with the statuses of the API's one table (httpapi.Classify).
type Service interface {
	Plan(ctx context.Context, planID string) (facade.PlanView, error)
	Plans(ctx context.Context, f plan.ListFilter) ([]facade.PlanView, string, error)
	PlanTasks(ctx context.Context, planID string, f plan.TaskFilter) ([]facade.TaskView, string, error)
	PausePlan(ctx context.Context, planID, reason string, a facade.Actor) (facade.PlanView, error)
	ResumePlan(ctx context.Context, planID string, o facade.ResumeOptions, a facade.Actor) (facade.PlanView, error)
	CancelPlan(ctx context.Context, planID, reason string, a facade.Actor) (facade.PlanView, error)
	RetryPlan(ctx context.Context, planID string, req facade.PlanRetryRequest, a facade.Actor) (facade.PlanRetryResult, error)

	TaskByTenant(ctx context.Context, tenantID string) (facade.TaskView, error)
	TasksByTenant(ctx context.Context, tenantIDs []string) (map[string]facade.TaskView, error)
	Task(ctx context.Context, taskID string) (facade.TaskView, error)
	Checkpoint(ctx context.Context, tenantID string) (checkpoint.Checkpoint, error)
	History(ctx context.Context, tenantID string, limit int) ([]facade.TaskView, error)
	Timeline(ctx context.Context, tenantID string, limit int) (facade.TimelineView, error)
	Lock(ctx context.Context, tenantID string) (tenantlock.Info, error)
	ReleaseLock(ctx context.Context, tenantID string, expectedFence int64, reason string, a facade.Actor) (tenantlock.Info, error)
	Retry(ctx context.Context, tenantID string, req facade.RetryRequest, a facade.Actor) (facade.RetryResult, error)
	PauseTask(ctx context.Context, tenantID, reason string, a facade.Actor) (facade.TaskView, error)
	ResumeTask(ctx context.Context, tenantID, reason string, a facade.Actor) (facade.TaskView, error)
	CancelTask(ctx context.Context, tenantID, reason string, a facade.Actor) (facade.TaskView, error)

	Events(ctx context.Context, f task.FeedFilter, wait time.Duration) ([]task.FeedEvent, string, error)
	Instances(ctx context.Context) ([]facade.InstanceView, error)
}

var _ Service = (*facade.Coordinator)(nil)

// Config configures the console. Zero fields mean the default.
type Config struct {
	// BasePath is the path prefix the console is reached under through a
	// reverse proxy ("" or like "/deploycoord"): its links, redirects and
	// cookies start with BasePath + "/ui/". Mount the handler at Paths().
	BasePath string
	// Tokens are the API tokens (httpapi.Config.Tokens): the same names,
	// roles and secrets sign in to the console. None: authentication is off
	// and everybody is "anonymous" with role operator, as in the API.
	Tokens []httpapi.Token
	// Logger receives sign-ins, sign-outs and failures (zerolog.Nop()).
	Logger *zerolog.Logger
	// SessionTTL is how long a sign-in lasts (SessionTTLDefault).
	SessionTTL time.Duration
	// PollInterval is how often an event stream reads the feed
	// (PollIntervalDefault); the reads never wait in Redis, so a stream
	// holds no Redis connection between them.
	PollInterval time.Duration
	// KeepAlive is how often an idle stream gets a comment (KeepAliveDefault).
	KeepAlive time.Duration
	// MaxStreams bounds the event streams open at once (MaxStreamsDefault);
	// one beyond it is answered 503 and the page polls instead.
	MaxStreams int
	// Version is shown in the footer.
	Version string
}

// BasePathValid reports whether p may be Config.BasePath: "" or a path of
// "/"-separated segments of letters, digits, ".", "_", "-" and "~", without
// a trailing slash (like /deploycoord or /ops/deploycoord).
func BasePathValid(p string) bool {
	if p == "" {
		return true
	}
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || len(p) > 200 {
		return false
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for _, ch := range seg {
			ok := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || strings.ContainsRune("._-~", ch)
			if !ok {
				return false
			}
		}
	}
	return true
}

// Console is the web console: an http.Handler to mount (httpapi.Config.Mounts)
// at each of Paths(). Close ends its event streams, so that a server
// shutting down is not held by open browser tabs.
type Console struct {
	svc    Service
	cfg    Config
	log    zerolog.Logger
	keys   keys
	tokens map[string]httpapi.Token
	// root is the console's path as the browser sees it: BasePath + "/ui/".
	root        string
	pages       map[string]*template.Template
	staticFiles fs.FS
	assetV      string
	streams     chan struct{}
	router      chi.Router

	closeOnce sync.Once
	closed    chan struct{}
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// New returns the console serving svc. It fails for a BasePath that
// BasePathValid refuses or tokens httpapi.ValidateTokens refuses.
func New(svc Service, cfg Config) (*Console, error) {
	if !BasePathValid(cfg.BasePath) {
		return nil, fmt.Errorf("console: base path %q: want \"\" or like /deploycoord (no trailing slash)", cfg.BasePath)
	}
	if err := httpapi.ValidateTokens(cfg.Tokens); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = SessionTTLDefault
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = PollIntervalDefault
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = KeepAliveDefault
	}
	if cfg.MaxStreams == 0 {
		cfg.MaxStreams = MaxStreamsDefault
	}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	c := &Console{
		svc: svc, cfg: cfg, log: log.With().Str("component", "console").Logger(),
		keys: newKeys(cfg.Tokens), tokens: make(map[string]httpapi.Token, len(cfg.Tokens)),
		root: cfg.BasePath + Path + "/", closed: make(chan struct{}),
	}
	for _, t := range cfg.Tokens {
		c.tokens[t.Name] = t
	}
	if cfg.MaxStreams > 0 {
		c.streams = make(chan struct{}, cfg.MaxStreams)
	}
	var err error
	if c.pages, err = parsePages(c); err != nil {
		return nil, err
	}
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	c.assetV = assetVersion(sub)
	c.staticFiles = sub
	c.router = c.routes()
	return c, nil
}

// Paths returns where to mount the console: BasePath + "/ui" for a proxy
// that passes the path on as it is, and "/ui" for one that strips the base
// path (or a browser reaching the server directly).
func (c *Console) Paths() []string {
	if c.cfg.BasePath == "" {
		return []string{Path}
	}
	return []string{c.cfg.BasePath + Path, Path}
}

// Home is the console's first page as the browser sees it, where GET /
// redirects (httpapi.Config.Home).
func (c *Console) Home() string { return c.root }

// Close ends the open event streams (their browsers reconnect elsewhere or
// poll). Call it when the server starts shutting down
// (http.Server.RegisterOnShutdown).
func (c *Console) Close() { c.closeOnce.Do(func() { close(c.closed) }) }

// ServeHTTP serves the console's pages.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.router.ServeHTTP(w, r) }

// contentSecurityPolicy allows the console's own script, style sheet,
// images and requests and nothing else: no inline script or style, no
// framing, forms posting to the console only.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// headers sets the console's security headers on every answer.
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}

func (c *Console) routes() chi.Router {
	r := chi.NewRouter()
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpapi.Deny(r, "cross-origin request")
		c.renderError(w, r, nil, http.StatusForbidden, "Refused: this request came from another site. Use the console's own buttons.")
	}))
	r.Use(headers, cop.Handler)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		c.renderError(w, r, nil, http.StatusNotFound, "No such page.")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		c.renderError(w, r, nil, http.StatusMethodNotAllowed, "Method "+r.Method+" is not allowed here.")
	})
	r.Get("/static/*", c.serveStatic)
	r.Get("/sign-in", c.signInPage)
	r.Post("/sign-in", c.signIn)
	r.Group(func(r chi.Router) {
		r.Use(c.authenticate)
		r.Get("/", c.plansPage)
		r.Get("/plans/{planId}", c.planPage)
		r.Get("/tenants/{tenantId}", c.tenantPage)
		r.Get("/instances", c.instancesPage)
		r.Get("/search", c.search)
		r.Get("/events", c.events)
		r.Group(func(r chi.Router) {
			r.Use(c.checkAction)
			r.Post("/sign-out", c.signOut)
			r.Post("/plans/{planId}/retry", c.retryPlan)
			r.Post("/plans/{planId}/{action:pause|resume|cancel}", c.planAction)
			r.Post("/tenants/{tenantId}/retry", c.retryTenant)
			r.Post("/tenants/{tenantId}/{action:pause|resume|cancel}", c.taskAction)
			r.Post("/tenants/{tenantId}/lock/release", c.releaseLock)
		})
	})
	return r
}

// serveStatic serves the embedded style sheet and script. Their URLs carry
// a hash of the files (assetVersion), so browsers may keep them.
func (c *Console) serveStatic(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "*")
	if name == "" || strings.HasSuffix(name, "/") {
		c.renderError(w, r, nil, http.StatusNotFound, "No such file.")
		return
	}
	w.Header().Set("Cache-Control", "public, max-age=86400")
	http.ServeFileFS(w, r, c.staticFiles, name)
}

// ctxKey keys the caller in a request's context.
type ctxKey int

const callerKey ctxKey = 0

// caller is who sends a request, from the session.
type caller struct {
	session
	CSRF string
	// Flash is the message an action left for this page.
	Flash *flash
}

// CanAct reports whether the caller may act (role operator).
func (cl caller) CanAct() bool { return cl.Role == string(httpapi.RoleOperator) }

func callerOf(r *http.Request) caller {
	cl, _ := r.Context().Value(callerKey).(caller)
	return cl
}

// authenticate lets through requests with a valid session. Without one, a
// page asks to sign in (or, with authentication off, gets an anonymous
// session at once); the event stream and actions are refused.
func (c *Console) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok := c.readSession(r)
		if !ok {
			switch {
			case len(c.tokens) == 0 && (r.Method == http.MethodGet || r.Method == http.MethodHead):
				var err error
				if s, err = c.startSession(w, r, anonymous, httpapi.RoleOperator); err != nil {
					c.fail(w, r, err)
					return
				}
			case r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, "/events"):
				http.Redirect(w, r, c.root+"sign-in?next="+url.QueryEscape(c.browserPath(r)), http.StatusSeeOther)
				return
			default:
				httpapi.Deny(r, "no console session")
				c.renderError(w, r, nil, http.StatusUnauthorized, "Your session has ended: sign in again.")
				return
			}
		}
		httpapi.SetCaller(r, s.Name, httpapi.Role(s.Role))
		cl := caller{session: s, CSRF: c.keys.csrf(s)}
		if r.Method == http.MethodGet && !fragment(r) && !strings.HasSuffix(r.URL.Path, "/events") {
			cl.Flash = c.takeFlash(w, r)
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey, cl)))
	})
}

// checkAction refuses an action without the session's CSRF token, or from
// a viewer.
func (c *Console) checkAction(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cl := callerOf(r)
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			c.renderError(w, r, nil, http.StatusBadRequest, "The form could not be read: "+err.Error())
			return
		}
		if !c.keys.validCSRF(cl.session, r.PostForm.Get("csrf")) {
			httpapi.Deny(r, "missing or wrong CSRF token")
			c.renderError(w, r, nil, http.StatusForbidden, "Refused: the form's security token is missing or out of date. Reload the page and try again.")
			return
		}
		if !cl.CanAct() && !strings.HasSuffix(r.URL.Path, "/sign-out") {
			httpapi.AuditAction(r, chi.URLParam(r, "planId"), chi.URLParam(r, "tenantId"), r.PostForm.Get("reason"))
			httpapi.Deny(r, "role "+cl.Role+" may not change state")
			c.renderError(w, r, nil, http.StatusForbidden, fmt.Sprintf("Refused: %s has role %s, which may look but not act. Actions need role %s.",
				cl.Name, cl.Role, httpapi.RoleOperator))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// maxFormBytes bounds an action's form (tenants selected by hand included).
const maxFormBytes = 1 << 20

// browserPath is the request's path and query as the browser sees it.
func (c *Console) browserPath(r *http.Request) string {
	rest := chi.RouteContext(r.Context()).RoutePath
	if rest == "" {
		rest = "/"
	}
	p := c.cfg.BasePath + Path + rest
	if r.URL.RawQuery != "" {
		p += "?" + r.URL.RawQuery
	}
	return p
}

// localNext returns next if it is a page of this console, else its home:
// a sign-in never sends the browser elsewhere.
func (c *Console) localNext(next string) string {
	if !strings.HasPrefix(next, c.root) || strings.ContainsAny(next, "\\\r\n") || strings.Contains(next, "//") {
		return c.root
	}
	return next
}

// actor is the facade actor of a console request.
func actor(r *http.Request) facade.Actor {
	cl := callerOf(r)
	return facade.Actor{Name: cl.Name, Role: cl.Role, RequestID: httpapi.RequestID(r.Context()), Addr: httpapi.ClientAddr(r.Context())}
}

// render writes page name with data, status 200 unless status is set.
func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, status int, data any) {
	t := c.pages[name]
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "page", data); err != nil {
		c.log.Error().Err(err).Str("page", name).Msg("console page failed to render")
		http.Error(w, "internal error: the page failed to render", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// renderFragment writes the live parts of page name (its "live" template).
func (c *Console) renderFragment(w http.ResponseWriter, name string, data any) {
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "live", data); err != nil {
		c.log.Error().Err(err).Str("page", name).Msg("console fragment failed to render")
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

// errorPage is the data of the error page.
type errorPage struct {
	frame
	Status  int
	Message string
}

// renderError answers status with an error page saying msg.
func (c *Console) renderError(w http.ResponseWriter, r *http.Request, _ error, status int, msg string) {
	if status == http.StatusForbidden {
		// (A page's 403 is the API's: a viewer's action, a cross-site
		// request, a form without its token.)
		httpapi.NoteCode(r, httpapi.CodePermissionDenied)
	}
	c.render(w, r, "error", status, errorPage{frame: c.frame(r, http.StatusText(status)), Status: status, Message: msg})
}

// fail answers err as the API would (its status and detail), on a page.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return
	}
	status, code, detail, known := httpapi.Classify(err)
	if !known {
		c.log.Error().Err(err).Str("path", r.URL.Path).Str("request_id", httpapi.RequestID(r.Context())).Msg("console request failed")
	}
	httpapi.NoteCode(r, code)
	c.renderError(w, r, err, status, code+": "+detail)
}
