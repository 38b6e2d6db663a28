// Command deploycoord is the deployment coordinator server: it rolls plans
// out to tenants, keeps their state in Redis and serves the HTTP API.
//
//	go run ./cmd/deploycoord            # embedded in-process Redis, state lost on exit
//	DEPLOYCOORD_REDIS_URL=redis://127.0.0.1:6379/0 deploycoord
//	DEPLOYCOORD_REDIS_CLUSTER_ADDRS=10.0.0.1:6379,10.0.0.2:6379 deploycoord
//	DEPLOYCOORD_REDIS_SENTINEL_ADDRS=10.0.0.1:26379,10.0.0.2:26379 DEPLOYCOORD_REDIS_SENTINEL_MASTER=mymaster deploycoord
//
// Every setting has a DEPLOYCOORD_* environment variable and an equivalent
// flag (deploycoord -h lists them).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/mattn/go-isatty"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/httpapi/console"
	"github.com/deploycoord/deploycoord/httpapi/metrics"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
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
	setRedisLogger(m.Log)
	if err := m.Run(ctx); err != nil {
		m.Log.Error().Err(err).Msg("start failed")
		code := exitCode(err)
		if code == 2 {
			fmt.Fprintln(os.Stderr, "deploycoord:", err)
		}
		os.Exit(code)
	}
	<-ctx.Done()
	// A second SIGTERM or SIGINT from here on ends the process at once
	// (the signals' default action).
	stop()
	limit := shutdownLimit(m.Config.ShutdownGrace)
	m.Log.Info().Dur("grace", m.Config.ShutdownGrace).Dur("limit", limit).Msg("shutting down")
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			m.Log.Error().Err(err).Msg("shutdown")
			os.Exit(1)
		}
	case <-time.After(limit):
		// Redis does not answer (or a write hangs): every best-effort
		// step of the shutdown would wait out its own timeout. The process
		// goes now, as after a crash.
		m.Log.Error().Dur("limit", limit).Msg("shutdown cut short: the last writes did not finish within the shutdown limit (is Redis answering?); " +
			"tasks this instance ran and could not write PAUSED stay RUNNING under its id, their locks expire with their lease, and they show orphaned: retry them")
		os.Exit(1)
	}
}

// shutdownLastWrites is what a shutdown is given, past the grace period and
// the HTTP drain, for its last writes: the tasks and plans written PAUSED,
// the locks released, the feed flushed, the instance deregistered.
const shutdownLastWrites = 10 * time.Second

