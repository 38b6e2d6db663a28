package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// env is the Redis the benchmark runs against and what every section shares.
type env struct {
	cfg  config
	opts *redis.Options
	// own is the throwaway server, nil when -redis was given.
	own *redisServer
	// client is the client the coordinators under test use (no hook).
	client *redis.Client
	log    zerolog.Logger
	// version is the Redis server's version.
	version string
	// cluster is the Redis Cluster of -topology cluster (nil otherwise),
	// and cclient the client its coordinators use.
	cluster *redistest.Cluster
	cclient *redis.ClusterClient
	// cg is the throwaway server when it runs under callgrind
	// (-callgrind, instead of own), and cgDir its files.
	cg    *redistest.Callgrind
	cgDir string
}

func newEnv(ctx context.Context, cfg config) (*env, error) {
	e := &env{cfg: cfg, log: zerolog.Nop()}
	if cfg.LogLevel != "disabled" {
		lvl, err := zerolog.ParseLevel(cfg.LogLevel)
		if err != nil {
			return nil, fmt.Errorf("-log-level: %w", err)
		}
		// The server's logger, writing nowhere: its cost without the I/O.
		e.log = zerolog.New(io.Discard).Level(lvl).With().Timestamp().Str("instance", "bench").Logger()
	}
	url := cfg.RedisURL
	switch {
	case cfg.Callgrind && url != "":
		return nil, errors.New("-callgrind runs the throwaway redis-server under valgrind: it cannot be used with -redis")
	case cfg.Callgrind:
		dir, err := os.MkdirTemp("", "deploybench-callgrind-")
		if err != nil {
			return nil, fmt.Errorf("temp dir for redis-server: %w", err)
		}
		e.cgDir = dir
		if e.cg, err = redistest.NewCallgrind(dir); err != nil {
			e.Close()
			return nil, fmt.Errorf("-callgrind (needs valgrind): %w", err)
		}
		url = "redis://" + e.cg.Addr + "/0"
	case url == "":
		s, err := startRedis()
		if err != nil {
			return nil, err
		}
		e.own = s
		url = "redis://" + s.Addr + "/0"
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("-redis: %w", err)
	}
	// As cmd/deploycoord sets it: deadlines must reach the socket.
	opts.ContextTimeoutEnabled = true
	if cfg.PoolSize > 0 {
		opts.PoolSize = cfg.PoolSize
	}
	e.opts = opts
	e.client = redis.NewClient(opts)
	info, err := e.client.InfoMap(ctx, "server").Result()
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("redis at %s: %w", opts.Addr, err)
	}
	e.version = info["Server"]["redis_version"]
	if cfg.Topology == "cluster" {
		if err := e.startCluster(); err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
}

// startCluster starts the Redis Cluster of -topology cluster: three masters
// (no persistence, as the throwaway server) on random ports.
func (e *env) startCluster() error {
	dir, err := os.MkdirTemp("", "deploybench-cluster-")
	if err != nil {
		return fmt.Errorf("temp dir for the cluster: %w", err)
	}
	c, err := redistest.NewCluster(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("-topology cluster: %w", err)
	}
	e.cluster = c
	opts := &redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true}
	if e.cfg.PoolSize > 0 {
		opts.PoolSize = e.cfg.PoolSize
	}
	e.cclient = redis.NewClusterClient(opts)
	return nil
}

// newClient returns another client of the same Redis (same options).
func (e *env) newClient() *redis.Client { return redis.NewClient(e.opts) }

// Close closes the client and stops the throwaway server.
func (e *env) Close() {
	if e.client != nil {
		_ = e.client.Close()
	}
	if e.cclient != nil {
		_ = e.cclient.Close()
	}
	if e.cluster != nil {
		e.cluster.Close()
	}
	if e.own != nil {
		e.own.Stop()
	}
	if e.cg != nil {
		e.cg.Close()
	}
	if e.cgDir != "" {
		_ = os.RemoveAll(e.cgDir)
	}
}

