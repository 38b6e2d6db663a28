// Package console is deploycoord's web console: pages for plans, a plan's
// tenants, one tenant and the instances, served by the server itself under
// /ui/ (docs/architecture.md, "Why httpapi/console"). It talks to the coordinator through the
// facade, like the HTTP API, and is mounted in the API's router
// (httpapi.Config.Mounts), so it shares its request ids, logs, audit trail
// and limits.
//
// # Rendering
//
// Pages are html/template files embedded with embed.FS and rendered on the
// server: they read fully with scripts off, and every value is escaped by
// the template engine (plan names, reasons, stage errors, context data).
// static/console.js, a few kilobytes of plain JavaScript with no build
// step, keeps a page current:
//
//	page (rendered with the feed cursor read before its data)
//	  │  EventSource GET /ui/events?after=<cursor>&planId=…   (cookie session)
//	  ▼
//	"changes" {cursor, tenants, plans}    ← one per batch of feed events
//	  │  GET <page>?fragment=1&tenant=…   (the tenants shown on this page only)
//	  ▼
//	server-rendered parts (data-swap) replace theirs by id
//
// The plan page shows 100 tenants a page; an event for a tenant not on the
// page costs nothing, and a burst of events costs one fragment request of
// at most 100 rows per half second. When event streams fail (a buffering
// proxy, the stream limit) the page polls the same endpoint as JSON. A
// hidden page (a background tab) closes its stream and reopens it from its
// cursor when shown: a browser opens six connections to a server over
// HTTP/1.1, and a stream per tab would leave the sixth tab none. The
// stream reads the feed every PollInterval without blocking in Redis, so it
// holds no Redis connection between reads.
//
// # Security
//
//   - Sign-in takes an API token once (the same tokens and roles as the
//     API). The session cookie holds the token's name, its role, an expiry
//     and a random id, signed with HMAC-SHA256 under a key derived from the
//     configured tokens (not the secret itself): every instance with the
//     same tokens accepts it, and changing any token ends every session.
//     It is HttpOnly, SameSite=Strict, Secure when the browser came over TLS
//     (directly or through a proxy that says so), scoped to the console's
//     path.
//   - Every action is a POST carrying a CSRF token, an HMAC of the session
//     id, and passes net/http's CrossOriginProtection (Sec-Fetch-Site /
//     Origin). Viewers get no forms; their actions are refused (403) anyway.
//   - Content-Security-Policy: default-src 'none'; script, style, images and
//     requests from the console itself only; no inline script or style (the
//     progress bars are SVG rectangles, not styled divs); no framing.
//   - Status is always written in words with a symbol, never colour alone.
//
// # Actions
//
// Retries (one tenant, or a plan's failed, orphaned, selected or
// all-matching tenants) and the irreversible actions (cancel, lock release)
// answer a confirmation page first: for retries it is the dry run, saying
// which stages would run or how many tenants would be touched and which
// would be skipped. Confirming sends exactly what the dry run showed: the
// tenants by name, or, for a bulk retry of more than 1000 (too many for a
// form), the selection and a digest of the dry run's tenants; the console
// then runs the dry run again and retries exactly those tenants (in calls of
// at most facade.MaxBulkTenants) only if it selects the same ones, and
// otherwise shows the new dry run without acting.
// Results come back as a one-time message on the page the action was sent
// from (post/redirect/get).
package console
