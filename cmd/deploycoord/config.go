package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/httpapi/console"
	"github.com/deploycoord/deploycoord/repository"
)

// Config is the server's configuration. Every field has an environment
// variable DEPLOYCOORD_* and an equivalent flag; a flag wins over the
// environment, which wins over the default.
type Config struct {
	Listen   string
	RedisURL string
	// RedisClusterAddrs are the seed nodes of a Redis Cluster;
	// RedisSentinelAddrs and RedisSentinelMaster name a master behind
	// Sentinel. At most one of RedisURL, RedisClusterAddrs and
	// RedisSentinelAddrs is set (none: the embedded Redis).
	RedisClusterAddrs   []string
	RedisSentinelAddrs  []string
	RedisSentinelMaster string
	// RedisUsername, RedisPassword and RedisTLS apply to a cluster's nodes
	// or to the master and replicas behind Sentinel (TLS to the sentinels
	// too); a REDIS_URL carries its own.
	RedisUsername string
	RedisPassword string
	RedisTLS      bool

	InstanceID      string
	KeyPrefix       string
	LockLease       time.Duration
	LegacyKeys      repository.LegacyKeys
	Pipelines       string
	InlineKinds     []string
	InlineHTTPHosts []string
	AllowExec       bool
	LogLevel        string
	LogFormat       string
	TTL             time.Duration
	ShutdownGrace   time.Duration
	MaxTenants      int
	MaxBodyBytes    int64

	// Tokens are the API tokens of DEPLOYCOORD_TOKENS and
	// DEPLOYCOORD_TOKENS_FILE, with only the SHA-256 of each secret.
	Tokens         []httpapi.Token
	TokensFile     string
	TrustedProxies []netip.Prefix
	// RateLimit changes per RateWindow and token (-1: no limit).
	RateLimit      int
	RateWindow     time.Duration
	MaxInFlight    int
	IdempotencyTTL time.Duration

	// SingleInstance selects the single-instance mode (docs/architecture.md): tenant
	// locks in process memory and writes queued in memory while Redis is
	// unreachable. Safe only with exactly one instance per Redis and key
	// prefix.
	SingleInstance bool
	// SharedPlans shares every plan's work among the live instances
	// (ignored in single-instance mode); PlanPoll is how often an instance
	// looks for running plans with work and re-reads the plans it runs.
	SharedPlans bool
	PlanPoll    time.Duration
	// AdvertiseAddr is the address shown for this instance in the instance
	// registry ("" means the address the API listens on).
	AdvertiseAddr string

	// UI serves the web console under /ui/ (GET / redirects there).
	UI bool
	// UIBasePath is the path prefix the console is reached under through a
	// reverse proxy ("" = none; like /deploycoord).
	UIBasePath string
}

// setting is one configuration entry: its flag name, environment variable,
// default and help, and how it is parsed into the Config.
type setting struct {
	flag, env, def, help string
	set                  func(c *Config, v string) error
}

