package stage_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
)

// received is what a test server saw of one request.
type received struct {
	method, path, query, body string
	header                    http.Header
}

// recorder is a test server that records requests and answers with handle.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received
}

func newRecorder(t *testing.T, handle http.HandlerFunc) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, received{r.Method, r.URL.Path, r.URL.RawQuery, string(b), r.Header.Clone()})
		rec.mu.Unlock()
		handle(w, r)
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (rec *recorder) requests() []received {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]received(nil), rec.reqs...)
}

func (rec *recorder) host() string { return strings.TrimPrefix(rec.URL, "http://") }

// httpSpec builds an http stage spec from a config object.
func httpSpec(t *testing.T, name string, config map[string]any) task.StageSpec {
	t.Helper()
	b, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	return spec(name, "http", string(b))
}

func reply(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func TestHTTP_TemplatesAndOutputs(t *testing.T) {
	t.Parallel()
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id": "dep-7", "n": 3, "nested": {"ok": true}}`)
	})
	for _, src := range []stage.Source{stage.SourceOperator, stage.SourceInline} {
		t.Run("OK"+strings.ToUpper(src.String()[:1])+src.String()[1:], func(t *testing.T) {
			t.Parallel()
			r := stage.NewRegistry(stage.Options{InlineHTTPHosts: []string{srv.host()}})
			run := compile(t, r, httpSpec(t, "deploy", map[string]any{
				"method": "POST",
				"url":    srv.URL + "/tenants/{{.TenantID}}/plans/{{.PlanID}}?v={{urlquery .Params.version}}&prev={{.Outputs.push.id}}&attempt={{.Attempt}}.{{.StageAttempt}}",
				"headers": map[string]string{
					"X-Task":  "{{.TaskID}}/{{.Stage}}",
					"X-Count": "{{json .Params.count}}",
				},
				"body": `{"version": {{json .Params.version}}, "prev": "{{.Outputs.push.id}}", "key": "{{.IdempotencyKey}}"}`,
			}), src)
			in := input("deploy")
			res := runFor(run, in, 10*time.Second)
			wantSuccess(t, res)
			if res.Outputs["id"] != "dep-7" || res.Outputs["n"] != float64(3) || res.Outputs["nested"].(map[string]any)["ok"] != true {
				t.Errorf("outputs = %v", res.Outputs)
			}
			reqs := srv.requests()
			got := reqs[len(reqs)-1]
			wantKey := in.TaskID + "/deploy/2.3"
			checks := []struct{ what, got, want string }{
				{"method", got.method, "POST"},
				{"path", got.path, "/tenants/t-001/plans/" + in.PlanID},
				{"query", got.query, "v=1.2.3&prev=abc&attempt=2.3"},
				{"X-Task", got.header.Get("X-Task"), in.TaskID + "/deploy"},
				{"X-Count", got.header.Get("X-Count"), "1000000"},
				{"Idempotency-Key", got.header.Get("Idempotency-Key"), wantKey},
				{"User-Agent", got.header.Get("User-Agent"), "deploycoord"},
				{"Content-Type", got.header.Get("Content-Type"), "application/json"},
				{"body", got.body, `{"version": "1.2.3", "prev": "abc", "key": "` + wantKey + `"}`},
			}
			for _, c := range checks {
				if c.got != c.want {
					t.Errorf("server got %s %q, want %q", c.what, c.got, c.want)
				}
			}
		})
	}
}

func TestHTTP_IdempotencyKey(t *testing.T) {
	t.Parallel()
	srv := newRecorder(t, reply(204, ""))
	r := stage.NewRegistry(stage.Options{})
	run := compile(t, r, httpSpec(t, "push", map[string]any{"url": srv.URL}), stage.SourceOperator)
	in := input("push")
	retried := in
	retried.StageAttempt++
	manual := in
	manual.Attempt++
	manual.StageAttempt = 1
	for _, i := range []stage.Input{in, in, retried, manual} {
		wantSuccess(t, runFor(run, i, 10*time.Second))
	}
	var keys []string
	for _, req := range srv.requests() {
		keys = append(keys, req.header.Get("Idempotency-Key"))
	}
	want := []string{in.TaskID + "/push/2.3", in.TaskID + "/push/2.3", in.TaskID + "/push/2.4", in.TaskID + "/push/3.1"}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Fatalf("keys = %v, want %v", keys, want)
	}
}

