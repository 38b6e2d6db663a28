// Package httpapi is the HTTP API of deploycoord (API.md, docs/openapi.yaml):
// a chi router whose handlers turn requests into calls of the coordinator's
// use cases (the Service interface, implemented by *facade.Coordinator) and
// their answers into JSON.
//
// A request goes through, in order:
//
//	request id ─► access log + panic guard ─► Config.Middlewares (auth, ...) ─►
//	path id check ─► query check ─► body decoding ─► Service ─► JSON or problem
//
// Everything a client sends is checked before the service is called: path
// ids against the allowlists of package task and plan, query parameters
// (unknown or repeated ones are refused), bodies (Content-Type
// application/json, at most MaxBodyBytes or MaxSmallBodyBytes, exactly one
// JSON object, no unknown field). Bad input is answered 400 INVALID_ARGUMENT,
// 413 PAYLOAD_TOO_LARGE or 415 UNSUPPORTED_MEDIA_TYPE and changes nothing;
// values from the input appear in details only through task.Quote.
//
// Errors are application/problem+json (RFC 9457) with a stable code. One
// table (errors.go) maps the facade's sentinel errors to statuses and codes;
// an error it does not know is answered 500 INTERNAL with a generic detail
// and logged once with the request id. When the client goes away nothing is
// answered.
//
// Answers that came from memory because Redis was unreachable carry
// "degraded": true and the header X-Deploycoord-Degraded: true.
//
// docs/openapi.yaml describes every route exactly; the package embeds a copy
// (served at /openapi.yaml) and its tests check that the copy is current, that
// router and document list the same operations, and that every answer the
// tests see validates against the document.
package httpapi
