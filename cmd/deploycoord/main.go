// Command deploycoord is the deployment coordinator server: it rolls plans
// out to tenants, keeps their state in Redis and serves the HTTP API.
//
//	go run ./cmd/deploycoord            # embedded in-process Redis, state lost on exit
//	DEPLOYCOORD_REDIS_URL=redis://127.0.0.1:6379/0 deploycoord
//
// Every setting has a DEPLOYCOORD_* environment variable and an equivalent
// flag (deploycoord -h lists them).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// Version is the server's version, set at build time with
// -ldflags "-X main.Version=...".
var Version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := NewMain(os.Stdout, os.Stderr)
	if err := m.ParseFlags(os.Args[1:], os.Getenv); err != nil {
		if errors.Is(err, errHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "deploycoord:", err)
		os.Exit(2)
	}
	if err := m.Run(ctx); err != nil {
		m.Log.Error().Err(err).Msg("start failed")
		os.Exit(1)
	}
	<-ctx.Done()
	stop()
	m.Log.Info().Dur("grace", m.Config.ShutdownGrace).Msg("shutting down")
	if err := m.Close(); err != nil {
		m.Log.Error().Err(err).Msg("shutdown")
		os.Exit(1)
	}
}

var errHelp = errors.New("help requested")

// Main is the server program: ParseFlags, Run, then Close.
type Main struct {
	Config Config
	Log    zerolog.Logger
	// Addr is the address the API listens on once Run returns.
	Addr string

	stdout, stderr io.Writer
	mini           *miniredis.Miniredis
	stopMini       chan struct{}
	client         *redis.Client
	coord          *facade.Coordinator
	server         *http.Server
	served         chan error
}

// NewMain returns a Main writing logs to stdout and usage to stderr.
func NewMain(stdout, stderr io.Writer) *Main {
	return &Main{stdout: stdout, stderr: stderr, Log: zerolog.New(stdout)}
}

// ParseFlags reads the configuration from args and the environment.
func (m *Main) ParseFlags(args []string, getenv func(string) string) error {
	c, err := ParseConfig(args, getenv, m.stderr)
	if errors.Is(err, flag.ErrHelp) {
		return errHelp
	}
	if err != nil {
		return err
	}
	m.Config = c
	m.Log = newLogger(m.stdout, c)
	return nil
}

func newLogger(w io.Writer, c Config) zerolog.Logger {
	if c.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	lvl, err := zerolog.ParseLevel(c.LogLevel)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("instance", c.InstanceID).Logger()
}