func TestHTTP_Status(t *testing.T) {
	t.Parallel()
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		w.WriteHeader(code)
		io.WriteString(w, r.URL.Query().Get("body"))
	})
	r := stage.NewRegistry(stage.Options{})
	tests := []struct {
		name      string
		config    map[string]any
		code      int
		body      string
		success   bool
		retryable bool
		outputs   map[string]any
		parts     []string
	}{
		{"SuccessJSONObject", nil, 200, `{"a": "b"}`, true, false, map[string]any{"a": "b"}, nil},
		{"SuccessEmptyBody", nil, 204, "", true, false, map[string]any{"status": float64(204)}, nil},
		{"SuccessNonJSON", nil, 200, "all good", true, false, map[string]any{"status": float64(200)}, nil},
		{"SuccessJSONArray", nil, 201, `[1, 2]`, true, false, map[string]any{"status": float64(201)}, nil},
		{"Failure500NotRetryable", nil, 500, "db down", false, false, nil, []string{"HTTP 500 Internal Server Error: db down"}},
		{"Failure404NotRetryable", nil, 404, "", false, false, nil, []string{"HTTP 404 Not Found"}},
		{"Failure503Retryable", nil, 503, "busy", false, true, nil, []string{"HTTP 503", "busy"}},
		{"Failure429Retryable", nil, 429, "", false, true, nil, []string{"HTTP 429"}},
		{"Failure502Retryable", nil, 502, "", false, true, nil, []string{"HTTP 502"}},
		{"CustomSuccess", map[string]any{"successStatus": []int{202}}, 202, "", true, false, map[string]any{"status": float64(202)}, nil},
		{"CustomSuccessExcludes200", map[string]any{"successStatus": []int{202}}, 200, "", false, false, nil, []string{"HTTP 200"}},
		{"CustomRetryable500", map[string]any{"retryableStatus": []int{500}}, 500, "", false, true, nil, []string{"HTTP 500"}},
		{"CustomRetryableExcludes503", map[string]any{"retryableStatus": []int{500}}, 503, "", false, false, nil, []string{"HTTP 503"}},
		{"SuccessListWinsOverDefaultRetryable", map[string]any{"successStatus": []int{200, 503}}, 503, "", true, false, map[string]any{"status": float64(503)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			config := map[string]any{"url": srv.URL + "/?code=" + strconv.Itoa(tt.code) + "&body=" + url.QueryEscape(tt.body)}
			for k, v := range tt.config {
				config[k] = v
			}
			res := runFor(compile(t, r, httpSpec(t, "s", config), stage.SourceOperator), input("s"), 10*time.Second)
			if !tt.success {
				wantFailure(t, res, tt.retryable, tt.parts...)
				return
			}
			wantSuccess(t, res)
			// Compare through JSON, as the checkpoint will store them.
			got, _ := json.Marshal(res.Outputs)
			want, _ := json.Marshal(tt.outputs)
			if string(got) != string(want) {
				t.Fatalf("outputs = %s, want %s", got, want)
			}
		})
	}
}

func TestHTTP_FailureExcerpt(t *testing.T) {
	t.Parallel()
	body := "line1\r\nline2\x1b[31m\x00" + strings.Repeat("z", 5000)
	srv := newRecorder(t, reply(500, body))
	r := stage.NewRegistry(stage.Options{})
	res := runFor(compile(t, r, httpSpec(t, "s", map[string]any{"url": srv.URL}), stage.SourceOperator), input("s"), 10*time.Second)
	wantFailure(t, res, false, `HTTP 500 Internal Server Error: line1\r\nline2\x1b[31m\x00zzz`, "…")
	excerpt := strings.TrimPrefix(res.Reason, "HTTP 500 Internal Server Error: ")
	if len(excerpt) > 512 {
		t.Errorf("excerpt is %d bytes, want ≤ 512", len(excerpt))
	}
	if strings.ContainsFunc(res.Reason, func(r rune) bool { return r < 0x20 }) {
		t.Errorf("reason holds control characters: %q", res.Reason)
	}
}

func TestHTTP_NetworkErrorRetryable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close()
	r := stage.NewRegistry(stage.Options{})
	res := runFor(compile(t, r, httpSpec(t, "s", map[string]any{"url": addr + "/x?token=secret"}), stage.SourceOperator), input("s"), 10*time.Second)
	wantFailure(t, res, true, "GET "+addr+"/x", "connect")
	if strings.Contains(res.Reason, "secret") {
		t.Errorf("reason %q shows the query", res.Reason)
	}
}

func TestHTTP_TimeoutRetryable(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) })
	r := stage.NewRegistry(stage.Options{})
	run := compile(t, r, httpSpec(t, "s", map[string]any{"url": srv.URL}), stage.SourceOperator)
	done := make(chan task.Result, 1)
	go func() { done <- runFor(run, input("s"), 50*time.Millisecond) }()
	select {
	case res := <-done:
		wantFailure(t, res, true, context.DeadlineExceeded.Error())
	case <-time.After(20 * time.Second):
		t.Fatal("the stage did not return after its context ended")
	}
}

