package stage

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/task"
)

func TestRefuseBlocked(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr    string
		refused bool
	}{
		{"169.254.169.254:80", true},
		{"169.254.0.1:443", true},
		{"169.254.255.255:1", true},
		{"[fe80::1]:80", true},
		{"[fe80::1%eth0]:80", true},
		{"[febf:ffff::1]:80", true},
		{"[fd00:ec2::254]:80", true},
		{"100.100.100.200:80", true},
		{"[::ffff:169.254.169.254]:80", true},
		{"[64:ff9b::a9fe:a9fe]:80", true}, // NAT64 of 169.254.169.254
		{"not-an-address:80", true},
		{"127.0.0.1:80", false},
		{"10.0.0.1:80", false},
		{"169.253.255.255:80", false},
		{"169.255.0.0:80", false},
		{"100.100.100.201:80", false},
		{"[fec0::1]:80", false},
		{"[fd00:ec2::253]:80", false},
		{"[::1]:80", false},
		{"[2001:db8::1]:443", false},
	}
	for _, tt := range tests {
		err := refuseBlocked("tcp", tt.addr, nil)
		if got := errors.Is(err, errBlockedAddr); got != tt.refused {
			t.Errorf("refuseBlocked(%s) = %v, want refused=%v", tt.addr, err, tt.refused)
		}
	}
}

func TestCheckHost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host, want string // want "" means refused
	}{
		{"cfg.example", "cfg.example"},
		{"CFG.Example.", "cfg.example"},
		{"localhost", "localhost"},
		{"127.0.0.1", "127.0.0.1"},
		{"::ffff:127.0.0.1", "127.0.0.1"},
		{"2001:db8::1", "2001:db8::1"},
		{"169.254.169.254", ""},
		{"fe80::1", ""},
		{"metadata.google.internal", ""},
		{"METADATA.GOOG.", ""},
		{"2852039166", ""},
		{"0xa9fea9fe", ""},
		{"host.123", ""},
		{"bad_host!", ""},
		{"a..b", ""},
		{"-a.example", ""},
		{strings.Repeat("a", 64) + ".example", ""},
		{"", ""},
	}
	for _, tt := range tests {
		got, err := checkHost(tt.host)
		if got != tt.want || (err == nil) != (tt.want != "") {
			t.Errorf("checkHost(%q) = %q, %v; want %q", tt.host, got, err, tt.want)
		}
	}
}

func TestParseHostEntry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		entry string
		want  hostEntry
		ok    bool
	}{
		{"cfg.example", hostEntry{"cfg.example", ""}, true},
		{"cfg.example:8080", hostEntry{"cfg.example", "8080"}, true},
		{"[::1]:8080", hostEntry{"::1", "8080"}, true},
		{"[::1]", hostEntry{"::1", ""}, true},
		{"::1", hostEntry{"::1", ""}, true},
		{"cfg.example:0", hostEntry{}, false},
		{"cfg.example:65536", hostEntry{}, false},
		{"cfg.example:08", hostEntry{}, false},
		{"cfg.example:", hostEntry{}, false},
		{"169.254.169.254", hostEntry{}, false},
		{"", hostEntry{}, false},
		{"http://cfg.example", hostEntry{}, false},
	}
	for _, tt := range tests {
		got, err := parseHostEntry(tt.entry)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("parseHostEntry(%q) = %+v, %v; want %+v ok=%v", tt.entry, got, err, tt.want, tt.ok)
		}
	}
}

// fakeResolver answers every A query from names and every other query with
// no records, as a DNS server over the stream the Go resolver dials.
func fakeResolver(names map[string]netip.Addr) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			var n [2]byte
			if _, err := io.ReadFull(server, n[:]); err != nil {
				return
			}
			q := make([]byte, binary.BigEndian.Uint16(n[:]))
			if _, err := io.ReadFull(server, q); err != nil || len(q) < 12 {
				return
			}
			// The question: labels up to a zero byte, then type and class.
			end := 12
			var labels []string
			for end < len(q) && q[end] != 0 {
				l := int(q[end])
				labels = append(labels, string(q[end+1:end+1+l]))
				end += 1 + l
			}
			end += 5
			qtype := binary.BigEndian.Uint16(q[end-4 : end-2])
			addr, found := names[strings.ToLower(strings.Join(labels, "."))]
			resp := append([]byte(nil), q[:2]...) // id
			resp = append(resp, 0x85, 0x80)       // response, authoritative, recursion available
			resp = append(resp, 0, 1, 0, 0, 0, 0, 0, 0)
			resp = append(resp, q[12:end]...)
			if found && qtype == 1 && addr.Is4() {
				resp[7] = 1 // one answer
				ip := addr.As4()
				resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4)
				resp = append(resp, ip[:]...)
			} else if !found {
				resp[3] |= 3 // NXDOMAIN
			}
			out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
			server.Write(append(out, resp...))
		}()
		return client, nil
	}}
}