// shutdownLimit is how long the process may take after SIGTERM before it
// exits whatever is left undone.
func shutdownLimit(grace time.Duration) time.Duration {
	return grace + httpShutdownTimeout + shutdownLastWrites
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
	// closeOnce makes Close safe to call again (its first answer).
	closeOnce sync.Once
	closeErr  error
	// client is a *redis.Client (a URL, the embedded Redis, or Sentinel's
	// failover client) or a *redis.ClusterClient; redisAddr names it in
	// logs (no credentials), redisPool is its pool size (per node on a
	// cluster).
	client    redis.UniversalClient
	redisAddr string
	redisPool int
	// runIDs is the coordinator once it exists, for the run-id check of
	// new connections (they are made by go-redis' goroutines).
	runIDs atomic.Pointer[facade.Coordinator]
	store  *repository.Dual
	coord  *facade.Coordinator
	server *http.Server
	served chan error
	// metrics is what the server measures (GET /metrics); selfCheck the
	// Redis self-check GET /readyz shows.
	metrics   *metrics.Recorder
	registry  *prometheus.Registry
	selfCheck *selfCheck
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

// terminal reports whether w is a terminal (what answers the terminal
// ioctl, not any character device).
func terminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

func newLogger(w io.Writer, c Config) zerolog.Logger {
	if c.LogFormat == "console" {
		// Colour codes only on a terminal: in a file or a pipe they are noise.
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !terminal(w)}
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
	m.registry = prometheus.NewRegistry()
	m.metrics = metrics.New(m.registry)
	if err := m.openRedis(ctx); err != nil {
		return err
	}
	redisStore, err := repository.NewRedis(m.client, repository.Config{Prefix: c.KeyPrefix, TTL: c.TTL, LockLease: c.LockLease,
		LegacyKeys: c.LegacyKeys, OnLegacyBackfill: m.logLegacyBackfill})
	if err != nil {
		return err
	}
	m.selfCheck = &selfCheck{info: redisStore.ServerInfo, every: selfCheckEvery}
	m.checkRedis(ctx)
	keys := redisStore.Keys()
	log := m.Log
	var (
		locks   *redislock.Locker
		dualCfg repository.DualConfig
	)
	if c.SingleInstance {
		m.Log.Warn().Str("key_prefix", c.KeyPrefix).Msg("SINGLE-INSTANCE MODE (DEPLOYCOORD_SINGLE_INSTANCE=true): tenant locks live in " +
			"this process and writes are queued in memory while Redis is unreachable. This is safe ONLY with exactly ONE " +
			"deploycoord instance on this Redis and key prefix: a second instance would deploy the same tenants at the same time.")
		locks, err = redislock.NewLocal(redislock.LocalConfig{Lease: c.LockLease, OnRenew: m.metrics.LeaseRenewed})
		dualCfg = repository.DualConfig{SingleInstance: true, OnReplayError: func(err error) {
			log.Error().Err(err).Msg("redis refused a queued write when it was written back; the write is dropped")
		}}
		m.warnOtherInstances(ctx, redisStore)
	} else {
		locks, err = redislock.New(m.client, redislock.Config{
			Lease:    c.LockLease,
			LockKey:  func(t string) string { k, _ := keys.Lock(t); return k },
			FenceKey: func(t string) string { k, _ := keys.Fence(t); return k },
			OnRenew:  m.metrics.LeaseRenewed,
		})
	}
	if err != nil {
		return err
	}
	// With shared plans, other instances run this one's plans: memory's
	// copies of them answer no degraded read (repository.DualConfig).
	dualCfg.SharedWork = c.SharedPlans && !c.SingleInstance
	dualCfg.Lease = c.LockLease
	m.store = repository.NewDual(repository.NewMemory(repository.MemoryConfig{DropFinished: true}), redisStore, dualCfg)
	// Stopped by Close (after the coordinator), not by ctx: queued writes
	// must be written back as long as the coordinator may still make them.
	m.store.Start(context.Background())
	var pipelines map[string][]task.StageSpec
	if c.Pipelines != "" {
		if pipelines, err = LoadPipelines(c.Pipelines); err != nil {
			return err
		}
	}
	stageOpts := stage.Options{InlineKinds: c.InlineKinds, InlineHTTPHosts: c.InlineHTTPHosts, AllowExec: c.AllowExec,
		InlineHTTPHostsSetting: "DEPLOYCOORD_INLINE_HTTP_HOSTS"}
	if err := stageOpts.Validate(); err != nil {
		return fmt.Errorf("stage settings: %w", err)
	}
	registry := stage.NewRegistry(stageOpts)
	// Listen before the coordinator starts: its first heartbeat advertises
	// the address, which is known only now when the port is 0.
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.Listen, err)
	}
	m.Addr = ln.Addr().String()
	advertise := c.AdvertiseAddr
	if advertise == "" {
		advertise = m.Addr
	}
	m.coord, err = facade.New(m.store, locks, facade.Config{
		Instance: c.InstanceID, Lease: c.LockLease, Stages: registry, Pipelines: pipelines,
		MaxTenants: c.MaxTenants, Logger: &log, Observer: m.metrics,
		Addr: advertise, Version: Version, SingleInstance: c.SingleInstance, ServerRunID: m.store.ServerRunID,
		SharedPlans: c.SharedPlans && !c.SingleInstance, PlanPoll: c.PlanPoll,
	})
	if err != nil {
		_ = ln.Close()
		return err
	}
	m.runIDs.Store(m.coord)
	m.metrics.Watch(metrics.State{Plans: m.coord, Degraded: m.store.Degraded, LongStages: m.coord.LongStages, LegacyKeys: redisStore.LegacyKeysOn})
	var (
		mounts []httpapi.Mount
		home   string
		con    *console.Console
	)
	if c.UI {
		con, err = console.New(m.coord, console.Config{BasePath: c.UIBasePath, Tokens: c.Tokens, Logger: &log, Version: Version})
		if err != nil {
			_ = ln.Close()
			return err
		}
		for _, p := range con.Paths() {
			mounts = append(mounts, httpapi.Mount{Path: p, Handler: con})
		}
		home = con.Home()
	}
	handler := httpapi.New(m.coord, httpapi.Config{
		Logger: &log, MaxBodyBytes: c.MaxBodyBytes, Version: Version,
		Ready:       m.ping,
		ReadyDetail: m.readyDetail,
		Tokens:      c.Tokens, TrustedProxies: c.TrustedProxies, RateLimit: c.RateLimit, RateWindow: c.RateWindow,
		MaxInFlight: c.MaxInFlight, Idempotency: redisStore.Idempotency(), IdempotencyTTL: c.IdempotencyTTL,
		Metrics: promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}), Observe: m.metrics.Observe,
		MaxLongPolls: httpapi.MaxLongPollsDefault,
		Mounts:       mounts, Home: home,
	})
	if len(c.Tokens) == 0 {
		m.Log.Warn().Str("listen", c.Listen).Msg("no API tokens configured (DEPLOYCOORD_TOKENS_FILE, DEPLOYCOORD_TOKENS): " +
			"every request is served as \"anonymous\" with role operator; the API listens on loopback only")
	}
	m.server = httpapi.NewServer(m.Addr, handler, httpapi.ServerConfig{})
	if con != nil {
		// Open console pages hold event streams: end them, or a shutdown
		// waits for them.
		m.server.RegisterOnShutdown(con.Close)
	}
	m.served = make(chan error, 1)
	go func() { m.served <- m.server.Serve(ln) }()
	m.Log.Info().Str("addr", m.Addr).Str("advertise_addr", advertise).Str("version", Version).Str("key_prefix", c.KeyPrefix).
		Dur("lock_lease", c.LockLease).Int("pipelines", len(pipelines)).Bool("single_instance", c.SingleInstance).Bool("shared_plans", c.SharedPlans && !c.SingleInstance).
		Str("redis", m.redisAddr).Int("redis_pool_size", m.redisPool).Str("console", home).Bool("starts_take_lock", m.coord.StartsTakeLock()).Str("legacy_keys", string(c.LegacyKeys)).Msg("listening")
	return nil
}

