// Package httpapi is the HTTP API of deploycoord (docs/api.md, docs/openapi.yaml):
// a chi router whose handlers turn requests into calls of the coordinator's
// use cases (the Service interface, implemented by *facade.Coordinator) and
// their answers into JSON.
//
// A request goes through, in order:
//
//	every route   logger (hlog) ─► request id + client address ─► access log ─►
//	              panic guard ─► security headers ─► in-flight bound
//	/v1 routes    authenticate (401) ─► authorize (403) ─► rate limit (429) ─►
//	              Config.Middlewares ─► path id check ─► Idempotency-Key ─►
//	              query check ─► body decoding ─► Service ─► JSON or problem
//	Config.Mounts the mounted handler (the web console under /ui, package
//	              httpapi/console), which authenticates its own way and
//	              reports its caller and actions with SetCaller, AuditAction
//	              and Deny; GET / redirects to Config.Home
//
// # Who is asking
//
// Every /v1 request needs Authorization: Bearer <token>, one of
// Config.Tokens. Only the SHA-256 of each secret is kept; a request's token
// is hashed and looked up by hash, and the hashes are compared again in
// constant time. A token has a role: viewer (every GET and HEAD, and the
// read-only POST /v1/tenants:status) or operator (also every other POST and
// DELETE). Without tokens authentication is off and everyone is "anonymous"
// with role operator — the server (cmd/deploycoord) then listens on
// loopback only. /healthz, /readyz and /openapi.yaml are open; /metrics
// (Config.Metrics) is open to loopback clients and needs any token from
// elsewhere. Token names, never secrets, reach logs, timelines and
// facade.Actor, which also carries the request id and the client address.
//
// The client address is the connection's, or — when the connection comes
// from one of Config.TrustedProxies — the right-most X-Forwarded-For entry
// that is not a trusted proxy (chi's RealIP, which believes anyone, is not
// used).
//
// # Logs
//
// One access line per request ("request": method, route pattern, status,
// size, duration, actor, client_addr, request_id), written by hlog's access
// handler; Config.Observe receives the same route, status and duration for
// the metrics. Every change (mutating request) also gets an audit line
// ("audit": actor, role, action, plan_id/tenant_id, the body's reason,
// client_addr, request_id, status, idempotency_key), and so does every
// request refused with 401, 403 or 429, at Warn with "denied" saying why.
// Handlers log through the request's logger, so every line carries the
// request id.
//
// # Limits
//
// Changes are rate limited per token (per client address with
// authentication off) on each instance with httprate: 429 RATE_LIMITED with
// Retry-After. At most Config.MaxInFlight requests are served at once
// (health checks aside): beyond, 503 UNAVAILABLE with Retry-After: 1.
// Everything a client sends is checked before the service is called: path
// ids against the allowlists of package task and plan, query parameters
// (unknown or repeated ones are refused), bodies (Content-Type
// application/json, at most MaxBodyBytes or MaxSmallBodyBytes, exactly one
// JSON object, no unknown field). Bad input is answered 400 INVALID_ARGUMENT,
// 413 PAYLOAD_TOO_LARGE or 415 UNSUPPORTED_MEDIA_TYPE and changes nothing;
// values from the input appear in details only through task.Quote.
//
// # Idempotency and cheap polling
//
// POST /v1/plans and POST /v1/tenants/{tenantId}/retry accept an
// Idempotency-Key. The first request with a key (per token) claims it in
// Config.Idempotency (Redis: SET NX with a 5-minute claim TTL, so a crashed
// instance's claim frees itself) and runs; its answer, if 2xx or 4xx, is
// kept for Config.IdempotencyTTL (24 h) and replayed byte for byte to
// repeats, on any instance, with Idempotent-Replayed: true. Two requests are
// the same when method, route, path parameters and body (white space aside)
// hash the same; otherwise 409 IDEMPOTENCY_KEY_REUSED. A repeat while the
// first runs gets 409 IDEMPOTENCY_IN_PROGRESS with Retry-After at once (no
// waiting: a request never holds a connection for another's work). A 5xx,
// a panic or a client gone before the answer releases the key.
//
// GET of a plan, of a plan's tasks and of a task carries a strong ETag (the
// SHA-256 of the body sent); If-None-Match with it answers 304 without a
// body while nothing changed.
//
// # Event feed, instances, health
//
// GET /v1/events reads the feed (Service.Events): a page after a cursor,
// or with wait a long poll, served as blocking reads of at most
// LongPollChunk (a read blocked in Redis does not see its client leave, so
// a gone client holds a Redis connection for one chunk at most). At most
// Config.MaxLongPolls long polls wait at once — each holds a Redis
// connection — beyond which a long poll is answered 503 with Retry-After.
// The long poll moves its write deadline past the server's WriteTimeout
// (http.ResponseController).
//
// With Accept: text/event-stream the same route streams Server-Sent Events:
//
//	a Config.MaxStreams slot ──none free──► 503, Retry-After: 1
//	   │ gives back its Config.MaxInFlight slot
//	   ▼
//	first read (no wait) ──error──► problem answer (400, 503)
//	   │ ok: 200 text/event-stream, "retry: 2000", the events
//	   ▼
//	loop: long poll of at most Config.StreamKeepAlive (a slot, or a read
//	      without wait and a 1s pause when none is free)
//	      ├─ events ─► "id: <cursor>\nevent: <type>\ndata: <json>\n\n", flush
//	      ├─ nothing for StreamKeepAlive ─► ": ping\n\n", flush
//	      └─ client gone or read failed ─► end (the client resumes with
//	         Last-Event-ID, which wins over ?after=)
//
// Each write extends the write deadline, so the server's WriteTimeout does
// not end a stream. A stream holds one of Config.MaxStreams slots for its
// life (none free: 503 with Retry-After) and gives back its
// Config.MaxInFlight slot, so that open streams cannot lock out the other
// requests.
//
// GET /v1/instances lists the instance registry. GET /readyz is 200 only
// when Config.Ready (Redis PING) succeeds; both answers carry "checks":
// redis, and Config.ReadyDetail's degraded, pendingWrites and selfCheck
// (the Redis settings report: warnings never make it 503).
//
// POST /v1/tenants:status reads all its tenants with one Service call (two
// Redis round trips). When the answer came from memory (degraded) and
// memory lacks one of the tenants, it is 503: memory holds only this
// instance's unfinished tasks, so "no task" could be false.
//
// Metrics are package httpapi/metrics (a Recorder is the coordinator's
// Observer, Config.Observe, the Redis command hook's callback and the
// lease renewal hook); this package only serves Config.Metrics.
//
// # Errors
//
// Errors are application/problem+json (RFC 9457) with a stable code. One
// table (errors.go) maps the facade's sentinel errors to statuses and codes;
// an error it does not know is answered 500 INTERNAL with a generic detail
// and logged once with the request id; a stored record that does not decode
// (facade.IsMalformed: a hand edit or a bug) is 500 INTERNAL too, logged the
// same way, with a detail naming its key and field. When the client goes
// away nothing is answered.
//
// Answers that came from memory because Redis was unreachable carry
// "degraded": true and the header X-Deploycoord-Degraded: true.
//
// docs/openapi.yaml describes every route exactly; the package embeds a copy
// (served at /openapi.yaml) and its tests check that the copy is current, that
// router and document list the same operations, and that every answer the
// tests see validates against the document.
package httpapi