// TestHTTP_DNSRebinding: a host allowed by name that resolves to a metadata
// address is refused when dialing, after resolution.
func TestHTTP_DNSRebinding(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"reached": true}`)
	}))
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]

	r := NewRegistry(Options{InlineHTTPHosts: []string{"rebind.test", "good.test"}})
	k := r.kinds["http"].(*httpKind)
	k.inlineClient = inlineClient(k.client, fakeResolver(map[string]netip.Addr{
		"rebind.test": netip.MustParseAddr("169.254.169.254"),
		"good.test":   netip.MustParseAddr("127.0.0.1"),
	}))
	compileURL := func(rawURL string) Runnable {
		t.Helper()
		cfg, _ := json.Marshal(HTTPConfig{URL: rawURL})
		run, err := r.Compile(task.StageSpec{Name: "s", Kind: "http", Config: cfg}, SourceInline)
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	t.Run("OKResolvesToAllowedAddress", func(t *testing.T) {
		res := compileURL("http://good.test:"+port+"/").Run(ctx, Input{TaskID: "t", Stage: "s"})
		if res.Outcome != task.OutcomeSuccess || res.Outputs["reached"] != true {
			t.Fatalf("result = %+v, want success through the fake resolver", res)
		}
	})
	t.Run("FailureResolvesToMetadata", func(t *testing.T) {
		res := compileURL("http://rebind.test:"+port+"/").Run(ctx, Input{TaskID: "t", Stage: "s"})
		if res.Outcome != task.OutcomeFailure || res.Retryable || !strings.Contains(res.Reason, "169.254.169.254") ||
			!strings.Contains(res.Reason, "link-local or cloud metadata") {
			t.Fatalf("result = %+v, want a non-retryable refusal naming the address", res)
		}
	})
}

func TestInlineClient_NoProxy(t *testing.T) {
	t.Parallel()
	base := &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy.example:3128"}),
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("base dialer used")
		},
	}}
	c := inlineClient(base, nil)
	tr := c.Transport.(*http.Transport)
	if tr.Proxy != nil {
		t.Error("inline transport keeps the proxy")
	}
	if _, err := tr.DialContext(context.Background(), "tcp", "169.254.169.254:80"); !errors.Is(err, errBlockedAddr) {
		t.Errorf("inline dial = %v, want %v", err, errBlockedAddr)
	}
}

func TestClean(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in    string
		limit int
		want  string
	}{
		{"plain", 100, "plain"},
		{"a\nb\x00c\x7f", 100, `a\nb\x00c\x7f`},
		{"bad \xff utf8", 100, `bad \ufffd utf8`},
		{"real \uFFFD", 100, "real \uFFFD"},
		{"line\u2028sep", 100, `line\u2028sep`},
		// A target's text must not reorder what the console, a log or a
		// terminal shows around it.
		{"fake line\u202e</script>", 100, `fake line\u202e</script>`},
		{"a\u2066b\u2069c\u200fd", 100, `a\u2066b\u2069c\u200fd`},
		{"abcdefghij", 10, "abcdefghij"},
		{"abcdefghijk", 10, "abcdefg…"},
		{"ab\ncdefghijk", 10, `ab\ncde…`},
		{"ééééé", 8, "éé…"},
	}
	for _, tt := range tests {
		got := clean(tt.in, tt.limit)
		if got != tt.want || len(got) > tt.limit {
			t.Errorf("clean(%q, %d) = %q, want %q", tt.in, tt.limit, got, tt.want)
		}
	}
}

func TestTail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in    string
		limit int
		want  string
	}{
		{"short", 10, "short"},
		{"0123456789abc", 10, "…6789abc"},
		{"xx\n\n\n\nend", 10, `…\n\nend`},
		{"aéééé", 7, "…éé"},
	}
	for _, tt := range tests {
		got := tail([]byte(tt.in), tt.limit)
		if got != tt.want || len(got) > tt.limit {
			t.Errorf("tail(%q, %d) = %q, want %q", tt.in, tt.limit, got, tt.want)
		}
	}
}

func TestCheckFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		format string
		ok     bool
	}{
		{"%s-%d", true},
		{"%08.3f %%", true},
		{"%999d", true},
		{"%[2]s %[1]s", true},
		{"%1000d", false},
		{"%.1000f", false},
		{"%-01000000d", false},
		{"%*d", false},
		{"%.*f", false},
	}
	for _, tt := range tests {
		if err := checkFormat(tt.format); (err == nil) != tt.ok {
			t.Errorf("checkFormat(%q) = %v, want ok=%v", tt.format, err, tt.ok)
		}
	}
}