// selfCheckEvery is how often GET /readyz reads the Redis settings again.
const selfCheckEvery = 5 * time.Second

// checkRedis runs the Redis self-check at start and logs each warning.
func (m *Main) checkRedis(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := m.selfCheck.run(ctx)
	if err != nil {
		m.Log.Warn().Err(err).Msg("redis self-check failed; retried by /readyz")
		return
	}
	for _, w := range info.Warnings() {
		m.Log.Warn().Str("warning", w).Str("redis_version", info.Version).Msg("redis self-check")
	}
}

// logLegacyBackfill logs a backfill of the keys instances of storage
// layout 1 read (repository.Config.OnLegacyBackfill).
func (m *Main) logLegacyBackfill(b repository.LegacyBackfill, err error) {
	switch {
	case err != nil:
		m.Log.Warn().Err(err).Msg("backfill of the keys older instances read (storage layout 1) failed; tried again at the next heartbeat")
	case b.Skipped:
		m.Log.Info().Msg("keys older instances read (storage layout 1): another instance backfilled them within 10m")
	default:
		m.Log.Info().Int("tenant_indexes", b.Tenants).Int("taskrefs", b.Tasks).Msg("backfilled the keys older instances read (storage layout 1)")
	}
}

// warnOtherInstances logs an error for every other instance alive on this
// Redis and key prefix: single-instance mode is not safe with them.
func (m *Main) warnOtherInstances(ctx context.Context, r *repository.Redis) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	insts, err := r.Instances(ctx)
	if err != nil {
		return
	}
	for _, in := range insts {
		if in.ID != m.Config.InstanceID && in.Alive(time.Now(), m.Config.LockLease) {
			m.Log.Error().Str("other_instance", in.ID).Str("other_addr", in.Addr).
				Msg("single-instance mode, but another instance is alive on this Redis and key prefix: stop one of them")
		}
	}
}

// readyDetail is the storage state GET /readyz shows.
func (m *Main) readyDetail(ctx context.Context) httpapi.ReadyChecks {
	return httpapi.ReadyChecks{Degraded: m.store.Degraded(), PendingWrites: m.store.Pending(), SelfCheck: m.selfCheck.report(ctx)}
}

// selfCheck keeps the Redis self-check (repository.ServerInfo): run at
// start, read again by GET /readyz at most every `every`. It remembers the
// server's first run id to tell a restart.
type selfCheck struct {
	info  func(context.Context) (repository.ServerInfo, error)
	every time.Duration

	mu       sync.Mutex
	tried    time.Time
	firstRun string
	last     httpapi.SelfCheck
}

