// Package redistest gives tests a Redis to talk to: miniredis in-process, the
// shared real redis-server (with a fresh key prefix per test), a throwaway
// redis-server on a random port that a fault test may stop, pause or
// restart, a Redis Cluster of three masters (StartCluster, or SharedCluster
// for every test of a binary) and a Sentinel setup of one master, one
// replica and three sentinels (StartSentinel). Backends runs a suite on
// miniredis, the real Redis and the cluster. It also counts Redis round
// trips with a go-redis hook.
//
// Real-Redis tests skip with a message when no server is reachable (or
// redis-server and redis-cli are not installed, for the cluster), unless
// DEPLOYCOORD_REQUIRE_REDIS=1 (CI sets it), in which case they fail. Every
// server a test starts is killed when the test (or, for SharedCluster, the
// test binary through Main) ends, and by the kernel if the binary dies.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Addr is the shared real Redis: $REDIS_ADDR, or 127.0.0.1:6379.
func Addr() string {
	if a := os.Getenv("REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// Required reports whether real-Redis tests must run (fail instead of skip).
func Required() bool { return os.Getenv("DEPLOYCOORD_REQUIRE_REDIS") == "1" }

// Prefix returns a fresh key prefix for one test, e.g. "t-3f2a9c1d:".
func Prefix(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "t-" + hex.EncodeToString(b[:]) + ":"
}

// NewClient returns a go-redis client for addr with deadlines that reach the
// socket (ContextTimeoutEnabled), closed when the test ends.
func NewClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Mini starts an in-process miniredis and returns it with a client.
func Mini(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	return m, NewClient(t, m.Addr())
}

// Real returns a client of the shared real Redis and a fresh key prefix. Keys
// under the prefix are deleted when the test ends. It skips the test (or
// fails it when Required) if no server answers.
func Real(t testing.TB) (*redis.Client, string) {
	t.Helper()
	c := NewClient(t, Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		unreachable(t, fmt.Sprintf("redis at %s: %v", Addr(), err))
	}
	prefix := Prefix(t)
	t.Cleanup(func() { DeletePrefix(c, prefix) })
	return c, prefix
}

// DeletePrefix removes every key under prefix (SCAN MATCH, test cleanup only:
// prefixes made by Prefix have no glob characters), on every master of a
// cluster, one key per UNLINK (a cluster refuses multi-key commands across
// slots).
func DeletePrefix(c redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = eachServer(ctx, c, func(ctx context.Context, s *redis.Client) error {
		keys, err := scanAll(ctx, s, prefix)
		for len(keys) > 0 {
			n := min(len(keys), 500)
			_, _ = s.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys[:n] {
					p.Unlink(ctx, k)
				}
				return nil
			})
			keys = keys[n:]
		}
		return err
	})
}

// KeysUnder returns every key under prefix (SCAN MATCH on the server, or on
// every master of a cluster). Tests only: the product never scans.
func KeysUnder(ctx context.Context, c redis.UniversalClient, prefix string) ([]string, error) {
	var mu sync.Mutex
	var out []string
	err := eachServer(ctx, c, func(ctx context.Context, s *redis.Client) error {
		keys, err := scanAll(ctx, s, prefix)
		mu.Lock()
		out = append(out, keys...)
		mu.Unlock()
		return err
	})
	slices.Sort(out)
	return out, err
}

// eachServer calls f with the client itself, or with each master of a
// cluster client.
func eachServer(ctx context.Context, c redis.UniversalClient, f func(context.Context, *redis.Client) error) error {
	switch cl := c.(type) {
	case *redis.ClusterClient:
		return cl.ForEachMaster(ctx, f)
	case *redis.Client:
		return f(ctx, cl)
	}
	return fmt.Errorf("redistest: unsupported client %T", c)
}

// Clone returns a new client of the same Redis (or cluster) as c, with the
// same options and none of its hooks: another coordinator instance. It is
// closed when the test ends.
func Clone(t testing.TB, c redis.UniversalClient) redis.UniversalClient {
	t.Helper()
	var out redis.UniversalClient
	switch cl := c.(type) {
	case *redis.ClusterClient:
		out = redis.NewClusterClient(cl.Options())
	case *redis.Client:
		out = redis.NewClient(cl.Options())
	default:
		t.Fatalf("redistest: cannot clone a %T", c)
	}
	t.Cleanup(func() { _ = out.Close() })
	return out
}