func settings() []setting {
	return []setting{
		{"listen", "DEPLOYCOORD_LISTEN", "127.0.0.1:8080", "address the HTTP API listens on",
			func(c *Config, v string) error { c.Listen = v; return nil }},
		{"redis-url", "DEPLOYCOORD_REDIS_URL", "", "Redis URL (redis://host:6379/0); empty runs an embedded in-process Redis whose state is lost on exit",
			func(c *Config, v string) error { c.RedisURL = v; return nil }},
		{"redis-cluster-addrs", "DEPLOYCOORD_REDIS_CLUSTER_ADDRS", "", "Redis Cluster seed nodes, comma-separated host:port (instead of a Redis URL)",
			func(c *Config, v string) error { c.RedisClusterAddrs = splitList(v); return nil }},
		{"redis-sentinel-addrs", "DEPLOYCOORD_REDIS_SENTINEL_ADDRS", "", "Redis Sentinel addresses, comma-separated host:port (instead of a Redis URL; with -redis-sentinel-master)",
			func(c *Config, v string) error { c.RedisSentinelAddrs = splitList(v); return nil }},
		{"redis-sentinel-master", "DEPLOYCOORD_REDIS_SENTINEL_MASTER", "", "name of the master the sentinels monitor",
			func(c *Config, v string) error { c.RedisSentinelMaster = v; return nil }},
		{"redis-username", "DEPLOYCOORD_REDIS_USERNAME", "", "Redis ACL user of a cluster or of the master behind Sentinel (a Redis URL carries its own)",
			func(c *Config, v string) error { c.RedisUsername = v; return nil }},
		{"redis-password", "DEPLOYCOORD_REDIS_PASSWORD", "", "Redis password of a cluster or of the master behind Sentinel; a flag shows in process listings: prefer the variable",
			func(c *Config, v string) error { c.RedisPassword = v; return nil }},
		{"redis-tls", "DEPLOYCOORD_REDIS_TLS", "false", "TLS to a cluster's nodes, or to the sentinels and the master (a Redis URL says rediss://)",
			boolSetter(func(c *Config) *bool { return &c.RedisTLS })},
		{"instance-id", "DEPLOYCOORD_INSTANCE_ID", "", "this instance's id (default <hostname>-<pid>)",
			func(c *Config, v string) error { c.InstanceID = v; return nil }},
		{"key-prefix", "DEPLOYCOORD_KEY_PREFIX", "executor:", "prefix of every Redis key",
			func(c *Config, v string) error { c.KeyPrefix = v; return nil }},
		{"lock-lease", "DEPLOYCOORD_LOCK_LEASE", "60s", "tenant lock lease; a task whose owner is silent this long is orphaned",
			durationSetter(func(c *Config) *time.Duration { return &c.LockLease })},
		{"pipelines", "DEPLOYCOORD_PIPELINES", "", "YAML file of operator-defined pipelines",
			func(c *Config, v string) error { c.Pipelines = v; return nil }},
		{"inline-kinds", "DEPLOYCOORD_INLINE_KINDS", "noop,sleep,http", "stage kinds a plan may use inline (comma-separated)",
			func(c *Config, v string) error { c.InlineKinds = splitList(v); return nil }},
		{"inline-http-hosts", "DEPLOYCOORD_INLINE_HTTP_HOSTS", "", "hosts (host or host:port) inline http stages may call (comma-separated)",
			func(c *Config, v string) error { c.InlineHTTPHosts = splitList(v); return nil }},
		{"allow-exec", "DEPLOYCOORD_ALLOW_EXEC", "false", "enable the exec stage kind in operator-defined pipelines",
			boolSetter(func(c *Config) *bool { return &c.AllowExec })},
		{"log-level", "DEPLOYCOORD_LOG_LEVEL", "info", "debug, info, warn or error",
			func(c *Config, v string) error { c.LogLevel = v; return nil }},
		{"log-format", "DEPLOYCOORD_LOG_FORMAT", "json", "json or console",
			func(c *Config, v string) error { c.LogFormat = v; return nil }},
		{"ttl", "DEPLOYCOORD_TTL", "168h", "how long plans, tasks and checkpoints stay in Redis",
			durationSetter(func(c *Config) *time.Duration { return &c.TTL })},
		{"shutdown-grace", "DEPLOYCOORD_SHUTDOWN_GRACE", "30s", "how long running stages may finish after SIGTERM",
			durationSetter(func(c *Config) *time.Duration { return &c.ShutdownGrace })},
		{"max-tenants", "DEPLOYCOORD_MAX_TENANTS", "100000", "most tenants in one plan",
			func(c *Config, v string) error {
				n, err := strconv.Atoi(v)
				c.MaxTenants = n
				return err
			}},
		{"max-body-bytes", "DEPLOYCOORD_MAX_BODY_BYTES", "16777216", "largest plan creation request body",
			func(c *Config, v string) error {
				n, err := strconv.ParseInt(v, 10, 64)
				c.MaxBodyBytes = n
				return err
			}},
		{"tokens", "DEPLOYCOORD_TOKENS", "", "API tokens, comma-separated name:role:secret (role viewer or operator, secret of 16+ characters); a flag shows in process listings: prefer the file",
			func(c *Config, v string) (err error) { c.Tokens, err = parseTokenList(v); return err }},
		{"tokens-file", "DEPLOYCOORD_TOKENS_FILE", "", "file of API tokens, one name:role:secret a line (# comments)",
			func(c *Config, v string) error { c.TokensFile = v; return nil }},
		{"trusted-proxies", "DEPLOYCOORD_TRUSTED_PROXIES", "", "reverse proxies (IPs or CIDRs, comma-separated) whose X-Forwarded-For is believed",
			func(c *Config, v string) (err error) { c.TrustedProxies, err = parseProxies(v); return err }},
		{"rate-limit", "DEPLOYCOORD_RATE_LIMIT", "60/m", "changes (POST/DELETE) one token may send per window on one instance: <n>/<s|m|h|duration>, or off",
			func(c *Config, v string) (err error) { c.RateLimit, c.RateWindow, err = parseRate(v); return err }},
		{"max-in-flight", "DEPLOYCOORD_MAX_IN_FLIGHT", "256", "requests served at once; more are answered 503 (health checks exempt)",
			func(c *Config, v string) error {
				n, err := strconv.Atoi(v)
				c.MaxInFlight = n
				return err
			}},
		{"idempotency-ttl", "DEPLOYCOORD_IDEMPOTENCY_TTL", "24h", "how long the first answer to a request with an Idempotency-Key is replayed",
			durationSetter(func(c *Config) *time.Duration { return &c.IdempotencyTTL })},
		{"single-instance", "DEPLOYCOORD_SINGLE_INSTANCE", "false", "single-instance mode: in-process tenant locks, and writes queued in memory " +
			"while Redis is down (written back when it returns); ONLY safe with exactly one instance on this Redis and key prefix",
			boolSetter(func(c *Config) *bool { return &c.SingleInstance })},
		{"shared-plans", "DEPLOYCOORD_SHARED_PLANS", "true", "every live instance starts a running plan's tasks, under one maxConcurrency across instances " +
			"(false: the instance that starts a plan runs all of it); ignored in single-instance mode",
			boolSetter(func(c *Config) *bool { return &c.SharedPlans })},
		{"plan-poll", "DEPLOYCOORD_PLAN_POLL", "1s", "how often an instance looks for running plans with work to claim, and re-reads the plans it runs (pause, resume, cancel made elsewhere)",
			durationSetter(func(c *Config) *time.Duration { return &c.PlanPoll })},
		{"ui", "DEPLOYCOORD_UI", "true", "serve the web console under /ui/ (GET / redirects there); same tokens and roles as the API",
			boolSetter(func(c *Config) *bool { return &c.UI })},
		{"ui-base-path", "DEPLOYCOORD_UI_BASE_PATH", "", "path prefix of the web console behind a reverse proxy (like /deploycoord: links and cookies use /deploycoord/ui/)",
			func(c *Config, v string) error { c.UIBasePath = v; return nil }},
		{"legacy-keys", "DEPLOYCOORD_LEGACY_KEYS", "auto", "write the keys instances of older versions (storage layout 1) read: auto (while one is alive: rolling upgrades and downgrades; " +
			"turning them on backfills them), on (always), off",
			func(c *Config, v string) (err error) { c.LegacyKeys, err = repository.ParseLegacyKeys(v); return err }},
		{"advertise-addr", "DEPLOYCOORD_ADVERTISE_ADDR", "", "host:port shown for this instance in GET /v1/instances (default the address the API listens on)",
			func(c *Config, v string) error { c.AdvertiseAddr = v; return nil }},
	}
}

