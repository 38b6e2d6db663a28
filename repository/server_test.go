package repository

import (
	"context"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/internal/redistest"
)

var runIDRe = regexp.MustCompile(`^[0-9a-f]{40}$`)

func TestServerInfo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want ServerConfig
		// warnings are substrings, one per expected warning.
		warnings []string
	}{
		{
			name:     "EvictionAndNoPersistence",
			args:     []string{"--maxmemory-policy", "volatile-lru"},
			want:     ServerConfig{MaxmemoryPolicy: "volatile-lru", AppendOnly: "no", AppendFsync: "everysec", Save: ""},
			warnings: []string{"maxmemory-policy is volatile-lru", "no persistence"},
		},
		{
			name: "NoevictionWithAOF",
			args: []string{"--appendonly", "yes", "--maxmemory-policy", "noeviction"},
			want: ServerConfig{MaxmemoryPolicy: "noeviction", AppendOnly: "yes", AppendFsync: "everysec", Save: ""},
		},
		{
			name:     "AOFWithoutFsync",
			args:     []string{"--appendonly", "yes", "--appendfsync", "no"},
			want:     ServerConfig{MaxmemoryPolicy: "noeviction", AppendOnly: "yes", AppendFsync: "no", Save: ""},
			warnings: []string{"appendfsync is no"},
		},
		{
			name:     "ConfigRenamed",
			args:     []string{"--rename-command", "CONFIG", ""},
			want:     ServerConfig{MaxmemoryPolicy: Unknown, AppendOnly: Unknown, AppendFsync: Unknown, Save: Unknown},
			warnings: []string{"maxmemory-policy is unknown", "persistence is unknown"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t, tt.args...)
			e := newRedisEnv(t, srv.Client(), "x:", Config{})
			ctx := ctxT(t)
			var info ServerInfo
			if n := e.counter.Count(func() {
				var err error
				if info, err = e.redis.ServerInfo(ctx); err != nil {
					t.Fatalf("ServerInfo: %v", err)
				}
			}); n != 1 {
				t.Errorf("ServerInfo took %d round trips, want 1", n)
			}
			if !runIDRe.MatchString(info.RunID) || info.Version == Unknown || info.Version == "" {
				t.Errorf("run id %q, version %q", info.RunID, info.Version)
			}
			got := info.Config
			refused := got.Refused
			got.Refused = ""
			if got != tt.want {
				t.Errorf("config %+v, want %+v", got, tt.want)
			}
			if (tt.want.MaxmemoryPolicy == Unknown) != (refused != "") {
				t.Errorf("Refused = %q", refused)
			}
			warnings := info.Warnings()
			if len(warnings) != len(tt.warnings) {
				t.Fatalf("warnings %q, want %d matching %q", warnings, len(tt.warnings), tt.warnings)
			}
			for i, w := range tt.warnings {
				if !strings.Contains(warnings[i], w) {
					t.Errorf("warning %d = %q, want it to say %q", i, warnings[i], w)
				}
			}
		})
	}
}

