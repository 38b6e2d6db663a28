// Command deployctl is the SRE's command line over the deploycoord HTTP API
// (docs/api.md): create and follow plans, ask what happened to a tenant, retry it
// from its checkpoint, pause, resume or cancel work, break a stuck tenant
// lock and follow the event feed.
//
//	deployctl plan create -f rollout.yaml --watch
//	deployctl status --tenant t-042
//	deployctl retry --tenant t-042 --from-checkpoint --reason "INC-1234 config server fixed"
//	deployctl events --follow --type task.failed
//	deployctl tasks --status FAILED --orphaned --running-longer-than 10m
//
// deployctl -h lists every command; deployctl COMMAND -h shows a command's
// flags and an example.
//
// # Global flags
//
// --server (env DEPLOYCTL_SERVER, default http://127.0.0.1:8080) is the API
// address; --token (env DEPLOYCTL_TOKEN) is sent as "Authorization: Bearer".
// The token is never printed: not by -h (its flag has no visible value), not
// in errors, not by -v (which logs method, URL, status and duration only).
// -o table|wide|json picks the output (wide: tables with more columns);
// --timeout bounds each request. Global flags may come before or after the
// command, and flags may follow the
// positional arguments ("plan show ID --watch").
//
// # Output
//
// Table output is aligned with text/tabwriter and shows times relative to
// now ("3m ago"); text coming from the server is stripped of control
// characters so an error message cannot drive the terminal. JSON output is
// the server's document as it came, indented, so fields the API adds later
// pass through; commands that merge several answers (status
// --tenants-file, --all listings) print one document of the same shape.
// Commands that stream (--watch, events --follow) print one compact JSON
// document per line with -o json.
//
// # Exit codes
//
//	0  success
//	1  error (network, server, rate limit (HTTP 429: wait as Retry-After
//	   says), or a watched plan that ended FAILED or CANCELLED)
//	2  usage: bad flags or arguments, caught before any request
//	3  not found (HTTP 404)
//	4  conflict (HTTP 409: TASK_RUNNING, ATTEMPT_MISMATCH, LOCK_MISMATCH, ...)
//	5  unavailable (HTTP 503: the server's Redis is not answering; an empty
//	   list is never shown then, since it would not mean there is nothing)
//
// An answer the server gave from memory (header X-Deploycoord-Degraded)
// prints "warning: DEGRADED: ..." on stderr once, and the command goes on.
//
// Errors are printed to stderr as "error: CODE: detail" from the API's
// problem+json answer.
//
// plan show --watch (and plan create --watch) exits 0 when the plan
// COMPLETED and 1 when it FAILED or was CANCELLED, so a script can chain on
// it; an interrupted watch exits 1. It re-reads the plan every --interval
// (1s): on a terminal it redraws one progress line in place, otherwise it
// prints a line each time the progress changes; transient errors (network,
// 5xx) are retried up to 10 times in a row. events --follow ends only on
// Ctrl-C (SIGINT or SIGTERM: exit 0, and "next: --after CURSOR" on stderr to
// resume from there) or a 4xx answer; each long poll waits --wait (30s) on top
// of --timeout, failed polls are retried with a pause growing to 30s.
// plan retry (a bulk retry) without --yes first sends the dry run, prints
// how many tenants and which it would retry, and asks "[y/N]" when stdin is
// a terminal; the confirmed retry names exactly the tenants shown. Without a
// terminal it refuses (exit 2) unless --yes is given. It exits 4 when some
// selected tenants were skipped (each listed with its code and detail) or
// some tenants named (--tenant, --tenants-file) were not selected, 0 when
// every tenant selected and named was retried.
// status --tenants-file exits 0 even when some tenants have no task (their
// rows say "not found", their JSON entries are null); status --tenant on
// such a tenant exits 3.
//
// # Design
//
// Everything runs through run(ctx, args, stdout, stderr, getenv), which
// returns the exit code, so the tests drive the command in-process against a
// real coordinator behind httptest. Commands are a table of name, synopsis,
// example and function; each parses its own flag.FlagSet (standard library
// only) with the global flags registered on it too. The response types are
// httpapi's exported views; requests are small local structs with the API's
// field names.
package main