// run reads the server's settings now.
func (s *selfCheck) run(ctx context.Context) (repository.ServerInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runLocked(ctx)
}

func (s *selfCheck) runLocked(ctx context.Context) (repository.ServerInfo, error) {
	s.tried = time.Now()
	info, err := s.info(ctx)
	if err != nil {
		s.last.Error = err.Error()
		return info, err
	}
	now := time.Now().UTC()
	if s.firstRun == "" {
		s.firstRun = info.RunID
	}
	restarted := s.last.Restarted || (info.RunID != "" && info.RunID != s.firstRun)
	s.last = httpapi.SelfCheck{Warnings: info.Warnings(), RedisVersion: info.Version, RunID: info.RunID,
		Restarted: restarted, CheckedAt: &now}
	if s.last.Warnings == nil {
		s.last.Warnings = []string{}
	}
	return info, nil
}

// report returns the last self-check, read again first when it is older
// than s.every (or failed).
func (s *selfCheck) report(ctx context.Context) *httpapi.SelfCheck {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.tried) >= s.every || (s.last.Error != "" && time.Since(s.tried) >= time.Second) {
		_, _ = s.runLocked(ctx)
	}
	out := s.last
	out.Warnings = append([]string{}, s.last.Warnings...)
	return &out
}

func (m *Main) openRedis(ctx context.Context) error {
	c := m.Config
	switch {
	case len(c.RedisClusterAddrs) > 0:
		// PoolSize is per node; MaxRedirects is go-redis' default (3): a
		// MOVED or ASK during a reshard is followed by the client.
		m.client = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: c.RedisClusterAddrs, Username: c.RedisUsername, Password: c.RedisPassword, TLSConfig: m.redisTLS(),
			ContextTimeoutEnabled: true, PoolSize: redisPoolSize(),
		})
		m.redisAddr = strings.Join(c.RedisClusterAddrs, ",")
	case len(c.RedisSentinelAddrs) > 0:
		// The failover client asks the sentinels for the master and follows
		// a failover (+switch-master); no command goes to a replica.
		m.client = redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: c.RedisSentinelMaster, SentinelAddrs: c.RedisSentinelAddrs,
			Username: c.RedisUsername, Password: c.RedisPassword, TLSConfig: m.redisTLS(),
			ContextTimeoutEnabled: true, PoolSize: redisPoolSize(),
			OnConnect: repository.RunIDOnConnect(m.observeRunID),
		})
		m.redisAddr = c.RedisSentinelMaster + "@" + strings.Join(c.RedisSentinelAddrs, ",")
	default:
		if err := m.openURL(); err != nil {
			return err
		}
	}
	m.redisPool = redisPoolSize()
	if o, ok := m.client.(*redis.Client); ok {
		m.redisPool = o.Options().PoolSize
	}
	m.client.AddHook(repository.NewCommandHook(m.metrics.RedisCommand))
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := m.ping(pctx); err != nil {
		if refused(err) {
			return &configError{fmt.Errorf("redis at %s answers but refuses this configuration (check the database number, "+
				"user and password of the Redis settings): %w", m.redisAddr, err)}
		}
		m.Log.Error().Err(err).Str("redis", m.redisAddr).Msg("redis unreachable at start; queries will fail until it answers")
	}
	return nil
}

