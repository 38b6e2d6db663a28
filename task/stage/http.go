package stage

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/deploycoord/deploycoord/task"
)

// Settings of the http kind.
const (
	// UserAgent is the User-Agent of every http stage request.
	UserAgent = "deploycoord"
	// PollIntervalDefault is the poll interval when poll sets none.
	PollIntervalDefault = 2 * time.Second
	// MinPollInterval and MaxPollInterval bound poll.interval.
	MinPollInterval = 100 * time.Millisecond
	MaxPollInterval = time.Hour

	maxURLLen       = 8 << 10 // rendered URL
	maxHeaderLen    = 8 << 10 // rendered header value
	maxHeaders      = 64
	maxStatusCodes  = 64
	excerptLen      = 512
	maxUntilRender  = 1 << 10
	maxHeaderName   = 128
	contentTypeJSON = "application/json"
)

// HTTPConfig is the config of the http kind (the object under "http").
type HTTPConfig struct {
	// Method is GET (default), POST, PUT, PATCH, DELETE or HEAD.
	Method string `json:"method,omitempty"`
	// URL is a template; required. Inline stages must spell scheme and host
	// literally.
	URL string `json:"url"`
	// Headers maps header names to value templates.
	Headers map[string]string `json:"headers,omitempty"`
	// Body is a template; sent with Content-Type application/json unless
	// Headers sets one.
	Body string `json:"body,omitempty"`
	// SuccessStatus lists the statuses that mean success; default 200-299.
	SuccessStatus []int `json:"successStatus,omitempty"`
	// RetryableStatus lists the statuses that mean "try again"; default 429,
	// 502, 503, 504 (less any listed in SuccessStatus).
	RetryableStatus []int `json:"retryableStatus,omitempty"`
	// Poll repeats the request until its condition holds.
	Poll *PollConfig `json:"poll,omitempty"`
}

// PollConfig makes an http stage repeat its request every Interval until a
// response has a success status and Until renders to "true", or the stage's
// timeout ends the run (a retryable Failure). Responses with a retryable
// status and network errors do not end the polling; other statuses do.
type PollConfig struct {
	// Interval is the wait between requests; default PollIntervalDefault.
	Interval task.Duration `json:"interval,omitempty"`
	// Until is a template over the Input plus .Status (the response's status
	// code) and .Response (its JSON object body, empty for any other body);
	// empty means any success status ends the polling. A render error (a key
	// missing from .Response) counts as "not yet".
	Until string `json:"until,omitempty"`
}

var (
	methods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"}
	// headerNameRe is RFC 9110's token.
	headerNameRe = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	// reservedHeaders are set by the stage itself or by the transport.
	reservedHeaders        = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "Te", "Trailer", "Idempotency-Key", "User-Agent"}
	retryableStatusDefault = []int{429, 502, 503, 504}
)

type httpKind struct {
	client       *http.Client
	inlineClient *http.Client
	hosts        []hostEntry
	hostsSetting string
}

type header struct {
	name  string
	value *Template
}

type httpStage struct {
	client    *http.Client
	method    string
	url       *Template
	headers   []header
	body      *Template
	success   func(int) bool
	retryable []int
	poll      *poller
	// inlineHost is the scheme://host:port an inline stage must call ("" for operator stages).
	inlineHost string
	maxOutput  int64
}

type poller struct {
	interval time.Duration
	until    *Template
}

// pollData is what poll.until renders over.
type pollData struct {
	Input
	Status   int
	Response map[string]any
}

var pollNames = namesOf(reflect.TypeFor[pollData]())

