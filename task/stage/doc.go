// Package stage turns stage specs (task.StageSpec) into runnable stages. A
// Registry holds the kinds by name — the built-in noop, sleep, http and exec,
// plus any a Go program registers — and compiles a spec once, when a plan is
// created or a pipeline loaded; the Runnable it returns runs one attempt per
// call and reports task.Success, task.Failure (retryable or not) or task.Skip.
//
// # Where a spec comes from
//
// A spec is compiled for a Source. Operator-defined pipelines (the server's
// configuration file, SourceOperator) may use every registered kind; exec
// only when the server allows it (Options.AllowExec). Inline stages of a
// plan request (SourceInline, the zero value) come from callers the server
// trusts less: only Options.InlineKinds (default noop, sleep, http), never
// exec, and http only to Options.InlineHTTPHosts.
//
// Compile validates strictly. Every refusal is a *ConfigError naming the
// stage and the field ("http.url", "exec.argv[2]") and wrapping ErrInvalid
// (unknown kind or field, missing or bad value, bad template) or ErrNotAllowed
// (kind, host or command not allowed from the source); both also match
// task.ErrInvalid, so the API answers 400 INVALID_ARGUMENT. Keys match field
// names exactly; unknown keys are errors. Values from input are quoted with
// control characters escaped.
//
// # Templates
//
// URLs, header values, bodies, exec arguments and env values are Go
// text/template templates, parsed at compile time, over Input:
//
//	{{.TenantID}} {{.PlanID}} {{.TaskID}} {{.Stage}} {{.StageIndex}}
//	{{.Attempt}} {{.StageAttempt}} {{.IdempotencyKey}}
//	{{.Params.version}}          a tenant param (plan params merged in)
//	{{.Outputs.push.id}}         an output of the earlier stage "push"
//	{{index .Outputs "push-config" "id"}}  when a name has a "-" in it
//	{{json .Params.version}}     as JSON ("1.2.3" with quotes; numbers whole)
//	{{urlquery .Params.branch}}  escaped for a URL
//
// A missing key is an error (missingkey=error) and so is an unknown field:
// the first at run time (a non-retryable Failure naming the key), the second
// already at compile time. define, block and template actions are refused;
// range is refused inline. Rendered text and each function's result are
// capped (8 KiB for a URL or header, MaxOutputBytes for a body), and printf
// widths at 999, so that no template can make a stage allocate without bound.
// JSON numbers are float64: {{.Params.n}} prints 1e+06 for a million, json
// prints 1000000.
//
// # Kinds
//
// noop — does nothing and succeeds; optional outputs (handy in tests):
//
//	{"name": "mark", "kind": "noop", "noop": {"outputs": {"ready": true}}}
//
// sleep — waits, 0 < duration ≤ 24h; a done context (the stage timeout) ends
// it with a retryable Failure:
//
//	{"name": "settle", "kind": "sleep", "sleep": {"duration": "2s"}}
//
// http — one request (HTTPConfig):
//
//	{"name": "push", "kind": "http", "http": {
//	  "method": "POST",                                   GET (default), POST, PUT, PATCH, DELETE, HEAD
//	  "url": "https://cfg.internal/tenants/{{.TenantID}}/push",
//	  "headers": {"Authorization": "Bearer {{.Params.token}}"},
//	  "body": "{\"version\": {{json .Params.version}}}",  Content-Type application/json unless set
//	  "successStatus": [200, 204],                        default 200-299
//	  "retryableStatus": [429, 502, 503, 504],            the default
//	  "poll": {"interval": "2s", "until": "{{eq .Response.state \"healthy\"}}"}}}
//
// Every request carries Idempotency-Key: <taskId>/<stage>/<attempt>.<stageAttempt>
// (Input.IdempotencyKey; same for the same attempt, different for the next)
// and User-Agent: deploycoord; a header config may not set these, Host or
// the framing headers. A success status with a JSON object body makes that
// object the stage's outputs; any other success body gives {"status": code}.
// A body over MaxOutputBytes is a non-retryable Failure. A retryable status,
// a network error or a timeout is a retryable Failure; any other status a
// non-retryable one whose reason holds the status and the first 512 bytes of
// the body, control characters escaped; so is a refused address or redirect
// or a bad certificate. Reasons show the URL without its query (it may hold
// secrets). A template that fails to render (a missing key) is a
// non-retryable Failure, and nothing is sent. Redirects are followed (10 at
// most).
// With poll, the request repeats every interval until a response has a
// success status and until renders "true" (.Status and .Response, the JSON
// body, are added to the Input; a key missing from .Response means "not
// yet"); retryable statuses and network errors keep it polling, other
// statuses end it, and so does the stage timeout (retryable, the reason
// naming the last response).
//
// Inline http stages must spell scheme (http or https) and host literally,
// before any {{ — "http://cfg.internal:8080/{{.TenantID}}" — with no
// credentials, and the host ("host" or "host:port") must be listed in
// InlineHTTPHosts. Link-local and metadata addresses (169.254.0.0/16,
// fe80::/10, fd00:ec2::254, 100.100.100.200, metadata.google.internal) are
// refused even when listed: at compile time on the literal host, and at dial
// time, after DNS resolution, by the dialer's Control hook (so a listed name
// that resolves to such an address — DNS rebinding — is refused too). Inline
// requests go through no proxy and follow redirects only to the same
// scheme and host. Operator stages may call any http(s) URL; a templated
// URL is checked after rendering.
//
// exec — runs a local command without a shell (ExecConfig); operator
// pipelines only, and only with Options.AllowExec:
//
//	{"name": "migrate", "kind": "exec", "exec": {
//	  "argv": ["/usr/local/bin/migrate", "--tenant", "{{.TenantID}}"],  argv[0] literal and absolute
//	  "env": {"TARGET_VERSION": "{{.Params.version}}"},
//	  "dir": "/srv/deploy"}}
//
// The command's environment is PATH (PathDefault unless env sets it),
// DEPLOYCOORD_TENANT_ID, _PLAN_ID, _TASK_ID, _STAGE, _STAGE_INDEX, _ATTEMPT,
// _STAGE_ATTEMPT, _IDEMPOTENCY_KEY and env — nothing of the server's own
// environment. Exit 0 is a Success whose outputs are stdout when it is a
// JSON object, else {"stdout": text} (nothing for empty stdout); exit 75
// (EX_TEMPFAIL) is a retryable Failure; any other exit a non-retryable one
// with the status and the last 512 bytes of stderr. stdout and stderr are
// each captured up to MaxOutputBytes; the rest is discarded and counted
// ("stdoutDiscardedBytes"). The command runs in a process group of its own;
// a done context (the stage timeout, a cancel) kills the group and is a
// retryable Failure. Processes left running after a normal exit are left
// alone.
//
// # Custom kinds
//
// A Go program registers its own kinds with Registry.Register; DecodeConfig
// and NewTemplate give it the built-in kinds' strict config decoding and
// templates. A custom kind is allowed inline only when Options.InlineKinds
// lists it. Every Runnable the registry returns turns a panic into a
// non-retryable Failure.
package stage