// boolSetter parses a boolean setting; its flag may be given bare
// (-allow-exec means -allow-exec=true) since its default is a boolean.
func boolSetter(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		*field(c) = b
		return err
	}
}

// flagValue is a setting's flag: a string, or a boolean flag that may be
// given without a value.
type flagValue struct {
	v      string
	isBool bool
}

func (f *flagValue) String() string { return f.v }

func (f *flagValue) Set(v string) error { f.v = v; return nil }

func (f *flagValue) IsBoolFlag() bool { return f.isBool }

func durationSetter(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		*field(c) = d
		return err
	}
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// ParseConfig reads the configuration from args and the environment getenv.
func ParseConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("deploycoord", flag.ContinueOnError)
	fs.SetOutput(stderr)
	values := map[string]*flagValue{}
	for _, s := range settings() {
		def := s.def
		if v, ok := lookup(getenv, s.env); ok {
			def = v
		}
		// A setting whose default is a boolean is a boolean flag.
		isBool := s.def == "true" || s.def == "false"
		values[s.flag] = &flagValue{v: def, isBool: isBool}
		fs.Var(values[s.flag], s.flag, fmt.Sprintf("%s (env %s)", s.help, s.env))
	}
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: deploycoord [flags]\n\nEvery flag has an environment variable; a flag wins over the environment.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var errs []error
	for _, s := range settings() {
		if err := s.set(&c, values[s.flag].v); err != nil {
			errs = append(errs, fmt.Errorf("%s / -%s: %w", s.env, s.flag, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	if err := c.loadTokensFile(); err != nil {
		return c, err
	}
	if c.InstanceID == "" {
		host, _ := os.Hostname()
		c.InstanceID = sanitizeID(fmt.Sprintf("%s-%d", host, os.Getpid()))
	}
	return c, c.validate()
}

func lookup(getenv func(string) string, key string) (string, bool) {
	v := getenv(key)
	return v, v != ""
}

// sanitizeID maps a host name to the instance id alphabet.
func sanitizeID(s string) string {
	b := []byte(s)
	for i, ch := range b {
		ok := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '.' || ch == '_' || ch == '-'
		if !ok {
			b[i] = '-'
		}
	}
	if len(b) > 128 {
		b = b[len(b)-128:]
	}
	if len(b) == 0 || !(b[0] >= 'a' && b[0] <= 'z' || b[0] >= 'A' && b[0] <= 'Z' || b[0] >= '0' && b[0] <= '9') {
		b = append([]byte("i"), b...)
	}
	return string(b)
}

func (c Config) validate() error {
	var errs []error
	errs = append(errs, c.validateRedis()...)
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("DEPLOYCOORD_LISTEN %q: %w", c.Listen, err))
	}
	if c.PlanPoll < 10*time.Millisecond || c.PlanPoll > time.Minute {
		errs = append(errs, fmt.Errorf("DEPLOYCOORD_PLAN_POLL %s: between 10ms and 1m", c.PlanPoll))
	}
	if c.LockLease < time.Second {
		errs = append(errs, fmt.Errorf("DEPLOYCOORD_LOCK_LEASE %s: at least 1s", c.LockLease))
	}
	if c.TTL < time.Hour {
		errs = append(errs, fmt.Errorf("DEPLOYCOORD_TTL %s: at least 1h", c.TTL))
	}
	if c.ShutdownGrace < 0 {
		errs = append(errs, fmt.Errorf("DEPLOYCOORD_SHUTDOWN_GRACE %s: must not be negative", c.ShutdownGrace))
	}
	if c.MaxTenants < 1 {
		errs = append(errs, fmt.Errorf("DEPLOYCOORD_MAX_TENANTS %d: at least 1", c.MaxTenants))
	}
	if c.MaxBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("DEPLOYCOORD_MAX_BODY_BYTES %d: at least 1024", c.MaxBodyBytes))
	}
	if c.MaxInFlight < 1 {
		errs = append(errs, fmt.Errorf("DEPLOYCOORD_MAX_IN_FLIGHT %d: at least 1", c.MaxInFlight))
	}
	if c.IdempotencyTTL < time.Minute {
		errs = append(errs, fmt.Errorf("DEPLOYCOORD_IDEMPOTENCY_TTL %s: at least 1m", c.IdempotencyTTL))
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := net.SplitHostPort(c.AdvertiseAddr); err != nil || len(c.AdvertiseAddr) > 256 || !printable(c.AdvertiseAddr) {
			errs = append(errs, fmt.Errorf("DEPLOYCOORD_ADVERTISE_ADDR %q: want host:port", c.AdvertiseAddr))
		}
	}
	if !console.BasePathValid(c.UIBasePath) {
		errs = append(errs, fmt.Errorf("DEPLOYCOORD_UI_BASE_PATH %q: want empty or a path like /deploycoord (letters, digits, . _ - ~; no trailing slash)", c.UIBasePath))
	}
	if err := checkExposure(c.Listen, len(c.Tokens)); err != nil {
		errs = append(errs, err)
	}
	switch c.LogFormat {
	case "json", "console":
	default:
		errs = append(errs, fmt.Errorf("DEPLOYCOORD_LOG_FORMAT %q: json or console", c.LogFormat))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("DEPLOYCOORD_LOG_LEVEL %q: debug, info, warn or error", c.LogLevel))
	}
	return errors.Join(errs...)
}

