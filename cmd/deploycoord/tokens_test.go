package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
)

const (
	secretA = "s3cret-alpha-0123456789"
	secretB = "s3cret-bravo-0123456789"
	secretC = "s3cret:charlie:0123456789" // colons belong to the secret
)

// tokensGetenv returns a getenv over a map.
func tokensGetenv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeTokensFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTokensConfig(t *testing.T) {
	t.Parallel()
	goodFile := "# deploycoord API tokens\n\n  ci:operator:" + secretB + "  \r\n# dashboards\ngrafana:viewer:" + secretC + "\n"
	tests := []struct {
		name string
		env  map[string]string
		file string // content of DEPLOYCOORD_TOKENS_FILE, if set
		want []httpapi.Token
		errs []string // substrings of the error; none: no error
	}{
		{"InlineOK", map[string]string{"DEPLOYCOORD_TOKENS": "alice:operator:" + secretA + ", bob:viewer:" + secretB}, "",
			[]httpapi.Token{{Name: "alice", Role: "operator", Hash: httpapi.HashSecret(secretA)}, {Name: "bob", Role: "viewer", Hash: httpapi.HashSecret(secretB)}}, nil},
		{"FileOK", nil, goodFile,
			[]httpapi.Token{{Name: "ci", Role: "operator", Hash: httpapi.HashSecret(secretB)}, {Name: "grafana", Role: "viewer", Hash: httpapi.HashSecret(secretC)}}, nil},
		{"BothMergedOK", map[string]string{"DEPLOYCOORD_TOKENS": "alice:operator:" + secretA}, goodFile,
			[]httpapi.Token{{Name: "alice", Role: "operator", Hash: httpapi.HashSecret(secretA)}, {Name: "ci", Role: "operator", Hash: httpapi.HashSecret(secretB)},
				{Name: "grafana", Role: "viewer", Hash: httpapi.HashSecret(secretC)}}, nil},
		{"ErrDuplicateAcrossSources", map[string]string{"DEPLOYCOORD_TOKENS": "ci:viewer:" + secretA}, goodFile, nil,
			[]string{"DEPLOYCOORD_TOKENS_FILE", "ci", "used twice"}},
		{"ErrSameSecret", map[string]string{"DEPLOYCOORD_TOKENS": "a:viewer:" + secretA + ",b:operator:" + secretA}, "", nil,
			[]string{"same secret"}},
		{"ErrWeakSecret", map[string]string{"DEPLOYCOORD_TOKENS": "a:viewer:short-secret"}, "", nil,
			[]string{"DEPLOYCOORD_TOKENS", "entry 1", "shorter than 16"}},
		{"ErrBadRole", map[string]string{"DEPLOYCOORD_TOKENS": "a:viewer:" + secretA + ",b:admin:" + secretB}, "", nil,
			[]string{"entry 2", "viewer or operator"}},
		{"ErrBadFileLines", nil, "ok:viewer:" + secretA + "\n# fine\nno-colons-" + secretB + "\nb@d:viewer:" + secretC + "\nx:operator:tiny\n", nil,
			[]string{"line 3: want name:role:secret", "line 4: the name", "line 5: the secret is shorter"}},
		{"ErrSpaceInSecret", nil, "a:viewer:has a space in the secret\n", nil, []string{"line 1", "printable"}},
		{"ErrMissingFile", map[string]string{"DEPLOYCOORD_TOKENS_FILE": "/nonexistent/tokens"}, "", nil, []string{"DEPLOYCOORD_TOKENS_FILE", "/nonexistent/tokens"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{}
			for k, v := range tt.env {
				env[k] = v
			}
			if tt.file != "" {
				env["DEPLOYCOORD_TOKENS_FILE"] = writeTokensFile(t, tt.file)
			}
			c, err := ParseConfig(nil, tokensGetenv(env), io.Discard)
			if len(tt.errs) > 0 {
				if err == nil {
					t.Fatal("ParseConfig accepted the tokens")
				}
				for _, want := range tt.errs {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				}
				for _, secret := range []string{secretA, secretB, secretC, "short-secret", "has a space", "tiny"} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("error %q shows a secret", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(c.Tokens) != fmt.Sprint(tt.want) {
				t.Fatalf("tokens = %v, want %v", c.Tokens, tt.want)
			}
			for _, secret := range []string{secretA, secretB, secretC} {
				if strings.Contains(fmt.Sprintf("%+v %s", c, c.Tokens), secret) {
					t.Fatal("the parsed configuration holds a secret")
				}
			}
		})
	}
}

func TestListenWithoutTokens(t *testing.T) {
	t.Parallel()
	tokens := "DEPLOYCOORD_TOKENS=ops:operator:" + secretA
	tests := []struct {
		name   string
		listen string
		env    []string
		ok     bool
	}{
		{"LoopbackOK", "127.0.0.1:0", nil, true},
		{"LoopbackNetOK", "127.0.0.2:8080", nil, true},
		{"LocalhostOK", "localhost:8080", nil, true},
		{"IPv6LoopbackOK", "[::1]:8080", nil, true},
		{"ErrAllInterfaces", ":8080", nil, false},
		{"ErrAnyV4", "0.0.0.0:8080", nil, false},
		{"ErrAnyV6", "[::]:8080", nil, false},
		{"ErrPublic", "192.0.2.10:8080", nil, false},
		{"ErrHostName", "coord.example.com:8080", nil, false},
		{"AnyWithTokensOK", "0.0.0.0:8080", []string{tokens}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{}
			for _, kv := range tt.env {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			_, err := ParseConfig([]string{"-listen", tt.listen}, tokensGetenv(env), io.Discard)
			switch {
			case tt.ok && err != nil:
				t.Fatalf("ParseConfig = %v", err)
			case !tt.ok && err == nil:
				t.Fatalf("listening on %s without tokens was accepted", tt.listen)
			case !tt.ok && (!strings.Contains(err.Error(), "DEPLOYCOORD_LISTEN") || !strings.Contains(err.Error(), "no API tokens") ||
				!strings.Contains(err.Error(), "DEPLOYCOORD_TOKENS_FILE")):
				t.Fatalf("error %q does not name the settings", err)
			}
		})
	}
}

// TestMainRefusesExposedListener runs the server's start-up: without tokens
// on a non-loopback address it never listens.
func TestMainRefusesExposedListener(t *testing.T) {
	t.Parallel()
	m := NewMain(io.Discard, io.Discard)
	err := m.ParseFlags([]string{"-listen", "0.0.0.0:0"}, tokensGetenv(nil))
	if err == nil || !strings.Contains(err.Error(), "refusing to serve the API without authentication") {
		t.Fatalf("ParseFlags = %v", err)
	}
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in  string
		n   int
		per time.Duration
		err bool
	}{
		{"60/m", 60, time.Minute, false},
		{"10/s", 10, time.Second, false},
		{"1000/h", 1000, time.Hour, false},
		{"100/30s", 100, 30 * time.Second, false},
		{"off", -1, 0, false},
		{"60", 0, 0, true},
		{"0/m", 0, 0, true},
		{"x/m", 0, 0, true},
		{"5/10ms", 0, 0, true},
		{"5/day", 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			n, per, err := parseRate(tt.in)
			if n != tt.n || per != tt.per || (err != nil) != tt.err {
				t.Fatalf("parseRate(%q) = %d, %s, %v", tt.in, n, per, err)
			}
		})
	}
}