func TestHTTP_ResponseTooLarge(t *testing.T) {
	t.Parallel()
	srv := newRecorder(t, reply(200, `{"big": "`+strings.Repeat("x", 2000)+`"}`))
	t.Run("FailureOverLimit", func(t *testing.T) {
		t.Parallel()
		r := stage.NewRegistry(stage.Options{MaxOutputBytes: 1024})
		res := runFor(compile(t, r, httpSpec(t, "s", map[string]any{"url": srv.URL}), stage.SourceOperator), input("s"), 10*time.Second)
		wantFailure(t, res, false, "response too large", "1024")
	})
	t.Run("OKUnderLimit", func(t *testing.T) {
		t.Parallel()
		r := stage.NewRegistry(stage.Options{MaxOutputBytes: 4096})
		res := runFor(compile(t, r, httpSpec(t, "s", map[string]any{"url": srv.URL}), stage.SourceOperator), input("s"), 10*time.Second)
		wantSuccess(t, res)
	})
}

func TestHTTP_TemplateFailures(t *testing.T) {
	t.Parallel()
	srv := newRecorder(t, reply(200, ""))
	r := stage.NewRegistry(stage.Options{MaxOutputBytes: 4096})
	tests := []struct {
		name   string
		config map[string]any
		in     func(*stage.Input)
		parts  []string
	}{
		{"MissingParam", map[string]any{"url": srv.URL + "/{{.Params.versoin}}"}, nil,
			[]string{"http.url", `map has no entry for key "versoin"`}},
		{"MissingOutput", map[string]any{"url": srv.URL, "body": "{{.Outputs.pull.id}}"}, nil,
			[]string{"http.body", `map has no entry for key "pull"`}},
		{"NilParams", map[string]any{"url": srv.URL, "headers": map[string]string{"X-V": "{{.Params.version}}"}},
			func(in *stage.Input) { in.Params = nil }, []string{`http.headers["X-V"]`, `no entry for key "version"`}},
		{"HeaderInjection", map[string]any{"url": srv.URL, "headers": map[string]string{"X-V": "{{.Params.version}}"}},
			func(in *stage.Input) { in.Params = map[string]any{"version": "1\r\nX-Evil: 1"} }, []string{`http.headers["X-V"]`, "control characters"}},
		{"BodyTooLong", map[string]any{"url": srv.URL, "body": "{{.Params.big}}{{.Params.big}}"},
			func(in *stage.Input) { in.Params = map[string]any{"big": strings.Repeat("b", 3000)} }, []string{"http.body", "exceeds 4096 bytes"}},
		{"NestedEscapersCapped", map[string]any{"url": srv.URL, "body": "{{urlquery (urlquery (urlquery (urlquery .Params.big)))}}"},
			func(in *stage.Input) { in.Params = map[string]any{"big": strings.Repeat("&", 500)} }, []string{"http.body", "exceeds"}},
		{"PrintfWidthRefused", map[string]any{"url": srv.URL, "body": `{{printf "%01000000d" 1}}`}, nil, []string{"http.body", "width or precision over 999"}},
		{"RenderedURLNotHTTP", map[string]any{"url": "{{.Params.target}}"},
			func(in *stage.Input) { in.Params = map[string]any{"target": "file:///etc/passwd"} }, []string{"rendered URL", "scheme must be http or https"}},
		{"RenderedURLTooLong", map[string]any{"url": srv.URL + "/{{.Params.big}}"},
			func(in *stage.Input) { in.Params = map[string]any{"big": strings.Repeat("p", 10000)} }, []string{"http.url", "exceeds 8192 bytes"}},
	}
	for _, tt := range tests {
		t.Run("Failure"+tt.name, func(t *testing.T) {
			t.Parallel()
			in := input("s")
			if tt.in != nil {
				tt.in(&in)
			}
			res := runFor(compile(t, r, httpSpec(t, "s", tt.config), stage.SourceOperator), in, 10*time.Second)
			wantFailure(t, res, false, tt.parts...)
		})
	}
	t.Cleanup(func() {
		if n := len(srv.requests()); n != 0 {
			t.Errorf("server got %d requests; a failed render must send nothing", n)
		}
	})
}