// configError is a start-up failure caused by the configuration, not by the
// moment: main exits 2 with it, like a bad setting.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// refused reports whether err is Redis answering a connection's set-up with
// an error of configuration: a database number out of range, a wrong or
// missing password, an ACL user without the right. Waiting will not change
// those; LOADING, BUSY, MASTERDOWN and the like are passing and are not
// matched.
func refused(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	for _, p := range []string{"ERR ", "WRONGPASS", "NOAUTH", "NOPERM"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// exitCode is the exit status of a Run error: 2 for a configuration error
// (as for a bad setting), 1 otherwise.
func exitCode(err error) int {
	var ce *configError
	if errors.As(err, &ce) {
		return 2
	}
	return 1
}

// redisTLS is the TLS configuration of a cluster or Sentinel connection
// (nil without DEPLOYCOORD_REDIS_TLS). The server name is each address's
// host.
func (m *Main) redisTLS() *tls.Config {
	if !m.Config.RedisTLS {
		return nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12}
}

// openURL connects to DEPLOYCOORD_REDIS_URL, or starts the embedded Redis
// when it is empty.
func (m *Main) openURL() error {
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
	// Long polls of the event feed each hold a connection while they wait
	// (at most httpapi.MaxLongPollsDefault at once): the pool gets that many
	// on top of go-redis' default (10 per GOMAXPROCS), so they cannot starve
	// task writes and lease renewals. A pool_size in the URL wins. The read
	// timeout (3s, or read_timeout in the URL) does not cut them short:
	// go-redis reads a blocking XREAD for its block time plus 10s.
	if opts.PoolSize == 0 {
		opts.PoolSize = redisPoolSize()
	}
	opts.OnConnect = repository.RunIDOnConnect(m.observeRunID)
	m.client = redis.NewClient(opts)
	m.redisAddr = opts.Addr
	return nil
}

// observeRunID hands the run id a new Redis connection found to the
// coordinator (facade.Coordinator.ObserveRunID), once there is one: after a
// restart or a failover the change is seen on the first new connection,
// before it carries a write, not up to a second later by the periodic
// check. (A cluster has only the periodic check, of every master.)
func (m *Main) observeRunID(id string) {
	if c := m.runIDs.Load(); c != nil {
		c.ObserveRunID(id)
	}
}

// ping checks that Redis answers: every master of a cluster (a PING to
// one node says nothing of the others' slots) with the cluster serving
// every slot (CLUSTER INFO), the master behind Sentinel.
func (m *Main) ping(ctx context.Context) error {
	if cc, ok := m.client.(*redis.ClusterClient); ok {
		// Every master answering is not enough: with a slot unserved (a
		// master lost, a slot deleted) the cluster refuses commands
		// (CLUSTERDOWN) while its masters still answer PING.
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil && (strings.HasPrefix(err.Error(), "NOPERM") || strings.HasPrefix(err.Error(), "ERR unknown command")) {
				// A user not allowed CLUSTER INFO (or a renamed command):
				// whether it answers is all that can be told.
				info, err = "cluster_state:ok", c.Ping(ctx).Err()
			}
			if err != nil {
				return fmt.Errorf("master %s: %w", c.Options().Addr, err)
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("master %s: cluster_state is not ok: the cluster does not serve every slot (commands get CLUSTERDOWN)", c.Options().Addr)
			}
			return nil
		})
	}
	return m.client.Ping(ctx).Err()
}

// redisPoolSize is the default size of the Redis connection pool: go-redis'
// default plus one connection per long poll the API may hold.
func redisPoolSize() int { return 10*runtime.GOMAXPROCS(0) + httpapi.MaxLongPollsDefault }

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

// httpShutdownTimeout bounds the wait for the API's requests in flight at
// shutdown.
const httpShutdownTimeout = 5 * time.Second

// shutdownMoment is the least the coordinator's shutdown is given after the
// HTTP drain, the grace spent or not.
const shutdownMoment = 100 * time.Millisecond

// Close stops taking requests and work, lets running stages finish within
// the shutdown grace period, leaves unfinished tasks PAUSED and their locks
// released, then closes the connections. Calls after the first return its
// answer.
func (m *Main) Close() error {
	m.closeOnce.Do(func() { m.closeErr = m.close() })
	return m.closeErr
}

func (m *Main) close() error {
	var errs []error
	// The grace period runs from the signal, and the instance stops taking
	// work at once: draining the HTTP connections below may take up to
	// httpShutdownTimeout, during which it would otherwise claim and start
	// tasks of shared plans.
	graceEnds := time.Now().Add(m.Config.ShutdownGrace)
	if m.coord != nil {
		m.coord.BeginShutdown()
	}
	if m.server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
		err := m.server.Shutdown(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			// Requests still running, or connections that never sent one
			// (net/http counts a new connection as active for 5 s: a
			// client's spare dial, a load balancer's probe): the process
			// is going away, they are cut, and that is no failed shutdown.
			m.Log.Warn().Dur("after", httpShutdownTimeout).Msg("HTTP connections still open at shutdown; closed")
			_ = m.server.Close()
			err = nil
		}
		errs = append(errs, err)
	}
	if m.coord != nil {
		// What is left of the grace — at least a moment, so that runs that
		// ended during the drain are seen ended rather than interrupted.
		ctx, cancel := context.WithTimeout(context.Background(), max(time.Until(graceEnds), shutdownMoment))
		errs = append(errs, m.coord.Shutdown(ctx))
		cancel()
	}
	if m.store != nil {
		// Single-instance mode: a last attempt to write queued writes back.
		errs = append(errs, m.store.Close())
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
