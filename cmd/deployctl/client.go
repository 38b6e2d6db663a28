package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
)

// maxAnswerBytes bounds an API answer read into memory (a page of 1000 tasks
// is about 1 MiB).
const maxAnswerBytes = 64 << 20

// userAgent identifies deployctl in the server's access log.
const userAgent = "deployctl/1"

// apiError is an API answer other than 2xx: the problem+json code and detail
// when the server sent them.
type apiError struct {
	Status    int
	Code      string
	Detail    string
	RequestID string
}

func (e *apiError) Error() string {
	if e.Code != "" {
		return e.Code + ": " + e.Detail
	}
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, http.StatusText(e.Status), e.Detail)
}

// transient reports whether err may go away by itself (network trouble, a
// server restarting, Redis unreachable): watch and follow loops retry those.
// An answer deployctl cannot decode will not get better by asking again.
func transient(err error) bool {
	var (
		api *apiError
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &api):
		return api.Status >= 500 || api.Status == http.StatusTooManyRequests
	case err == nil, errors.Is(err, context.Canceled), errors.As(err, &syn), errors.As(err, &typ):
		return false
	}
	return true
}

// client calls the API. The token only ever goes into the Authorization
// header; nothing here prints headers.
type client struct {
	base    *url.URL
	token   string
	timeout time.Duration
	http    *http.Client
	// verbose receives one line per request, nil for none.
	verbose io.Writer
	// warn receives the degraded-answer warning.
	warn     io.Writer
	degraded bool
}

func newClient(base *url.URL, token string, timeout time.Duration, verbose, warn io.Writer) *client {
	b := *base
	b.Path = strings.TrimRight(b.Path, "/")
	b.RawPath = ""
	return &client{base: &b, token: token, timeout: timeout, http: &http.Client{}, verbose: verbose, warn: warn}
}

// request is one API call.
type request struct {
	method string
	// path is the API path, already escaped ("/v1/plans/plan-...").
	path  string
	query url.Values
	// body is sent as JSON: []byte as is, anything else marshalled.
	body   any
	header http.Header
	// extra lengthens the time limit (a long poll's wait).
	extra time.Duration
}

// do sends r and returns the status and body of a 2xx answer; any other
// answer is an *apiError.
func (c *client) do(ctx context.Context, r request) (int, []byte, error) {
	u := *c.base
	u.Path += r.path
	u.RawQuery = r.query.Encode()
	var body io.Reader
	if r.body != nil {
		b, ok := r.body.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(r.body); err != nil {
				return 0, nil, fmt.Errorf("encode request body: %w", err)
			}
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout+r.extra)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return 0, nil, fmt.Errorf("build request %s %s: %w", r.method, u.Redacted(), err)
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		c.log(r.method, &u, "failed", start)
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded) && r.method != http.MethodGet:
			// The server goes on with a change it received: say so.
			return 0, nil, fmt.Errorf("%s %s: no answer within %s (--timeout); the server may have done it, or be doing it still: look before you send it again (a bulk retry goes on through its tenants; --timeout 5m for a big one)",
				r.method, u.Redacted(), c.timeout+r.extra)
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return 0, nil, fmt.Errorf("%s %s: no answer within %s (--timeout)", r.method, u.Redacted(), c.timeout+r.extra)
		case errors.Is(err, context.Canceled):
			return 0, nil, fmt.Errorf("%s %s: %w", r.method, u.Redacted(), context.Canceled)
		}
		// net/http's error names the method and the URL, password redacted.
		return 0, nil, fmt.Errorf("call the API: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	c.log(r.method, &u, resp.Status, start)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: read the answer: %w", r.method, u.Redacted(), err)
	}
	if len(data) > maxAnswerBytes {
		return 0, nil, fmt.Errorf("%s %s: answer larger than %d bytes", r.method, u.Redacted(), maxAnswerBytes)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, nil, problem(resp, data)
	}
	if resp.Header.Get(httpapi.HeaderDegraded) == "true" && !c.degraded {
		c.degraded = true
		fmt.Fprintln(c.warn, "warning: DEGRADED: the server answered from memory because Redis is not answering; "+
			"the answer may be stale, and a list holds only what that instance runs")
	}
	return resp.StatusCode, data, nil
}

// problem turns an error answer into an *apiError.
func problem(resp *http.Response, data []byte) error {
	e := &apiError{Status: resp.StatusCode}
	var p httpapi.Problem
	if json.Unmarshal(data, &p) == nil && p.Code != "" {
		e.Code, e.Detail, e.RequestID = p.Code, p.Detail, p.RequestID
		return e
	}
	// Not a problem document (a proxy's error page): show its start.
	text := strings.TrimSpace(string(data))
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	if text == "" {
		text = "(no body)"
	}
	e.Detail = text
	return e
}

func (c *client) log(method string, u *url.URL, status string, start time.Time) {
	if c.verbose == nil {
		return
	}
	fmt.Fprintf(c.verbose, "> %s %s: %s in %s\n", method, u.Redacted(), status, time.Since(start).Round(time.Millisecond))
}

// getJSON GETs path and decodes the answer into dst (if not nil); it also
// returns the raw answer.
func (c *client) getJSON(ctx context.Context, path string, q url.Values, dst any) ([]byte, error) {
	return c.call(ctx, request{method: http.MethodGet, path: path, query: q}, dst)
}

// call sends r and decodes a 2xx answer into dst (if not nil).
func (c *client) call(ctx context.Context, r request, dst any) ([]byte, error) {
	_, data, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	if dst != nil {
		if err := json.Unmarshal(data, dst); err != nil {
			return nil, fmt.Errorf("%s %s: the answer is not the JSON expected: %w", r.method, r.path, err)
		}
	}
	return data, nil
}

func planPath(id string) string { return "/v1/plans/" + url.PathEscape(id) }

func tenantPath(id, rest string) string { return "/v1/tenants/" + url.PathEscape(id) + "/" + rest }