// Run connects to Redis (or starts the embedded one), wires the coordinator
// and starts serving the API. It returns once the listener is open.
func (m *Main) Run(ctx context.Context) error {
	c := m.Config
	if err := m.openRedis(ctx); err != nil {
		return err
	}
	redisStore, err := repository.NewRedis(m.client, repository.Config{Prefix: c.KeyPrefix, TTL: c.TTL})
	if err != nil {
		return err
	}
	keys := redisStore.Keys()
	store := repository.NewDual(repository.NewMemory(repository.MemoryConfig{DropFinished: true}), redisStore)
	locks, err := tenantlock.New(m.client, tenantlock.Config{
		Lease:    c.LockLease,
		LockKey:  func(t string) string { k, _ := keys.Lock(t); return k },
		FenceKey: func(t string) string { k, _ := keys.Fence(t); return k },
	})
	if err != nil {
		return err
	}
	var pipelines map[string][]task.StageSpec
	if c.Pipelines != "" {
		if pipelines, err = LoadPipelines(c.Pipelines); err != nil {
			return err
		}
	}
	stageOpts := stage.Options{InlineKinds: c.InlineKinds, InlineHTTPHosts: c.InlineHTTPHosts, AllowExec: c.AllowExec}
	if err := stageOpts.Validate(); err != nil {
		return fmt.Errorf("stage settings: %w", err)
	}
	registry := stage.NewRegistry(stageOpts)
	log := m.Log
	m.coord, err = facade.New(store, locks, facade.Config{
		Instance: c.InstanceID, Lease: c.LockLease, Stages: registry, Pipelines: pipelines,
		MaxTenants: c.MaxTenants, Logger: &log,
	})
	if err != nil {
		return err
	}
	handler := httpapi.New(m.coord, httpapi.Config{
		Logger: &log, MaxBodyBytes: c.MaxBodyBytes, Version: Version,
		Ready:  func(ctx context.Context) error { return m.client.Ping(ctx).Err() },
		Tokens: c.Tokens, TrustedProxies: c.TrustedProxies, RateLimit: c.RateLimit, RateWindow: c.RateWindow,
		MaxInFlight: c.MaxInFlight, Idempotency: redisStore.Idempotency(), IdempotencyTTL: c.IdempotencyTTL,
	})
	if len(c.Tokens) == 0 {
		m.Log.Warn().Str("listen", c.Listen).Msg("no API tokens configured (DEPLOYCOORD_TOKENS_FILE, DEPLOYCOORD_TOKENS): " +
			"every request is served as \"anonymous\" with role operator; the API listens on loopback only")
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.Listen, err)
	}
	m.Addr = ln.Addr().String()
	m.server = httpapi.NewServer(m.Addr, handler, httpapi.ServerConfig{})
	m.served = make(chan error, 1)
	go func() { m.served <- m.server.Serve(ln) }()
	m.Log.Info().Str("addr", m.Addr).Str("version", Version).Str("key_prefix", c.KeyPrefix).
		Dur("lock_lease", c.LockLease).Int("pipelines", len(pipelines)).Msg("listening")
	return nil
}

func (m *Main) openRedis(ctx context.Context) error {
	url := m.Config.RedisURL
	if url == "" {
		m.mini = miniredis.NewMiniRedis()
		if err := m.mini.StartAddr("127.0.0.1:0"); err != nil {
			return fmt.Errorf("start embedded redis: %w", err)
		}
		m.stopMini = make(chan struct{})
		go m.tickMini()
		url = "redis://" + m.mini.Addr()
		m.Log.Warn().Str("addr", m.mini.Addr()).Msg("DEPLOYCOORD_REDIS_URL is empty: using an EMBEDDED in-process Redis. " +
			"State is NOT durable and NOT shared: it is lost when this process exits and other instances cannot see it. " +
			"Set DEPLOYCOORD_REDIS_URL=redis://host:6379/0 for anything but a demo.")
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return fmt.Errorf("DEPLOYCOORD_REDIS_URL: %w", err)
	}
	// Deadlines must reach the socket, or a hung Redis keeps a lease
	// renewal (and a stage boundary) waiting past the lease.
	opts.ContextTimeoutEnabled = true
	m.client = redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := m.client.Ping(pctx).Err(); err != nil {
		m.Log.Error().Err(err).Str("redis", opts.Addr).Msg("redis unreachable at start; queries will fail until it answers")
	}
	return nil
}

// tickMini moves the embedded Redis's clock with the wall clock, so TTLs
// (leases, record lifetimes) expire as they would on a real server.
func (m *Main) tickMini() {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-m.stopMini:
			return
		case now := <-tick.C:
			m.mini.FastForward(now.Sub(last))
			last = now
		}
	}
}

// Close stops taking requests and work, lets running stages finish within
// the shutdown grace period, leaves unfinished tasks PAUSED and their locks
// released, then closes the connections.
func (m *Main) Close() error {
	var errs []error
	if m.server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, m.server.Shutdown(ctx))
		cancel()
	}
	if m.coord != nil {
		ctx, cancel := context.WithTimeout(context.Background(), m.Config.ShutdownGrace)
		errs = append(errs, m.coord.Shutdown(ctx))
		cancel()
	}
	if m.client != nil {
		errs = append(errs, m.client.Close())
	}
	if m.mini != nil {
		close(m.stopMini)
		m.mini.Close()
	}
	return errors.Join(errs...)
}
