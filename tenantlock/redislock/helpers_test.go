package redislock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/tenantlock"
	"github.com/redis/go-redis/v9"
)

// testBundle is one test's Redis, keys and Locker.
type testBundle struct {
	client  redis.UniversalClient
	prefix  string
	mini    *miniredis.Miniredis // nil on a real Redis
	counter *redistest.Counter
	cfg     Config
	locker  *Locker
}

// setup builds a Locker on a fresh client of b; cfg's key builders are set
// to the repository's layout under a fresh prefix.
func setup(t *testing.T, b redistest.Backend, cfg Config) *testBundle {
	t.Helper()
	c, prefix := b.New(t)
	tb := &testBundle{client: c, prefix: prefix, counter: &redistest.Counter{}}
	if b.Mini != nil {
		tb.mini = b.Mini(t)
	}
	warmCluster(t, c)
	c.AddHook(tb.counter)
	tb.cfg = withKeys(cfg, prefix)
	l, err := New(c, tb.cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tb.locker = l
	return tb
}

// warmCluster opens a connection to every master of a cluster client and
// loads the lock scripts there, before a test counts round trips or runs
// calls under a short lease's deadline (lease/20): a cluster client's first
// call to a node otherwise also dials it, reads the slot map and answers
// NOSCRIPT once, which on a loaded machine outlasts that deadline and adds
// round trips the test does not mean to count. Other clients are left as
// they are (their first calls are part of what some tests check).
func warmCluster(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		for _, s := range []*redis.Script{acquireLockScript, forceReleaseLockScript, reacquireLockScript} {
			if err := s.Load(ctx, m).Err(); err != nil {
				return err
			}
		}
		return m.Ping(ctx).Err()
	})
	if err != nil {
		t.Fatalf("warming the cluster client: %v", err)
	}
}

func withKeys(cfg Config, prefix string) Config {
	cfg.LockKey = func(id string) string { return prefix + "lock:tenant:{" + id + "}" }
	cfg.FenceKey = func(id string) string { return prefix + "fence:tenant:{" + id + "}" }
	return cfg
}

// secondLocker is a Locker on another client of the same Redis or cluster
// (another coordinator instance).
func (tb *testBundle) secondLocker(t *testing.T) *Locker {
	t.Helper()
	c := redistest.Clone(t, tb.client)
	warmCluster(t, c)
	l, err := New(c, tb.cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

func (tb *testBundle) lockKey(tenant string) string  { return tb.cfg.LockKey(tenant) }
func (tb *testBundle) fenceKey(tenant string) string { return tb.cfg.FenceKey(tenant) }

// runAcquire runs acquire_lock.lua itself on tenant's lock and fence keys
// with value, a 10 s lease and floor (the lease's own calls go through
// Locker.Acquire).
func (tb *testBundle) runAcquire(tenant, value string, floor int64) *redis.Cmd {
	return acquireLockScript.Run(context.Background(), tb.client, []string{tb.lockKey(tenant), tb.fenceKey(tenant)}, value, 10000, floor)
}

// get returns the value at key, "" when missing.
func (tb *testBundle) get(t *testing.T, key string) string {
	t.Helper()
	v, err := tb.client.Get(context.Background(), key).Result()
	if err == redis.Nil {
		return ""
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

// keys lists the keys under the test's prefix.
func (tb *testBundle) keys(t *testing.T) []string {
	t.Helper()
	ks, err := redistest.KeysUnder(context.Background(), tb.client, tb.prefix)
	if err != nil {
		t.Fatalf("SCAN: %v", err)
	}
	return ks
}

func holder(task string) tenantlock.Holder {
	return tenantlock.Holder{PlanID: "plan-01", TaskID: task, Instance: "coord-a"}
}

// acquire takes the tenant's lock or fails the test. When the test ends it
// forgets the lease and checks that its renewer goroutine exits.
func (tb *testBundle) acquire(t *testing.T, tenant string, h tenantlock.Holder) *Lease {
	t.Helper()
	l, err := tb.locker.Acquire(context.Background(), tenant, h)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", tenant, err)
	}
	watch(t, l)
	return l
}

// warmUp takes and returns tenant's lock until a call succeeds (at most 5
// tries): the first calls of a client load the cluster's slot map and the
// scripts, which on a loaded machine can take longer than a short lease's
// call deadline (lease/20). A warm-up exists to absorb exactly that; an
// error other than a timeout still fails the test.
func (tb *testBundle) warmUp(t *testing.T, tenant string, h tenantlock.Holder) *Lease {
	t.Helper()
	var err error
	for i := 0; i < 5; i++ {
		var l *Lease
		if l, err = tb.locker.Acquire(context.Background(), tenant, h); err == nil {
			watch(t, l)
			return l
		}
		var re *RedisError
		if !errors.As(err, &re) || !re.Unavailable() {
			break
		}
	}
	t.Fatalf("Acquire(%s) to warm up: %v", tenant, err)
	return nil
}

// watch forgets l when the test ends and fails the test if its renewer
// goroutine does not exit.
func watch(t *testing.T, l *Lease) {
	t.Cleanup(func() {
		l.Forget()
		waitDone(t, l, 3*time.Second)
	})
}

func waitDone(t *testing.T, l *Lease, within time.Duration) {
	t.Helper()
	select {
	case <-l.done:
	case <-time.After(within):
		t.Errorf("renewer goroutine of tenant %s still running %s after Release/Forget", l.tenantID, within)
	}
}

// waitLost waits for l to be lost and returns when it saw it, failing the
// test after within.
func waitLost(t *testing.T, l *Lease, within time.Duration) time.Time {
	t.Helper()
	select {
	case <-l.Lost():
		return time.Now()
	case <-time.After(within):
		t.Fatalf("lease of tenant %s not lost after %s", l.tenantID, within)
		return time.Time{}
	}
}

// fakeClock is a settable clock for fence floors.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) Add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newLocal returns an in-process Locker or fails the test.
func newLocal(t *testing.T, cfg LocalConfig) *Locker {
	t.Helper()
	l, err := NewLocal(cfg)
	if err != nil {
		t.Fatalf("NewLocal: %v", err)
	}
	return l
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