func unreachable(t testing.TB, why string) {
	t.Helper()
	if Required() {
		t.Fatalf("real Redis required (DEPLOYCOORD_REQUIRE_REDIS=1) but %s", why)
	}
	t.Skipf("skipping real-Redis test: %s (start redis-server or set REDIS_ADDR; CI sets DEPLOYCOORD_REQUIRE_REDIS=1)", why)
}

// Backend names a Redis a suite runs against.
type Backend struct {
	Name string
	// New returns a client and a fresh key prefix for one test.
	New func(t testing.TB) (redis.UniversalClient, string)
	// Mini is set for the miniredis backend (to fast-forward its clock).
	Mini func(t testing.TB) *miniredis.Miniredis
}

// Backends returns miniredis, the shared real Redis and a Redis Cluster of
// three masters (SharedCluster: one per test binary, started on first use;
// the package's TestMain calls Main to stop it), so a suite can run the
// same tests on all three: for _, b := range redistest.Backends() {
// t.Run(b.Name, ...) }. On the miniredis backend, Mini returns the server of
// the client made last by New in that test. The cluster backend skips
// (fails when Required) without redis-server and redis-cli.
func Backends() []Backend {
	var mu sync.Mutex
	minis := map[testing.TB]*miniredis.Miniredis{}
	return []Backend{
		{
			Name: "miniredis",
			New: func(t testing.TB) (redis.UniversalClient, string) {
				m, c := Mini(t)
				mu.Lock()
				minis[t] = m
				mu.Unlock()
				t.Cleanup(func() { mu.Lock(); delete(minis, t); mu.Unlock() })
				return c, Prefix(t)
			},
			Mini: func(t testing.TB) *miniredis.Miniredis {
				mu.Lock()
				defer mu.Unlock()
				return minis[t]
			},
		},
		{
			Name: "redis",
			New: func(t testing.TB) (redis.UniversalClient, string) {
				return Real(t)
			},
		},
		{
			Name: "cluster",
			New: func(t testing.TB) (redis.UniversalClient, string) {
				c := SharedCluster(t).Client(t)
				prefix := Prefix(t)
				t.Cleanup(func() { DeletePrefix(c, prefix) })
				return c, prefix
			},
		},
	}
}

// Server is a throwaway redis-server on a random port, owned by one test.
type Server struct {
	t    testing.TB
	Addr string
	Port int
	p    *proc
}

// StartServer starts redis-server on a free port with extra config args
// (e.g. "--maxmemory-policy", "volatile-lru") and stops it when the test
// ends. It skips (or fails when Required) if redis-server is not installed.
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	if why := binaries(false); why != "" {
		unreachable(t, why)
	}
	p, err := newProc(t.TempDir(), append([]string{"--save", "", "--appendonly", "no"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, Addr: p.Addr, Port: p.Port, p: p}
	s.Start()
	t.Cleanup(s.Kill)
	return s
}

// Start (re)starts the server process with the same port and config; it
// comes back empty unless persistence was configured.
func (s *Server) Start() {
	s.t.Helper()
	if err := s.p.start(); err != nil {
		s.t.Fatal(err)
	}
}

// Kill stops the server with SIGKILL and waits for it to exit.
func (s *Server) Kill() { s.p.kill() }

// Restart kills the server and starts it again, empty.
func (s *Server) Restart() {
	s.Kill()
	s.Start()
}

// Stop pauses the server with SIGSTOP: connections stay open, nothing answers.
func (s *Server) Stop() { s.p.signal(syscall.SIGSTOP) }

// Cont resumes a server paused by Stop.
func (s *Server) Cont() { s.p.signal(syscall.SIGCONT) }

// Client returns a client of the server, closed when the test ends.
func (s *Server) Client() *redis.Client { return NewClient(s.t, s.Addr) }

// Counter is a go-redis hook that counts round trips: one per command sent
// alone, one per pipeline (or MULTI/EXEC block) however many commands it
// holds. Add it with client.AddHook(counter).
//
// A new connection's handshake (HELLO, AUTH, SELECT, READONLY, CLIENT
// SETNAME, CLIENT SETINFO, CLIENT TRACKING, CLIENT MAINT_NOTIFICATIONS) is
// not counted: a pool dials whenever it likes, and budgets are per
// operation. A test that sends one of those commands itself is not charged
// for it either.
type Counter struct {
	n    atomic.Int64
	cmds atomic.Int64
}

// Handshake reports whether cmd is one that go-redis sends while it sets up
// a new connection (the benchmark command's counter skips them too).
func Handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "auth", "select", "readonly":
		return true
	case "client":
		args := cmd.Args()
		if len(args) < 2 {
			return false
		}
		sub, _ := args[1].(string)
		switch strings.ToLower(sub) {
		case "setname", "setinfo", "tracking", "maint_notifications":
			return true
		}
	}
	return false
}