func TestServerInfoOnMiniredis(t *testing.T) {
	t.Parallel()
	_, c := redistest.Mini(t)
	r, err := NewRedis(c, Config{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := r.ServerInfo(ctxT(t))
	if err != nil {
		t.Fatalf("ServerInfo on miniredis: %v, want unknown fields", err)
	}
	want := ServerInfo{Version: Unknown, Config: ServerConfig{MaxmemoryPolicy: Unknown, AppendOnly: Unknown, AppendFsync: Unknown, Save: Unknown}}
	info.Config.Refused = ""
	if !reflect.DeepEqual(info, want) {
		t.Fatalf("ServerInfo = %+v, want %+v", info, want)
	}
	if id, err := r.ServerRunID(ctxT(t)); id != "" || err != nil {
		t.Fatalf("ServerRunID on miniredis = %q, %v; want \"\", nil", id, err)
	}
}

func TestServerRunIDChangesOnRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	r, err := NewRedis(c, Config{Prefix: "x:"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	before, err := r.ServerRunID(ctx)
	if err != nil || !runIDRe.MatchString(before) {
		t.Fatalf("ServerRunID = %q, %v", before, err)
	}
	if again, _ := r.ServerRunID(ctx); again != before {
		t.Fatalf("run id changed without a restart: %q → %q", before, again)
	}
	srv.Kill()
	if _, err := r.ServerRunID(ctx); !IsUnavailable(err) {
		t.Fatalf("ServerRunID with the server down: %v, want unavailable", err)
	}
	if _, err := r.ServerInfo(ctx); !IsUnavailable(err) {
		t.Fatalf("ServerInfo with the server down: %v, want unavailable", err)
	}
	srv.Start()
	after, err := r.ServerRunID(ctx)
	if err != nil || !runIDRe.MatchString(after) || after == before {
		t.Fatalf("run id after a restart = %q (%v), before %q: want a new one", after, err, before)
	}
}

// TestServerInfoOnCluster: on a Redis Cluster the self-check reads every
// master; a setting one master gets wrong is a warning naming it, one they
// all get wrong one warning for all; the run id names every master's, and
// a master's restart changes that master's part only.
func TestServerInfoOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	r, err := NewRedis(cl.Client(t), Config{Prefix: "x:"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	bad := cl.Nodes[1]
	if err := cl.NodeClient(t, bad).ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
		t.Fatal(err)
	}
	info, err := r.ServerInfo(ctx)
	if err != nil {
		t.Fatalf("ServerInfo: %v", err)
	}
	if len(info.Masters) != 3 {
		t.Fatalf("ServerInfo read %d masters, want 3: %+v", len(info.Masters), info)
	}
	if info.Config.MaxmemoryPolicy != Mixed || info.Config.AppendOnly != "no" {
		t.Errorf("config %+v, want maxmemory-policy mixed, appendonly no", info.Config)
	}
	want := []string{"all 3 masters: no persistence", "master " + bad.Addr + ": maxmemory-policy is volatile-lru"}
	warnings := info.Warnings()
	if len(warnings) != len(want) {
		t.Fatalf("warnings %q, want %d like %q", warnings, len(want), want)
	}
	for _, w := range want {
		if !slices.ContainsFunc(warnings, func(s string) bool { return strings.HasPrefix(s, w) }) {
			t.Errorf("warnings %q: none says %q", warnings, w)
		}
	}

	before, err := r.ServerRunID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before != info.RunID || strings.Count(before, "=") != 3 {
		t.Fatalf("ServerRunID %q, ServerInfo.RunID %q: want the same, naming 3 masters", before, info.RunID)
	}
	restarted := cl.Nodes[2]
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cl.Restart(rctx, restarted); err != nil {
		t.Fatal(err)
	}
	after, err := r.ServerRunID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range strings.Split(before, ",") {
		changed := !strings.Contains(after, part)
		if changed != strings.HasPrefix(part, restarted.Addr+"=") {
			t.Errorf("run id part %q changed: %v (restarted %s): before %q after %q", part, changed, restarted.Addr, before, after)
		}
	}
}

// TestRunIDOnConnect: every new connection reports the run id of the server
// it reached, before it carries a command, so a restart is seen on the
// first connection to the new server.
func TestRunIDOnConnect(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	seen := make(chan string, 100)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 1,
		OnConnect: RunIDOnConnect(func(id string) { seen <- id })})
	t.Cleanup(func() { _ = c.Close() })
	r, err := NewRedis(c, Config{Prefix: "x:"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	before, err := r.ServerRunID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got != before {
		t.Fatalf("first connection observed run id %q, INFO says %q", got, before)
	}
	srv.Restart()
	for c.Ping(ctx).Err() != nil { // the pooled connection died with the server
		time.Sleep(10 * time.Millisecond)
	}
	after, _ := r.ServerRunID(ctx)
	select {
	case got := <-seen:
		if got != after || got == before {
			t.Fatalf("connection to the restarted server observed %q, want its new run id %q (old %q)", got, after, before)
		}
	default:
		t.Fatal("no run id observed on the connection to the restarted server")
	}
}