func (k *httpKind) Compile(spec task.StageSpec, env Env) (Runnable, error) {
	var c HTTPConfig
	if err := DecodeConfig(spec, &c); err != nil {
		return nil, err
	}
	s := &httpStage{client: k.client, maxOutput: env.MaxOutputBytes}
	if s.maxOutput <= 0 {
		s.maxOutput = MaxOutputBytesDefault
	}

	s.method = cmp.Or(strings.ToUpper(c.Method), "GET")
	if !slices.Contains(methods, s.method) {
		return nil, invalid("http.method", "%s is not one of %s", task.Quote(c.Method), strings.Join(methods, ", "))
	}

	if err := k.checkURL(&c, env, s); err != nil {
		return nil, err
	}
	var err error
	if s.url, err = newTemplate("http.url", c.URL, env, inputNames, MaxTemplateLen); err != nil {
		return nil, err
	}

	if len(c.Headers) > maxHeaders {
		return nil, invalid("http.headers", "%d headers, limit %d", len(c.Headers), maxHeaders)
	}
	seen := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(c.Headers)) {
		field := "http.headers[" + task.Quote(name) + "]"
		canon := http.CanonicalHeaderKey(name)
		switch {
		case len(name) > maxHeaderName || !headerNameRe.MatchString(name):
			return nil, invalid(field, "not a valid header name")
		case slices.Contains(reservedHeaders, canon):
			return nil, invalid(field, "header %s is set by deploycoord", canon)
		case seen[canon]:
			return nil, invalid(field, "header %s is given twice", canon)
		case strings.ContainsFunc(c.Headers[name], isHeaderControl):
			return nil, invalid(field, "control characters are not allowed in header values")
		}
		seen[canon] = true
		t, err := newTemplate(field, c.Headers[name], env, inputNames, MaxTemplateLen)
		if err != nil {
			return nil, err
		}
		s.headers = append(s.headers, header{name: canon, value: t})
	}
	if c.Body != "" {
		if s.body, err = newTemplate("http.body", c.Body, env, inputNames, MaxBodyTemplateLen); err != nil {
			return nil, err
		}
		if !seen["Content-Type"] {
			s.headers = append(s.headers, header{name: "Content-Type"})
		}
	}

	if err := s.compileStatus(&c); err != nil {
		return nil, err
	}
	if c.Poll != nil {
		p := &poller{interval: cmp.Or(c.Poll.Interval.D(), PollIntervalDefault)}
		if p.interval < MinPollInterval || p.interval > MaxPollInterval {
			return nil, invalid("http.poll.interval", "%s out of range %s..%s", p.interval, MinPollInterval, MaxPollInterval)
		}
		if c.Poll.Until != "" {
			if p.until, err = newTemplate("http.poll.until", c.Poll.Until, env, pollNames, MaxTemplateLen); err != nil {
				return nil, err
			}
		}
		s.poll = p
	}
	return s, nil
}