func TestHTTP_Inline(t *testing.T) {
	t.Parallel()
	srv := newRecorder(t, reply(200, `{"ok": true}`))
	other := newRecorder(t, reply(200, `{"ok": true}`))
	r := stage.NewRegistry(stage.Options{InlineHTTPHosts: []string{
		srv.host(), "169.254.169.254", "metadata.google.internal", "[fd00:ec2::254]:80", "100.100.100.200:80", "cfg.example",
	}})
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	tests := []struct {
		name  string
		url   string
		want  error // nil: compiles
		parts []string
	}{
		{"OKListedHostPort", srv.URL + "/tenants/{{.TenantID}}", nil, nil},
		{"OKListedHostAnyPort", "https://CFG.example.:8443/{{.TenantID}}", nil, nil},
		{"OKQueryAfterHost", srv.URL + "?t={{.TenantID}}", nil, nil},
		{"NotListedHost", other.URL + "/x", stage.ErrNotAllowed, []string{"http.url", "is not allowed in inline stages",
			"the server's inline HTTP hosts setting allows only " + srv.host() + ", cfg.example"}},
		{"NotListedPort", "http://127.0.0.1:1/x", stage.ErrNotAllowed, []string{"is not allowed in inline stages", "allows only " + srv.host() + ",",
			"localhost, 127.0.0.1 and ::1 are different entries"}},
		{"NotListedLocalhost", "http://localhost:" + port + "/x", stage.ErrNotAllowed, []string{`host "localhost:` + port + `" is not allowed`,
			"localhost, 127.0.0.1 and ::1 are different entries"}},
		{"TemplatedHost", "http://{{.Params.host}}/x", stage.ErrNotAllowed, []string{"spell the host literally"}},
		{"TemplatedPort", "http://127.0.0.1:{{.Params.port}}/x", stage.ErrNotAllowed, []string{"spell the host literally"}},
		{"TemplatedScheme", "{{.Params.scheme}}://127.0.0.1:" + port + "/", stage.ErrNotAllowed, []string{"spell the scheme and host literally"}},
		{"TemplatedWhole", "{{.Params.url}}", stage.ErrNotAllowed, []string{"spell the scheme and host literally"}},
		{"Credentials", "http://user:pw@" + srv.host() + "/", stage.ErrNotAllowed, []string{"credentials"}},
		{"BadScheme", "ftp://" + srv.host() + "/", stage.ErrInvalid, []string{"scheme must be http or https"}},
		{"MetadataIPListed", "http://169.254.169.254/latest/meta-data/", stage.ErrNotAllowed, []string{"link-local or cloud metadata"}},
		{"EscapedHost", "http://%31%36%39.254.169.254/", stage.ErrInvalid, []string{"does not parse"}},
		{"LinkLocalMappedV6", "http://[::ffff:169.254.1.1]/", stage.ErrNotAllowed, []string{"link-local or cloud metadata"}},
		{"MetadataV6Listed", "http://[fd00:ec2::254]/", stage.ErrNotAllowed, []string{"link-local or cloud metadata"}},
		{"AlibabaListed", "http://100.100.100.200/", stage.ErrNotAllowed, []string{"link-local or cloud metadata"}},
		{"MetadataNameListed", "http://metadata.google.internal/computeMetadata/v1/", stage.ErrNotAllowed, []string{"cloud metadata service"}},
		{"DecimalIP", "http://2852039166/", stage.ErrNotAllowed, []string{"numeric address"}},
		{"HexIP", "http://0xa9fea9fe/", stage.ErrNotAllowed, []string{"numeric address"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := r.Compile(httpSpec(t, "in", map[string]any{"url": tt.url}), stage.SourceInline)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Compile: %v", err)
				}
				return
			}
			wantConfigError(t, err, tt.want, "in", tt.parts...)
		})
	}
	t.Run("OKRuns", func(t *testing.T) {
		t.Parallel()
		res := runFor(compile(t, r, httpSpec(t, "in", map[string]any{"url": srv.URL + "/{{.TenantID}}"}), stage.SourceInline), input("in"), 10*time.Second)
		wantSuccess(t, res)
	})
	t.Run("ErrNotAllowedWithNoHostsListed", func(t *testing.T) {
		t.Parallel()
		r := stage.NewRegistry(stage.Options{InlineHTTPHostsSetting: "DEPLOYCOORD_INLINE_HTTP_HOSTS"})
		_, err := r.Compile(httpSpec(t, "in", map[string]any{"url": srv.URL}), stage.SourceInline)
		wantConfigError(t, err, stage.ErrNotAllowed, "in", "is not allowed in inline stages", "DEPLOYCOORD_INLINE_HTTP_HOSTS allows none (it is empty)")
		if _, err := r.Compile(httpSpec(t, "in", map[string]any{"url": srv.URL}), stage.SourceOperator); err != nil {
			t.Fatalf("operator: %v", err)
		}
	})
}