// printable reports whether s holds printable ASCII only, without spaces.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// validateRedis checks the Redis topology settings: at most one topology,
// well-formed addresses, credentials only where they apply.
func (c Config) validateRedis() []error {
	var errs []error
	var set []string
	if c.RedisURL != "" {
		set = append(set, "DEPLOYCOORD_REDIS_URL")
		if _, err := redis.ParseURL(c.RedisURL); err != nil {
			// The URL may hold a password: name the setting, not the value
			// (a *url.Error quotes the whole URL).
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			errs = append(errs, fmt.Errorf("DEPLOYCOORD_REDIS_URL: expected redis://host:port/db "+
				"(rediss:// for TLS, redis://user:password@host:port/db with credentials), like redis://127.0.0.1:6379/0: %w", err))
		}
	}
	if len(c.RedisClusterAddrs) > 0 {
		set = append(set, "DEPLOYCOORD_REDIS_CLUSTER_ADDRS")
	}
	if len(c.RedisSentinelAddrs) > 0 || c.RedisSentinelMaster != "" {
		set = append(set, "DEPLOYCOORD_REDIS_SENTINEL_ADDRS")
	}
	if len(set) > 1 {
		errs = append(errs, fmt.Errorf("%s are set: a Redis topology is one of DEPLOYCOORD_REDIS_URL (one Redis), "+
			"DEPLOYCOORD_REDIS_CLUSTER_ADDRS (Redis Cluster) or DEPLOYCOORD_REDIS_SENTINEL_ADDRS with "+
			"DEPLOYCOORD_REDIS_SENTINEL_MASTER (Sentinel); set only one", strings.Join(set, " and ")))
	}
	for _, a := range c.RedisClusterAddrs {
		if !validAddr(a) {
			errs = append(errs, fmt.Errorf("DEPLOYCOORD_REDIS_CLUSTER_ADDRS %q: want host:port", a))
		}
	}
	for _, a := range c.RedisSentinelAddrs {
		if !validAddr(a) {
			errs = append(errs, fmt.Errorf("DEPLOYCOORD_REDIS_SENTINEL_ADDRS %q: want host:port", a))
		}
	}
	switch {
	case len(c.RedisSentinelAddrs) > 0 && c.RedisSentinelMaster == "":
		errs = append(errs, errors.New("DEPLOYCOORD_REDIS_SENTINEL_ADDRS needs DEPLOYCOORD_REDIS_SENTINEL_MASTER, the name of the master the sentinels monitor"))
	case len(c.RedisSentinelAddrs) == 0 && c.RedisSentinelMaster != "":
		errs = append(errs, errors.New("DEPLOYCOORD_REDIS_SENTINEL_MASTER needs DEPLOYCOORD_REDIS_SENTINEL_ADDRS, the sentinels' host:port"))
	case c.RedisSentinelMaster != "" && (len(c.RedisSentinelMaster) > 128 || !printable(c.RedisSentinelMaster)):
		errs = append(errs, fmt.Errorf("DEPLOYCOORD_REDIS_SENTINEL_MASTER %q: want a name without spaces", c.RedisSentinelMaster))
	}
	if len(c.RedisClusterAddrs) == 0 && len(c.RedisSentinelAddrs) == 0 {
		for _, s := range []struct {
			env string
			set bool
		}{
			{"DEPLOYCOORD_REDIS_USERNAME", c.RedisUsername != ""},
			{"DEPLOYCOORD_REDIS_PASSWORD", c.RedisPassword != ""},
			{"DEPLOYCOORD_REDIS_TLS", c.RedisTLS},
		} {
			if s.set {
				errs = append(errs, fmt.Errorf("%s applies to DEPLOYCOORD_REDIS_CLUSTER_ADDRS or DEPLOYCOORD_REDIS_SENTINEL_ADDRS; "+
					"a DEPLOYCOORD_REDIS_URL carries its own (rediss://user:password@host:6379/0)", s.env))
			}
		}
	}
	return errs
}

// validAddr reports whether a is host:port with a port number.
func validAddr(a string) bool {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" || len(a) > 256 || !printable(a) {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n < 65536
}
