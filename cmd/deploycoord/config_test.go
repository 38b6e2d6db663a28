package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
)

// env returns a getenv over kv pairs ("KEY=value").
func env(kv ...string) func(string) string {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

func TestParseConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(nil, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"Listen", c.Listen, "127.0.0.1:8080"},
		{"RedisURL", c.RedisURL, ""},
		{"KeyPrefix", c.KeyPrefix, "executor:"},
		{"LockLease", c.LockLease, 60 * time.Second},
		{"Pipelines", c.Pipelines, ""},
		{"InlineKinds", strings.Join(c.InlineKinds, ","), "noop,sleep,http"},
		{"InlineHTTPHosts", len(c.InlineHTTPHosts), 0},
		{"AllowExec", c.AllowExec, false},
		{"LogLevel", c.LogLevel, "info"},
		{"LogFormat", c.LogFormat, "json"},
		{"TTL", c.TTL, 7 * 24 * time.Hour},
		{"ShutdownGrace", c.ShutdownGrace, 30 * time.Second},
		{"MaxTenants", c.MaxTenants, 100_000},
		{"MaxBodyBytes", c.MaxBodyBytes, int64(16 << 20)},
		{"UI", c.UI, true},
		{"UIBasePath", c.UIBasePath, ""},
		{"LegacyKeys", c.LegacyKeys, repository.LegacyKeysAuto},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("default %s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	if !task.ValidInstanceID(c.InstanceID) {
		t.Errorf("default instance id %q is not a valid instance id", c.InstanceID)
	}
}