func TestHTTP_InlineRedirects(t *testing.T) {
	t.Parallel()
	target := newRecorder(t, reply(200, `{"where": "target"}`))
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, target.URL+"/landing", http.StatusFound)
		case "/here":
			http.Redirect(w, r, "/final", http.StatusFound)
		default:
			io.WriteString(w, `{"where": "`+r.URL.Path+`"}`)
		}
	})
	r := stage.NewRegistry(stage.Options{InlineHTTPHosts: []string{srv.host(), target.host()}})
	t.Run("FailureOtherHostInline", func(t *testing.T) {
		t.Parallel()
		res := runFor(compile(t, r, httpSpec(t, "s", map[string]any{"url": srv.URL + "/away"}), stage.SourceInline), input("s"), 10*time.Second)
		wantFailure(t, res, false, "redirect refused", target.host())
	})
	t.Run("OKSameHostInline", func(t *testing.T) {
		t.Parallel()
		res := runFor(compile(t, r, httpSpec(t, "s", map[string]any{"url": srv.URL + "/here"}), stage.SourceInline), input("s"), 10*time.Second)
		wantSuccess(t, res)
		if res.Outputs["where"] != "/final" {
			t.Fatalf("outputs = %v", res.Outputs)
		}
	})
	t.Run("OKOtherHostOperator", func(t *testing.T) {
		t.Parallel()
		res := runFor(compile(t, r, httpSpec(t, "s", map[string]any{"url": srv.URL + "/away"}), stage.SourceOperator), input("s"), 10*time.Second)
		wantSuccess(t, res)
		if res.Outputs["where"] != "target" {
			t.Fatalf("outputs = %v", res.Outputs)
		}
	})
}

func TestHTTP_Poll(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			w.WriteHeader(503)
		case 2:
			io.WriteString(w, `{"state": "starting"}`)
		default:
			io.WriteString(w, `{"state": "healthy", "version": "1.2.3"}`)
		}
	})
	r := stage.NewRegistry(stage.Options{})
	t.Run("OKUntilHealthy", func(t *testing.T) {
		t.Parallel()
		run := compile(t, r, httpSpec(t, "s", map[string]any{
			"url":  srv.URL + "/health",
			"poll": map[string]any{"interval": "100ms", "until": `{{and (eq .Status 200) (eq .Response.state "healthy") (eq .Response.version .Params.version)}}`},
		}), stage.SourceOperator)
		res := runFor(run, input("s"), 20*time.Second)
		wantSuccess(t, res)
		if res.Outputs["state"] != "healthy" {
			t.Fatalf("outputs = %v", res.Outputs)
		}
		if got := n.Load(); got != 3 {
			t.Fatalf("%d requests, want 3", got)
		}
	})

	unhealthy := newRecorder(t, reply(503, "warming up"))
	t.Run("FailureRetryableAtTimeout", func(t *testing.T) {
		t.Parallel()
		run := compile(t, r, httpSpec(t, "s", map[string]any{"url": unhealthy.URL, "poll": map[string]any{"interval": "100ms"}}), stage.SourceOperator)
		res := runFor(run, input("s"), 350*time.Millisecond)
		wantFailure(t, res, true, "poll:", context.DeadlineExceeded.Error(), "last: HTTP 503", "warming up")
		if len(unhealthy.requests()) < 2 {
			t.Fatalf("%d requests, want it to have polled", len(unhealthy.requests()))
		}
	})

	broken := newRecorder(t, reply(500, "broken"))
	t.Run("FailureStopsOnNonRetryableStatus", func(t *testing.T) {
		t.Parallel()
		run := compile(t, r, httpSpec(t, "s", map[string]any{"url": broken.URL, "poll": map[string]any{"interval": "100ms"}}), stage.SourceOperator)
		wantFailure(t, runFor(run, input("s"), 20*time.Second), false, "HTTP 500")
		if got := len(broken.requests()); got != 1 {
			t.Fatalf("%d requests, want 1", got)
		}
	})

	t.Run("FailureUntilKeyNeverThere", func(t *testing.T) {
		t.Parallel()
		ok := newRecorder(t, reply(200, `starting`))
		run := compile(t, r, httpSpec(t, "s", map[string]any{"url": ok.URL, "poll": map[string]any{"interval": "100ms", "until": "{{.Response.ready}}"}}), stage.SourceOperator)
		wantFailure(t, runFor(run, input("s"), 250*time.Millisecond), true,
			"last: HTTP 200, condition not met: http.poll.until", `no entry for key "ready"`)
	})
}