// checkURL checks what it can of the URL before any rendering: no control
// characters; for a URL without actions, that it parses as http(s) with a
// host; for inline stages, that scheme and host are literal, allowed and not
// a metadata address. It picks the client.
func (k *httpKind) checkURL(c *HTTPConfig, env Env, s *httpStage) error {
	const field = "http.url"
	switch {
	case c.URL == "":
		return invalid(field, "required")
	case len(c.URL) > MaxTemplateLen:
		return invalid(field, "template is %d bytes, limit %d", len(c.URL), MaxTemplateLen)
	case strings.ContainsFunc(c.URL, isControl):
		return invalid(field, "control characters are not allowed")
	}
	literal, templated := c.URL, false
	if i := strings.Index(c.URL, "{{"); i >= 0 {
		literal, templated = c.URL[:i], true
	}
	if env.Source == SourceOperator {
		if templated {
			// Checked after rendering, on every run.
			return nil
		}
		if _, err := parseHTTPURL(literal); err != nil {
			return invalid(field, "%v", err)
		}
		return nil
	}

	// Inline: scheme://host[:port] must come before the first action.
	scheme, rest, ok := strings.Cut(literal, "://")
	if !ok {
		return notAllowed(field, "inline stages must spell the scheme and host literally (http://host/...)")
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		if templated {
			return notAllowed(field, "inline stages must spell the host literally: end it with \"/\" before the first {{")
		}
		end = len(rest)
	}
	u, err := parseHTTPURL(scheme + "://" + rest[:end] + "/")
	if err != nil {
		return invalid(field, "%v", err)
	}
	if u.User != nil {
		return notAllowed(field, "inline stages may not put credentials in the URL")
	}
	host, err := checkHost(u.Hostname())
	if err != nil {
		return notAllowed(field, "%v", err)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if !allowedHost(k.hosts, host, port) {
		return notAllowed(field, "host %s is not allowed in inline stages: %s", task.Quote(u.Host), k.allowedHosts(host))
	}
	s.client = k.inlineClient
	s.inlineHost = u.Scheme + "://" + strings.ToLower(u.Host)
	return nil
}

// parseHTTPURL parses a URL that must be absolute http or https with a host.
func parseHTTPURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("does not parse: %s", clean(unwrapURLError(err).Error(), 200))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("scheme must be http or https, not %s", task.Quote(u.Scheme))
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, errors.New("no host")
	}
	return u, nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func (s *httpStage) compileStatus(c *HTTPConfig) error {
	check := func(field string, codes []int) error {
		if len(codes) > maxStatusCodes {
			return invalid(field, "%d codes, limit %d", len(codes), maxStatusCodes)
		}
		for i, code := range codes {
			if code < 100 || code > 599 {
				return invalid(field, "%d is not an HTTP status (100..599)", code)
			}
			if slices.Contains(codes[:i], code) {
				return invalid(field, "%d is listed twice", code)
			}
		}
		return nil
	}
	if err := check("http.successStatus", c.SuccessStatus); err != nil {
		return err
	}
	if err := check("http.retryableStatus", c.RetryableStatus); err != nil {
		return err
	}
	for _, code := range c.RetryableStatus {
		if slices.Contains(c.SuccessStatus, code) {
			return invalid("http.retryableStatus", "%d is also in successStatus", code)
		}
	}
	if c.SuccessStatus != nil {
		success := slices.Clone(c.SuccessStatus)
		s.success = func(code int) bool { return slices.Contains(success, code) }
	} else {
		s.success = func(code int) bool { return code >= 200 && code <= 299 }
	}
	if c.RetryableStatus != nil {
		s.retryable = slices.Clone(c.RetryableStatus)
	} else {
		for _, code := range retryableStatusDefault {
			if !s.success(code) {
				s.retryable = append(s.retryable, code)
			}
		}
	}
	return nil
}

// Run sends the request (repeatedly, with poll) and classifies the response.
func (s *httpStage) Run(ctx context.Context, in Input) task.Result {
	if s.poll == nil {
		res, _, _ := s.do(ctx, in)
		return res
	}
	var last string
	for n := 1; ; n++ {
		res, status, object := s.do(ctx, in)
		switch {
		case res.Outcome == task.OutcomeSuccess:
			done, err := s.poll.done(in, status, object)
			if done {
				return res
			}
			// A response without the expected keys (a starting service may
			// answer {} or plain text) is "not yet", not a failure.
			last = fmt.Sprintf("HTTP %d, condition not met", status)
			if err != nil {
				last += ": " + err.Error()
			}
		case !res.Retryable:
			return res
		default:
			last = res.Reason
		}
		timer := time.NewTimer(s.poll.interval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return task.Failure(fmt.Sprintf("poll: %v after %d requests; last: %s", ctx.Err(), n, last), true)
		case <-timer.C:
		}
	}
}

func (p *poller) done(in Input, status int, object map[string]any) (bool, error) {
	if p.until == nil {
		return true, nil
	}
	if object == nil {
		object = map[string]any{}
	}
	data := pollData{Input: in, Status: status, Response: object}
	out, err := p.until.render(data, maxUntilRender)
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(out) == "true", nil
}

// do sends one request. It returns the result, the response's status (0
// when there was none) and its body when that is a JSON object.
func (s *httpStage) do(ctx context.Context, in Input) (res task.Result, status int, object map[string]any) {
	req, err := s.request(ctx, in)
	if err != nil {
		return task.Failure(err.Error(), false), 0, nil
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return s.transportFailure(ctx, req, err), 0, nil
	}
	defer resp.Body.Close()
	code := resp.StatusCode
	if !s.success(code) {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, excerptLen))
		reason := fmt.Sprintf("HTTP %d %s", code, http.StatusText(code))
		if len(b) > 0 {
			reason += ": " + clean(string(b), excerptLen)
		}
		return task.Failure(reason, slices.Contains(s.retryable, code)), code, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, s.maxOutput+1))
	if err != nil {
		return s.transportFailure(ctx, req, err), code, nil
	}
	if int64(len(b)) > s.maxOutput {
		return task.Failure(fmt.Sprintf("HTTP %d: response too large (over %d bytes)", code, s.maxOutput), false), code, nil
	}
	if trimmed := bytes.TrimSpace(b); len(trimmed) > 0 && trimmed[0] == '{' {
		if json.Unmarshal(trimmed, &object) != nil {
			object = nil
		}
	}
	if object == nil {
		return task.Success(map[string]any{"status": code}), code, nil
	}
	return task.Success(object), code, object
}