func TestParseConfigSources(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  []string
		env   []string
		check func(t *testing.T, c Config)
	}{
		{"EnvSetsEverySetting", nil, []string{
			"DEPLOYCOORD_LISTEN=127.0.0.1:9999", "DEPLOYCOORD_REDIS_URL=redis://10.0.0.1:6379/2",
			"DEPLOYCOORD_INSTANCE_ID=coord-x", "DEPLOYCOORD_KEY_PREFIX=prod:executor:",
			"DEPLOYCOORD_LOCK_LEASE=5s", "DEPLOYCOORD_PIPELINES=/etc/deploycoord/pipelines.yaml",
			"DEPLOYCOORD_INLINE_KINDS=noop, sleep", "DEPLOYCOORD_INLINE_HTTP_HOSTS=cfg.internal:8443, 127.0.0.1",
			"DEPLOYCOORD_ALLOW_EXEC=true", "DEPLOYCOORD_LOG_LEVEL=debug", "DEPLOYCOORD_LOG_FORMAT=console",
			"DEPLOYCOORD_TTL=48h", "DEPLOYCOORD_SHUTDOWN_GRACE=0s", "DEPLOYCOORD_MAX_TENANTS=50",
			"DEPLOYCOORD_MAX_BODY_BYTES=2048",
		}, func(t *testing.T, c Config) {
			want := Config{
				Listen: "127.0.0.1:9999", RedisURL: "redis://10.0.0.1:6379/2", InstanceID: "coord-x",
				KeyPrefix: "prod:executor:", LockLease: 5 * time.Second, Pipelines: "/etc/deploycoord/pipelines.yaml",
				AllowExec: true, LogLevel: "debug", LogFormat: "console", TTL: 48 * time.Hour,
				ShutdownGrace: 0, MaxTenants: 50, MaxBodyBytes: 2048,
			}
			if c.Listen != want.Listen || c.RedisURL != want.RedisURL || c.InstanceID != want.InstanceID ||
				c.KeyPrefix != want.KeyPrefix || c.LockLease != want.LockLease || c.Pipelines != want.Pipelines ||
				c.AllowExec != want.AllowExec || c.LogLevel != want.LogLevel || c.LogFormat != want.LogFormat ||
				c.TTL != want.TTL || c.ShutdownGrace != want.ShutdownGrace || c.MaxTenants != want.MaxTenants ||
				c.MaxBodyBytes != want.MaxBodyBytes {
				t.Errorf("config from env:\n got %+v\nwant %+v", c, want)
			}
			if !slices.Equal(c.InlineKinds, []string{"noop", "sleep"}) {
				t.Errorf("inline kinds %q, want [noop sleep] (spaces trimmed)", c.InlineKinds)
			}
			if !slices.Equal(c.InlineHTTPHosts, []string{"cfg.internal:8443", "127.0.0.1"}) {
				t.Errorf("inline http hosts %q", c.InlineHTTPHosts)
			}
		}},
		{"SharedPlansAndPlanPoll", []string{"-plan-poll", "250ms"}, []string{"DEPLOYCOORD_SHARED_PLANS=false", "DEPLOYCOORD_PLAN_POLL=5s"},
			func(t *testing.T, c Config) {
				if c.SharedPlans || c.PlanPoll != 250*time.Millisecond {
					t.Errorf("shared plans %v, plan poll %s; want false, 250ms (the flag wins)", c.SharedPlans, c.PlanPoll)
				}
			}},
		{"SharedPlansByDefault", nil, nil, func(t *testing.T, c Config) {
			if !c.SharedPlans || c.PlanPoll != time.Second {
				t.Errorf("shared plans %v, plan poll %s; want true, 1s", c.SharedPlans, c.PlanPoll)
			}
		}},
		{"FlagWinsOverEnv", []string{"-lock-lease", "7s", "-instance-id=coord-flag", "-allow-exec=false"},
			[]string{"DEPLOYCOORD_LOCK_LEASE=5s", "DEPLOYCOORD_INSTANCE_ID=coord-env", "DEPLOYCOORD_ALLOW_EXEC=1", "DEPLOYCOORD_TTL=2h"},
			func(t *testing.T, c Config) {
				if c.LockLease != 7*time.Second || c.InstanceID != "coord-flag" || c.AllowExec {
					t.Errorf("flags should win: lease %s instance %s allowExec %v", c.LockLease, c.InstanceID, c.AllowExec)
				}
				if c.TTL != 2*time.Hour {
					t.Errorf("env without a flag should apply: ttl %s, want 2h", c.TTL)
				}
			}},
		{"LegacyKeys", []string{"-legacy-keys", "off"}, []string{"DEPLOYCOORD_LEGACY_KEYS=on"},
			func(t *testing.T, c Config) {
				if c.LegacyKeys != repository.LegacyKeysOff {
					t.Errorf("legacy keys %q, want the flag's off", c.LegacyKeys)
				}
			}},
		{"LegacyKeysFromEnv", nil, []string{"DEPLOYCOORD_LEGACY_KEYS=on"},
			func(t *testing.T, c Config) {
				if c.LegacyKeys != repository.LegacyKeysOn {
					t.Errorf("legacy keys %q, want on", c.LegacyKeys)
				}
			}},
		{"EmptyEnvMeansDefault", nil, []string{"DEPLOYCOORD_KEY_PREFIX=", "DEPLOYCOORD_LOCK_LEASE="},
			func(t *testing.T, c Config) {
				if c.KeyPrefix != "executor:" || c.LockLease != time.Minute {
					t.Errorf("empty variables should mean the default: prefix %q lease %s", c.KeyPrefix, c.LockLease)
				}
			}},
		{"UISettings", []string{"-ui=false"}, []string{"DEPLOYCOORD_UI=true", "DEPLOYCOORD_UI_BASE_PATH=/ops/deploycoord"},
			func(t *testing.T, c Config) {
				if c.UI || c.UIBasePath != "/ops/deploycoord" {
					t.Errorf("ui %v base path %q, want false (the flag wins) and /ops/deploycoord", c.UI, c.UIBasePath)
				}
			}},
		{"EmptyInlineKindsAllowsNone", []string{"-inline-kinds", ""}, nil,
			func(t *testing.T, c Config) {
				if len(c.InlineKinds) != 0 {
					t.Errorf("inline kinds %q, want none", c.InlineKinds)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := ParseConfig(tt.args, env(tt.env...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		env  []string
		want []string // every part must be in the error
	}{
		{"ErrListen", []string{"-listen", "8080"}, nil, []string{"DEPLOYCOORD_LISTEN", `"8080"`}},
		{"ErrLockLeaseTooShort", nil, []string{"DEPLOYCOORD_LOCK_LEASE=500ms"}, []string{"DEPLOYCOORD_LOCK_LEASE", "at least 1s"}},
		{"ErrLockLeaseNotADuration", nil, []string{"DEPLOYCOORD_LOCK_LEASE=60"}, []string{"DEPLOYCOORD_LOCK_LEASE / -lock-lease", "missing unit"}},
		{"ErrTTLTooShort", []string{"-ttl", "30m"}, nil, []string{"DEPLOYCOORD_TTL", "at least 1h"}},
		{"ErrShutdownGraceNegative", []string{"-shutdown-grace=-1s"}, nil, []string{"DEPLOYCOORD_SHUTDOWN_GRACE", "negative"}},
		{"ErrMaxTenantsZero", nil, []string{"DEPLOYCOORD_MAX_TENANTS=0"}, []string{"DEPLOYCOORD_MAX_TENANTS", "at least 1"}},
		{"ErrMaxTenantsNotANumber", nil, []string{"DEPLOYCOORD_MAX_TENANTS=lots"}, []string{"DEPLOYCOORD_MAX_TENANTS / -max-tenants", "invalid syntax"}},
		{"ErrMaxBodyBytesTooSmall", []string{"-max-body-bytes", "100"}, nil, []string{"DEPLOYCOORD_MAX_BODY_BYTES", "at least 1024"}},
		{"ErrMaxBodyBytesNotANumber", []string{"-max-body-bytes", "1MB"}, nil, []string{"DEPLOYCOORD_MAX_BODY_BYTES / -max-body-bytes"}},
		{"ErrAllowExecNotABool", nil, []string{"DEPLOYCOORD_ALLOW_EXEC=yes"}, []string{"DEPLOYCOORD_ALLOW_EXEC / -allow-exec"}},
		{"ErrLogFormat", []string{"-log-format", "xml"}, nil, []string{"DEPLOYCOORD_LOG_FORMAT", "json or console"}},
		{"ErrLogLevel", nil, []string{"DEPLOYCOORD_LOG_LEVEL=trace"}, []string{"DEPLOYCOORD_LOG_LEVEL", "debug, info, warn or error"}},
		{"ErrUIBasePathTrailingSlash", nil, []string{"DEPLOYCOORD_UI_BASE_PATH=/deploycoord/"}, []string{"DEPLOYCOORD_UI_BASE_PATH", "no trailing slash"}},
		{"ErrUIBasePathRelative", []string{"-ui-base-path", "deploycoord"}, nil, []string{"DEPLOYCOORD_UI_BASE_PATH"}},
		{"ErrUIBasePathHostile", []string{"-ui-base-path", `/a"><script>`}, nil, []string{"DEPLOYCOORD_UI_BASE_PATH"}},
		{"ErrUINotABool", nil, []string{"DEPLOYCOORD_UI=off"}, []string{"DEPLOYCOORD_UI / -ui"}},
		{"ErrPlanPollZero", nil, []string{"DEPLOYCOORD_PLAN_POLL=0s"}, []string{"DEPLOYCOORD_PLAN_POLL", "between 10ms and 1m"}},
		{"ErrPlanPollNegative", []string{"-plan-poll=-1s"}, nil, []string{"DEPLOYCOORD_PLAN_POLL", "between 10ms and 1m"}},
		{"ErrPlanPollTooLong", []string{"-plan-poll", "2m"}, nil, []string{"DEPLOYCOORD_PLAN_POLL", "between 10ms and 1m"}},
		{"ErrPlanPollNotADuration", nil, []string{"DEPLOYCOORD_PLAN_POLL=1\n"}, []string{"DEPLOYCOORD_PLAN_POLL / -plan-poll"}},
		{"ErrSharedPlansNotABool", nil, []string{"DEPLOYCOORD_SHARED_PLANS=yes"}, []string{"DEPLOYCOORD_SHARED_PLANS / -shared-plans"}},
		{"ErrLegacyKeys", nil, []string{"DEPLOYCOORD_LEGACY_KEYS=yes"}, []string{"DEPLOYCOORD_LEGACY_KEYS / -legacy-keys", `"yes"`, "auto, on or off"}},
		{"ErrLegacyKeysCase", []string{"-legacy-keys", "AUTO"}, nil, []string{"DEPLOYCOORD_LEGACY_KEYS / -legacy-keys", "auto, on or off"}},
		{"ErrLegacyKeysHostile", []string{"-legacy-keys", "on\x00{x}*"}, nil, []string{"DEPLOYCOORD_LEGACY_KEYS / -legacy-keys", "auto, on or off"}},
		{"ErrUnexpectedArguments", []string{"serve"}, nil, []string{"unexpected arguments", "serve"}},
		{"ErrUnknownFlag", []string{"-no-such-flag"}, nil, []string{"no-such-flag"}},
		{"ErrSeveralAtOnce", []string{"-ttl", "1m", "-log-level", "loud"}, nil, []string{"DEPLOYCOORD_TTL", "DEPLOYCOORD_LOG_LEVEL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseConfig(tt.args, env(tt.env...), io.Discard)
			if err == nil {
				t.Fatal("ParseConfig accepted the configuration")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseFlagsHelp(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	m := NewMain(io.Discard, &stderr)
	err := m.ParseFlags([]string{"-h"}, env())
	if !errors.Is(err, errHelp) {
		t.Fatalf("ParseFlags(-h) = %v, want errHelp (main exits 0)", err)
	}
	// Every setting is listed with its environment variable.
	for _, s := range settings() {
		if !strings.Contains(stderr.String(), "-"+s.flag) || !strings.Contains(stderr.String(), s.env) {
			t.Errorf("usage lacks -%s / %s:\n%s", s.flag, s.env, &stderr)
		}
	}
	if _, err := ParseConfig([]string{"-help"}, env(), io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("ParseConfig(-help) = %v, want flag.ErrHelp", err)
	}
}

func TestSanitizeID(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"web-1-4242", "web-1-4242"},
		{"host.example.com-17", "host.example.com-17"},
		{"my host/1", "my-host-1"},
		{"-lead-1", "i-lead-1"},
		{"", "i"},
		{strings.Repeat("a", 130) + "-9", strings.Repeat("a", 126) + "-9"},
	}
	for _, tt := range tests {
		got := sanitizeID(tt.in)
		if got != tt.want {
			t.Errorf("sanitizeID(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if !task.ValidInstanceID(got) {
			t.Errorf("sanitizeID(%q) = %q is not a valid instance id", tt.in, got)
		}
	}
}

func TestBareBooleanFlags(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig([]string{"-allow-exec", "-single-instance"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.AllowExec || !c.SingleInstance {
		t.Fatalf("bare boolean flags not set: allow-exec %v single-instance %v", c.AllowExec, c.SingleInstance)
	}
	c, err = ParseConfig([]string{"-allow-exec=false"}, func(k string) string {
		if k == "DEPLOYCOORD_ALLOW_EXEC" {
			return "true"
		}
		return ""
	}, io.Discard)
	if err != nil || c.AllowExec {
		t.Fatalf("-allow-exec=false over env true: %v %v", c.AllowExec, err)
	}
}

func TestParseConfigRedisTopology(t *testing.T) {
	t.Parallel()
	t.Run("OKCluster", func(t *testing.T) {
		t.Parallel()
		c, err := ParseConfig([]string{"-redis-tls"}, env("DEPLOYCOORD_REDIS_CLUSTER_ADDRS=10.0.0.1:7000, 10.0.0.2:7000",
			"DEPLOYCOORD_REDIS_USERNAME=coord", "DEPLOYCOORD_REDIS_PASSWORD=s3cret"), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.RedisClusterAddrs, []string{"10.0.0.1:7000", "10.0.0.2:7000"}) || c.RedisUsername != "coord" ||
			c.RedisPassword != "s3cret" || !c.RedisTLS || c.RedisURL != "" {
			t.Fatalf("cluster config %+v", c)
		}
	})
	t.Run("OKSentinel", func(t *testing.T) {
		t.Parallel()
		c, err := ParseConfig([]string{"-redis-sentinel-addrs", "s1:26379,s2:26379,s3:26379", "-redis-sentinel-master", "mymaster"},
			env(), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.RedisSentinelAddrs) != 3 || c.RedisSentinelMaster != "mymaster" || len(c.RedisClusterAddrs) != 0 {
			t.Fatalf("sentinel config %+v", c)
		}
	})
	tests := []struct {
		name string
		args []string
		env  []string
		want []string
	}{
		{"ErrURLAndCluster", nil, []string{"DEPLOYCOORD_REDIS_URL=redis://10.0.0.1:6379/0", "DEPLOYCOORD_REDIS_CLUSTER_ADDRS=10.0.0.1:7000"},
			[]string{"DEPLOYCOORD_REDIS_URL and DEPLOYCOORD_REDIS_CLUSTER_ADDRS are set", "set only one"}},
		{"ErrClusterAndSentinel", []string{"-redis-cluster-addrs", "a:1"}, []string{"DEPLOYCOORD_REDIS_SENTINEL_ADDRS=s:26379", "DEPLOYCOORD_REDIS_SENTINEL_MASTER=m"},
			[]string{"DEPLOYCOORD_REDIS_CLUSTER_ADDRS and DEPLOYCOORD_REDIS_SENTINEL_ADDRS are set"}},
		{"ErrURLAndSentinelMasterOnly", []string{"-redis-url", "redis://h:1", "-redis-sentinel-master", "m"}, nil,
			[]string{"DEPLOYCOORD_REDIS_URL and DEPLOYCOORD_REDIS_SENTINEL_ADDRS are set", "DEPLOYCOORD_REDIS_SENTINEL_MASTER needs DEPLOYCOORD_REDIS_SENTINEL_ADDRS"}},
		{"ErrSentinelWithoutMaster", nil, []string{"DEPLOYCOORD_REDIS_SENTINEL_ADDRS=s:26379"}, []string{"needs DEPLOYCOORD_REDIS_SENTINEL_MASTER"}},
		{"ErrClusterAddr", nil, []string{"DEPLOYCOORD_REDIS_CLUSTER_ADDRS=10.0.0.1:7000,10.0.0.2"}, []string{`DEPLOYCOORD_REDIS_CLUSTER_ADDRS "10.0.0.2": want host:port`}},
		{"ErrSentinelAddrPort", nil, []string{"DEPLOYCOORD_REDIS_SENTINEL_ADDRS=s:port", "DEPLOYCOORD_REDIS_SENTINEL_MASTER=m"}, []string{`DEPLOYCOORD_REDIS_SENTINEL_ADDRS "s:port"`}},
		{"ErrPasswordWithURL", nil, []string{"DEPLOYCOORD_REDIS_URL=redis://h:6379", "DEPLOYCOORD_REDIS_PASSWORD=x"},
			[]string{"DEPLOYCOORD_REDIS_PASSWORD applies to DEPLOYCOORD_REDIS_CLUSTER_ADDRS or DEPLOYCOORD_REDIS_SENTINEL_ADDRS"}},
		{"ErrTLSWithEmbedded", []string{"-redis-tls"}, nil, []string{"DEPLOYCOORD_REDIS_TLS applies to"}},
		{"ErrURLScheme", nil, []string{"DEPLOYCOORD_REDIS_URL=http://user:hunter2@h:6379"}, []string{"DEPLOYCOORD_REDIS_URL: ", "invalid URL scheme"}},
		{"ErrURLNoScheme", nil, []string{"DEPLOYCOORD_REDIS_URL=127.0.0.1:6379"}, []string{"DEPLOYCOORD_REDIS_URL: expected redis://host:port/db", "redis://127.0.0.1:6379/0"}},
		{"ErrURLHostOnly", nil, []string{"DEPLOYCOORD_REDIS_URL=localhost:6379"}, []string{"DEPLOYCOORD_REDIS_URL: expected redis://host:port/db"}},
		{"ErrURLPort", nil, []string{"DEPLOYCOORD_REDIS_URL=redis://user:hunter2@h:port"}, []string{"DEPLOYCOORD_REDIS_URL: ", "invalid port"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseConfig(tt.args, env(tt.env...), io.Discard)
			if err == nil {
				t.Fatal("ParseConfig accepted the configuration")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q shows the URL's password", err)
			}
		})
	}
}
