package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the master name the Sentinel setup monitors.
const SentinelMaster = "deploycoord"

// Sentinel is a Redis with Sentinel failover on random ports: one master,
// one replica and three sentinels (quorum 2, a master is down after 1s of
// silence), owned by one test.
type Sentinel struct {
	t testing.TB
	// Name is the monitored master's name (SentinelMaster).
	Name string
	// Master and Replica are the data servers as started; after a
	// failover the replica is the master.
	Master, Replica *Server
	Sentinels       []*Server
}

// StartSentinel starts the master, its replica and three sentinels, waits
// until the replica is in sync and every sentinel knows the replica and
// the two other sentinels (so a failover can happen), and stops everything
// when the test ends. It skips (or fails when Required) without
// redis-server.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	if why := binaries(false); why != "" {
		unreachable(t, why)
	}
	dir := t.TempDir()
	s := &Sentinel{t: t, Name: SentinelMaster}
	server := func(p *proc, prefix ...string) *Server {
		srv := &Server{t: t, Addr: p.Addr, Port: p.Port, p: p}
		t.Cleanup(srv.Kill)
		if err := p.start(prefix...); err != nil {
			t.Fatal(err)
		}
		return srv
	}
	// No persistence: the drill is a failover, not a restart. Replicas
	// stay writable-refusing (the default replica-read-only yes).
	data := []string{"--save", "", "--appendonly", "no"}
	mp, err := newProc(dir, data...)
	if err != nil {
		t.Fatal(err)
	}
	s.Master = server(mp)
	rp, err := newProc(dir, append(data, "--replicaof", "127.0.0.1", strconv.Itoa(mp.Port))...)
	if err != nil {
		t.Fatal(err)
	}
	s.Replica = server(rp)
	for i := 0; i < 3; i++ {
		sp, err := newProc(dir)
		if err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(sp.dir, "sentinel.conf")
		body := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
			"sentinel down-after-milliseconds %[1]s 1000\n"+
			"sentinel failover-timeout %[1]s 10000\n"+
			"sentinel parallel-syncs %[1]s 1\n", s.Name, mp.Port)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		s.Sentinels = append(s.Sentinels, server(sp, conf, "--sentinel"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.waitReady(ctx); err != nil {
		t.Fatalf("sentinel setup not ready: %v", err)
	}
	return s
}

// waitReady waits until the replica is online at the master and every
// sentinel sees the replica and the two other sentinels.
func (s *Sentinel) waitReady(ctx context.Context) error {
	m := redis.NewClient(&redis.Options{Addr: s.Master.Addr})
	defer m.Close()
	var last string
	for {
		ready := true
		info, err := m.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "state=online") {
			ready, last = false, fmt.Sprintf("replica not online at the master: %v %q", err, info)
		}
		for _, sn := range s.Sentinels {
			if !ready {
				break
			}
			sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
			replicas, rerr := sc.Replicas(ctx, s.Name).Result()
			others, serr := sc.Sentinels(ctx, s.Name).Result()
			_ = sc.Close()
			if rerr != nil || serr != nil || len(replicas) < 1 || len(others) < len(s.Sentinels)-1 {
				ready, last = false, fmt.Sprintf("sentinel %s knows %d replicas, %d other sentinels (%v %v)",
					sn.Addr, len(replicas), len(others), rerr, serr)
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Addrs returns the sentinels' addresses.
func (s *Sentinel) Addrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		out[i] = sn.Addr
	}
	return out
}

// Client returns a failover client (go-redis' Sentinel client) with
// deadlines that reach the socket, closed when the test ends.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.Name, SentinelAddrs: s.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// MasterAddr returns the master's address as the first sentinel that
// answers names it.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var last error
	for _, sn := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
		hp, err := sc.GetMasterAddrByName(ctx, s.Name).Result()
		_ = sc.Close()
		if err == nil && len(hp) == 2 {
			return net.JoinHostPort(hp[0], hp[1]), nil
		}
		last = err
	}
	return "", fmt.Errorf("no sentinel names the master: %v", last)
}

// WaitFailover waits until every sentinel names a master other than old
// and that server says it is a master; it returns the new master's address.
func (s *Sentinel) WaitFailover(ctx context.Context, old string) (string, error) {
	var last string
	for {
		var names []string
		for _, sn := range s.Sentinels {
			sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
			hp, err := sc.GetMasterAddrByName(ctx, s.Name).Result()
			_ = sc.Close()
			if err == nil && len(hp) == 2 {
				names = append(names, net.JoinHostPort(hp[0], hp[1]))
			} else {
				names = append(names, "?")
			}
		}
		last = strings.Join(names, ",")
		if len(names) > 0 && names[0] != old && names[0] != "?" {
			agreed := true
			for _, n := range names {
				agreed = agreed && n == names[0]
			}
			if agreed {
				c := redis.NewClient(&redis.Options{Addr: names[0]})
				role, err := c.Do(ctx, "role").Slice()
				_ = c.Close()
				if err == nil && len(role) > 0 && role[0] == "master" {
					return names[0], nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no failover from %s: sentinels name %s: %w", old, last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