// RoundTrips returns the round trips counted so far.
func (c *Counter) RoundTrips() int64 { return c.n.Load() }

// Commands returns the commands counted so far.
func (c *Counter) Commands() int64 { return c.cmds.Load() }

// Reset sets the counts to zero.
func (c *Counter) Reset() { c.n.Store(0); c.cmds.Store(0) }

// Count runs f and returns the round trips it made.
func (c *Counter) Count(f func()) int64 {
	before := c.n.Load()
	f()
	return c.n.Load() - before
}

// DialHook implements redis.Hook.
func (c *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !Handshake(cmd) {
			c.n.Add(1)
			c.cmds.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook. A pipeline is counted unless it
// holds only handshake commands (go-redis pipelines part of the handshake).
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := int64(0)
		for _, cmd := range cmds {
			if !Handshake(cmd) {
				n++
			}
		}
		if n > 0 {
			c.n.Add(1)
			c.cmds.Add(n)
		}
		return next(ctx, cmds)
	}
}

// CommandCalls returns how many times the server (every master of a
// cluster, summed) has run each command so far, by INFO commandstats name
// ("set", "evalsha", "client|setinfo", ...), the commands scripts run
// included.
func CommandCalls(ctx context.Context, c redis.UniversalClient) (map[string]int64, error) {
	stats, err := CommandStats(ctx, c)
	out := make(map[string]int64, len(stats))
	for name, st := range stats {
		out[name] = st.Calls
	}
	return out, err
}

// CommandStat is one command's line of INFO commandstats: how many times it
// ran and the microseconds it took (a script's time includes the commands
// it called, which are counted under their own names too).
type CommandStat struct {
	Calls, Usec int64
}

// CommandStats returns INFO commandstats by command name, every master of a
// cluster summed.
func CommandStats(ctx context.Context, c redis.UniversalClient) (map[string]CommandStat, error) {
	var mu sync.Mutex
	out := map[string]CommandStat{}
	err := eachServer(ctx, c, func(ctx context.Context, s *redis.Client) error {
		info, err := s.InfoMap(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for k, v := range info["Commandstats"] {
			name, ok := strings.CutPrefix(k, "cmdstat_")
			if !ok {
				continue
			}
			st := out[name]
			for _, f := range strings.Split(v, ",") {
				field, n, _ := strings.Cut(f, "=")
				var dst *int64
				switch field {
				case "calls":
					dst = &st.Calls
				case "usec":
					dst = &st.Usec
				default:
					continue
				}
				x, err := strconv.ParseInt(n, 10, 64)
				if err != nil {
					return fmt.Errorf("redistest: INFO commandstats %s=%q", k, v)
				}
				*dst += x
			}
			out[name] = st
		}
		return nil
	})
	return out, err
}

// Each is a go-redis hook that calls f with every command the client sends,
// alone or in a pipeline, before it is sent: for tests that count or note
// commands of a kind.
type Each func(cmd redis.Cmder)

func (f Each) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f Each) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		f(cmd)
		return next(ctx, cmd)
	}
}

func (f Each) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			f(c)
		}
		return next(ctx, cmds)
	}
}