func TestParseProxies(t *testing.T) {
	t.Parallel()
	got, err := parseProxies("10.0.0.1, 10.1.0.0/16,::1, 2001:db8::/32, ::ffff:192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[10.0.0.1/32 10.1.0.0/16 ::1/128 2001:db8::/32 192.0.2.1/32]" {
		t.Fatalf("proxies = %v", got)
	}
	if _, err := parseProxies("10.0.0.1, proxy.local"); err == nil || !strings.Contains(err.Error(), "proxy.local") {
		t.Fatalf("bad entry: %v", err)
	}
}

func TestNewSettingsDefaults(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(nil, tokensGetenv(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tokens) != 0 || c.TrustedProxies != nil || c.RateLimit != 60 || c.RateWindow != time.Minute ||
		c.MaxInFlight != 256 || c.IdempotencyTTL != 24*time.Hour {
		t.Fatalf("defaults = %+v", c)
	}
	for _, bad := range [][]string{{"-max-in-flight", "0"}, {"-idempotency-ttl", "10s"}, {"-rate-limit", "fast"}, {"-trusted-proxies", "x"}} {
		if _, err := ParseConfig(bad, tokensGetenv(nil), io.Discard); err == nil {
			t.Errorf("ParseConfig(%q) accepted", bad)
		}
	}
}