// request renders the templates into a request. Its errors are the
// reasons of non-retryable failures.
func (s *httpStage) request(ctx context.Context, in Input) (*http.Request, error) {
	raw, err := s.url.render(in, maxURLLen)
	if err != nil {
		return nil, err
	}
	u, err := parseHTTPURL(raw)
	if err != nil {
		return nil, fmt.Errorf("http.url: rendered URL %v", err)
	}
	if s.inlineHost != "" && u.Scheme+"://"+strings.ToLower(u.Host) != s.inlineHost {
		// Cannot happen when the check at compile time holds; refuse anyway.
		return nil, fmt.Errorf("http.url: rendered URL left host %s", s.inlineHost)
	}
	var body io.Reader
	if s.body != nil {
		b, err := s.body.render(in, s.maxOutput)
		if err != nil {
			return nil, err
		}
		body = strings.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, s.method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("http: %s", clean(err.Error(), 300))
	}
	for _, h := range s.headers {
		if h.value == nil {
			req.Header.Set(h.name, contentTypeJSON)
			continue
		}
		v, err := h.value.render(in, maxHeaderLen)
		if err != nil {
			return nil, err
		}
		if strings.ContainsFunc(v, isHeaderControl) {
			return nil, fmt.Errorf("%s: rendered value holds control characters", h.value.field)
		}
		req.Header.Set(h.name, v)
	}
	req.Header.Set("Idempotency-Key", in.IdempotencyKey())
	req.Header.Set("User-Agent", UserAgent)
	return req, nil
}

// transportFailure classifies an error of sending or reading: a done context,
// network trouble and timeouts are retryable; refused addresses and
// redirects and bad certificates are not.
func (s *httpStage) transportFailure(ctx context.Context, req *http.Request, err error) task.Result {
	target := req.Method + " " + redact(req.URL)
	if ctx.Err() != nil {
		return task.Failure(fmt.Sprintf("%s: %v", target, ctx.Err()), true)
	}
	reason := fmt.Sprintf("%s: %s", target, clean(unwrapURLError(err).Error(), 400))
	var certErr *tls.CertificateVerificationError
	var authErr x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	switch {
	case errors.Is(err, errBlockedAddr), errors.Is(err, errRedirectRefused),
		errors.As(err, &certErr), errors.As(err, &authErr), errors.As(err, &hostErr):
		return task.Failure(reason, false)
	}
	return task.Failure(reason, true)
}

// redact renders u for a failure reason: no credentials, query or fragment
// (they may hold secrets from params).
func redact(u *url.URL) string {
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return clean(r.String(), 300)
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// isHeaderControl: control characters other than tab.
func isHeaderControl(r rune) bool { return r != '\t' && isControl(r) }

// allowedHosts says which setting allows inline hosts and what it allows,
// with a word on loopback names: "localhost" and "127.0.0.1" are different
// entries, an easy trap.
func (k *httpKind) allowedHosts(refused string) string {
	if len(k.hosts) == 0 {
		return k.hostsSetting + " allows none (it is empty): add this host there, or use an operator pipeline"
	}
	list := make([]string, len(k.hosts))
	for i, e := range k.hosts {
		list[i] = e.String()
	}
	msg := k.hostsSetting + " allows only " + strings.Join(list, ", ")
	if ip := net.ParseIP(refused); refused == "localhost" || (ip != nil && ip.IsLoopback()) {
		msg += " (hosts match as written: localhost, 127.0.0.1 and ::1 are different entries)"
	}
	return msg
}
