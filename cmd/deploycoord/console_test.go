package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{Timeout: 10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	res, err := noRedirect.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// TestConsoleWiring: the console is on by default (GET / leads to it), off
// with -ui=false, and under the base path when one is set.
func TestConsoleWiring(t *testing.T) {
	t.Parallel()
	t.Run("OnByDefault", func(t *testing.T) {
		t.Parallel()
		m, _, err := runMain(t)
		if err != nil {
			t.Fatal(err)
		}
		res, _ := get(t, "http://"+m.Addr+"/")
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/" {
			t.Fatalf("GET / = %d %q, want 303 /ui/", res.StatusCode, res.Header.Get("Location"))
		}
		res, body := get(t, "http://"+m.Addr+"/ui/")
		if res.StatusCode != http.StatusOK || !strings.Contains(body, "<h1>Plans</h1>") || res.Header.Get("Content-Security-Policy") == "" {
			t.Fatalf("GET /ui/ = %d, CSP %q:\n%.500s", res.StatusCode, res.Header.Get("Content-Security-Policy"), body)
		}
	})
	t.Run("Off", func(t *testing.T) {
		t.Parallel()
		m, _, err := runMain(t, "-ui=false")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"/", "/ui/"} {
			if res, _ := get(t, "http://"+m.Addr+p); res.StatusCode != http.StatusNotFound {
				t.Errorf("GET %s with the console off = %d, want 404", p, res.StatusCode)
			}
		}
	})
	t.Run("BasePath", func(t *testing.T) {
		t.Parallel()
		m, _, err := runMain(t, "-ui-base-path", "/ops/deploycoord")
		if err != nil {
			t.Fatal(err)
		}
		if res, _ := get(t, "http://"+m.Addr+"/"); res.Header.Get("Location") != "/ops/deploycoord/ui/" {
			t.Errorf("GET / goes to %q", res.Header.Get("Location"))
		}
		for _, p := range []string{"/ops/deploycoord/ui/", "/ui/"} {
			res, body := get(t, "http://"+m.Addr+p)
			if res.StatusCode != http.StatusOK || !strings.Contains(body, `href="/ops/deploycoord/ui/instances"`) {
				t.Errorf("GET %s = %d, links without the base path?", p, res.StatusCode)
			}
		}
	})
}

// TestConsoleStreamDoesNotHoldShutdown: an open console page (its event
// stream) ends when the server shuts down, which then finishes at once
// instead of waiting for the browser.
func TestConsoleStreamDoesNotHoldShutdown(t *testing.T) {
	t.Parallel()
	m := NewMain(io.Discard, io.Discard)
	if err := m.ParseFlags([]string{"-listen", "127.0.0.1:0", "-shutdown-grace", "1s"}, env()); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A session first (the console hands anonymous ones out with tokens off).
	res, _ := get(t, "http://"+m.Addr+"/ui/")
	req, _ := http.NewRequest("GET", "http://"+m.Addr+"/ui/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	for _, c := range res.Cookies() {
		req.AddCookie(c)
	}
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if line, _ := bufio.NewReader(stream.Body).ReadString('\n'); stream.StatusCode != 200 || !strings.HasPrefix(line, "retry:") {
		t.Fatalf("stream: %d %q", stream.StatusCode, line)
	}
	start := time.Now()
	if err := m.Close(); err != nil {
		t.Fatalf("Close with a console stream open: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Close took %s with a console stream open", d)
	}
}