// reset empties the throwaway server between runs, so every run starts from
// the same state; on a Redis given with -redis it deletes the run's own keys
// only.
func (e *env) reset(ctx context.Context, prefix string) error {
	if e.own != nil {
		return e.client.FlushAll(ctx).Err()
	}
	if prefix == "" {
		return nil
	}
	iter := e.client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			if err := e.client.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		if err := e.client.Unlink(ctx, batch...).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

// newPrefix returns a fresh key prefix for one run.
func newPrefix(name string) string { return "bench-" + name + "-" + randHex(3) + ":" }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// instance is one coordinator under test, wired as cmd/deploycoord wires it:
// the double-writing store (memory with DropFinished + Redis), redislock on
// the store's keys and the built-in stage kinds.
type instance struct {
	coord  *facade.Coordinator
	dual   *repository.Dual
	redis  *repository.Redis
	prefix string
}

func (e *env) newInstance(client redis.UniversalClient, prefix string) (*instance, error) {
	return e.newNamedInstance(client, prefix, instanceOpts{name: "bench-1", shared: e.cfg.SharedPlans})
}

// instanceOpts sets an instance apart from the others on one store.
type instanceOpts struct {
	name string
	// obs is told what the instance does (nil: nothing).
	obs facade.Observer
	// shared is facade.Config.SharedPlans.
	shared bool
	// heartbeat is facade.Config.Heartbeat (0: the default, a third of
	// the lease).
	heartbeat time.Duration
}

// newNamedInstance is newInstance with the options o, for several
// instances on one store.
func (e *env) newNamedInstance(client redis.UniversalClient, prefix string, o instanceOpts) (*instance, error) {
	// Legacy keys as cmd/deploycoord's default: on until the first
	// heartbeat's listing of instances shows none of an older layout.
	redisStore, err := repository.NewRedis(client, repository.Config{Prefix: prefix, LegacyKeys: repository.LegacyKeysAuto})
	if err != nil {
		return nil, err
	}
	keys := redisStore.Keys()
	store := repository.NewDual(repository.NewMemory(repository.MemoryConfig{DropFinished: true}), redisStore, repository.DualConfig{SharedWork: o.shared})
	locks, err := redislock.New(client, redislock.Config{
		Lease:    facade.LeaseDefault,
		LockKey:  func(t string) string { k, _ := keys.Lock(t); return k },
		FenceKey: func(t string) string { k, _ := keys.Fence(t); return k },
	})
	if err != nil {
		return nil, err
	}
	log := e.log
	coord, err := facade.New(store, locks, facade.Config{
		Instance: o.name, Lease: facade.LeaseDefault, Stages: stage.NewRegistry(stage.Options{}),
		MaxTenants: plan.MaxTenantsDefault, Logger: &log, Observer: o.obs, SharedPlans: o.shared, Heartbeat: o.heartbeat,
	})
	if err != nil {
		return nil, err
	}
	return &instance{coord: coord, dual: store, redis: redisStore, prefix: prefix}, nil
}

// settled waits until the instance's store has seen its first listing of
// instances (its heartbeat's): the keys of storage layout 1 that a store
// writes from its start until then are off, as in a server that has run
// for a while. It takes no time on a real Redis; under -callgrind, where
// Redis is slow, the first plan would otherwise pay for them.
func (in *instance) settled(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for in.redis.LegacyKeysOn() {
		if time.Now().After(deadline) {
			return errors.New("the store still writes the layout-1 keys 30s after its start (no heartbeat listed the instances)")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// shutdown stops the coordinator (nothing runs any more when it is called).
func (in *instance) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = in.coord.Shutdown(ctx)
}

// tenantID is the i-th tenant of a benchmark plan.
func tenantID(i int) string { return fmt.Sprintf("tenant-%06d", i) }

// planSpec is a plan of n tenants (tenant ids from first on) through stages
// noop stages.
func planSpec(first, n, stages, concurrency int, start bool) plan.Spec {
	spec := plan.Spec{Name: "bench", MaxConcurrency: concurrency, Start: &start}
	for i := range stages {
		spec.Stages = append(spec.Stages, task.StageSpec{Name: fmt.Sprintf("s%02d", i), Kind: "noop"})
	}
	spec.Tenants = make([]plan.TenantSpec, n)
	for i := range spec.Tenants {
		spec.Tenants[i] = plan.TenantSpec{TenantID: tenantID(first + i)}
	}
	return spec
}

// verifyCompleted checks that the plan is COMPLETED with every one of its n
// tasks COMPLETED, and that a sample of its tenants (ids from first on)
// shows a completed task of the plan with a checkpoint of every stage: a
// benchmark that does not check its result measures nothing.
func verifyCompleted(ctx context.Context, in *instance, planID string, first, n, stages int) error {
	pv, err := in.coord.Plan(ctx, planID)
	if err != nil {
		return fmt.Errorf("verify plan %s: %w", planID, err)
	}
	if pv.Status != plan.StatusCompleted {
		return fmt.Errorf("verify plan %s: status %s, want COMPLETED (counts %v)", planID, pv.Status, pv.Counts)
	}
	for _, s := range task.Statuses {
		want := 0
		if s == task.StatusCompleted {
			want = n
		}
		if pv.Counts[s] != want {
			return fmt.Errorf("verify plan %s: %d tasks %s, want %d (counts %v)", planID, pv.Counts[s], s, want, pv.Counts)
		}
	}
	for _, i := range []int{first, first + n/2, first + n - 1} {
		tv, err := in.coord.TaskByTenant(ctx, tenantID(i))
		if err != nil {
			return fmt.Errorf("verify tenant %s: %w", tenantID(i), err)
		}
		if tv.PlanID != planID || tv.Status != task.StatusCompleted {
			return fmt.Errorf("verify tenant %s: task %s of plan %s is %s", tenantID(i), tv.ID, tv.PlanID, tv.Status)
		}
		if tv.Checkpoint == nil || len(tv.Checkpoint.CompletedStages) != stages {
			return fmt.Errorf("verify tenant %s: checkpoint %+v, want %d completed stages", tenantID(i), tv.Checkpoint, stages)
		}
	}
	return nil
}

// cpuUse is CPU time spent by this process and by the Redis server.
type cpuUse struct {
	proc, redis time.Duration
}

// cpuNow reads this process's CPU time (getrusage) and the Redis server's
// (INFO cpu: used_cpu_user + used_cpu_sys).
func (e *env) cpuNow(ctx context.Context) cpuUse { return cpuOf(ctx, e.client) }

// cpuOf reads this process's CPU time (getrusage) and the CPU time of the
// Redis servers behind c (INFO cpu: used_cpu_user + used_cpu_sys; every
// master's, summed, on a cluster).
func cpuOf(ctx context.Context, c redis.UniversalClient) cpuUse {
	var ru syscall.Rusage
	var u cpuUse
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		u.proc = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var mu sync.Mutex
	read := func(ctx context.Context, c *redis.Client) error {
		info, err := c.InfoMap(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		var sec float64
		for _, k := range []string{"used_cpu_user", "used_cpu_sys"} {
			v, _ := strconv.ParseFloat(info["CPU"][k], 64)
			sec += v
		}
		mu.Lock()
		u.redis += time.Duration(sec * float64(time.Second))
		mu.Unlock()
		return nil
	}
	switch c := c.(type) {
	case *redis.ClusterClient:
		_ = c.ForEachMaster(ctx, read)
	case *redis.Client:
		_ = read(ctx, c)
	}
	return u
}

func (u cpuUse) sub(v cpuUse) cpuUse { return cpuUse{proc: u.proc - v.proc, redis: u.redis - v.redis} }

// commandStats returns Redis' per-command CPU statistics (INFO
// commandstats) since the last resetStats, heaviest first, one line each.
func (e *env) commandStats(ctx context.Context) []string {
	info, err := e.client.InfoMap(ctx, "commandstats").Result()
	if err != nil {
		return []string{"INFO commandstats: " + err.Error()}
	}
	type stat struct {
		name        string
		calls, usec int64
	}
	var stats []stat
	var total int64
	for k, v := range info["Commandstats"] {
		st := stat{name: strings.TrimPrefix(k, "cmdstat_")}
		switch st.name {
		case "flushall", "info", "config|resetstat", "config":
			continue // the benchmark's own housekeeping
		}
		for _, f := range strings.Split(v, ",") {
			name, val, _ := strings.Cut(f, "=")
			switch name {
			case "calls":
				st.calls, _ = strconv.ParseInt(val, 10, 64)
			case "usec":
				st.usec, _ = strconv.ParseInt(val, 10, 64)
			}
		}
		total += st.usec
		stats = append(stats, st)
	}
	slices.SortFunc(stats, func(a, b stat) int { return cmp.Compare(b.usec, a.usec) })
	var out []string
	for _, st := range stats[:min(len(stats), 12)] {
		out = append(out, fmt.Sprintf("%-18s %8d calls %9.1f µs/call %5.1f%% of Redis command time",
			st.name, st.calls, float64(st.usec)/float64(max(st.calls, 1)), 100*float64(st.usec)/float64(max(total, 1))))
	}
	return out
}

// resetStats resets the throwaway server's statistics (CONFIG RESETSTAT);
// a Redis given with -redis is left alone.
func (e *env) resetStats(ctx context.Context) {
	if e.own != nil {
		_ = e.client.ConfigResetStat(ctx).Err()
	}
}

// pingCeiling returns how many PING round trips per second clients
// goroutines get through one go-redis client in d: the most round trips
// Redis and a Go client can make on this machine, the bound of any work that
// needs one round trip per step.
func (e *env) pingCeiling(ctx context.Context, clients int, d time.Duration) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var total atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e.client.Ping(ctx).Err() == nil {
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	if total.Load() == 0 {
		return 0, errors.New("no PING answered")
	}
	return float64(total.Load()) / time.Since(start).Seconds(), nil
}
