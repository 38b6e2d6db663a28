package redislock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/tenantlock"
	"github.com/redis/go-redis/v9"
)

// commandCalls reads INFO commandstats: calls per command ("set",
// "evalsha", "client|setinfo", ...), commands run inside scripts included.
func commandCalls(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	out, err := redistest.CommandCalls(context.Background(), c)
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	return out
}

// commandsRun returns the commands Redis ran during f (INFO commandstats
// before and after), without the INFO itself and a new connection's
// handshake.
func commandsRun(t *testing.T, c *redis.Client, f func()) map[string]int64 {
	t.Helper()
	before := commandCalls(t, c)
	f()
	after := commandCalls(t, c)
	d := map[string]int64{}
	for k, n := range after {
		switch k {
		case "info", "hello", "auth", "select", "client|setinfo", "client|setname":
			continue
		}
		if n -= before[k]; n != 0 {
			d[k] = n
		}
	}
	return d
}

// TestAcquireCommands counts the commands one successful Acquire makes
// Redis run (INFO commandstats of a throwaway redis-server, so that no
// other test's commands are counted): the EVALSHA of acquire_lock.lua and
// two SETs inside it (the lock, SET NX PX; the fence, SET ... GET), no GET,
// whether the tenant's counter is new or left by an earlier task start. Two
// acquisitions in one millisecond cost a third SET (the counter moved past
// the floor).
func TestAcquireCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: t0}
	prefix := redistest.Prefix(t)
	lk, err := New(c, withKeys(Config{Lease: 10 * time.Second, Clock: clock.Now}, prefix))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx := context.Background()
	acquire := func(tenant string) *Lease {
		t.Helper()
		l, err := lk.Acquire(ctx, tenant, holder("task-1"))
		if err != nil {
			t.Fatalf("Acquire(%s): %v", tenant, err)
		}
		watch(t, l)
		return l
	}
	// Loads the script (NOSCRIPT, then EVAL) and opens the connection.
	if err := acquire("warm-up").Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}

	want := map[string]int64{"evalsha": 1, "set": 2}
	var l *Lease
	if got := commandsRun(t, c, func() { l = acquire("acme") }); !maps.Equal(got, want) {
		t.Errorf("Acquire, new counter: Redis ran %v, want %v", got, want)
	}
	if l.Fence() != t0.UnixMilli() {
		t.Errorf("fence %d, want the floor %d", l.Fence(), t0.UnixMilli())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}

	clock.Add(time.Second)
	if got := commandsRun(t, c, func() { l = acquire("acme") }); !maps.Equal(got, want) {
		t.Errorf("Acquire, counter below the floor: Redis ran %v, want %v", got, want)
	}
	if l.Fence() != t0.Add(time.Second).UnixMilli() {
		t.Errorf("fence %d, want the floor %d", l.Fence(), t0.Add(time.Second).UnixMilli())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}

	last := l.Fence()
	sameMs := map[string]int64{"evalsha": 1, "set": 3}
	if got := commandsRun(t, c, func() { l = acquire("acme") }); !maps.Equal(got, sameMs) {
		t.Errorf("Acquire, same millisecond: Redis ran %v, want %v", got, sameMs)
	}
	if l.Fence() != last+1 {
		t.Errorf("fence %d in the same millisecond, want %d", l.Fence(), last+1)
	}
}

// TestAcquireSameMillisecond: acquisitions whose floor equals (or is below)
// the stored counter, as two task starts in one millisecond (or a clock
// stepped back) give, still get strictly increasing tokens, and the
// counter holds the last one.
func TestAcquireSameMillisecond(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{now: t0}
			tb := setup(t, b, Config{Lease: 10 * time.Second, Clock: clock.Now})
			var fences []int64
			for i := range 6 {
				if i == 3 {
					clock.Add(-time.Minute) // a clock stepped back
				}
				l := tb.acquire(t, "acme", holder(fmt.Sprintf("task-%d", i)))
				fences = append(fences, l.Fence())
				if got := tb.get(t, tb.fenceKey("acme")); got != itoa(l.Fence()) {
					t.Errorf("fence counter %q after acquisition %d, want %d", got, i, l.Fence())
				}
				if err := l.Release(context.Background()); err != nil {
					t.Fatalf("Release: %v", err)
				}
			}
			for i := range fences {
				if want := t0.UnixMilli() + int64(i); fences[i] != want {
					t.Errorf("fences %v, want %d, %d, ... (floor, then +1 each)", fences, t0.UnixMilli(), t0.UnixMilli()+1)
					break
				}
			}
		})
	}
}

// TestAcquireScriptFloorBelowOne runs acquire_lock.lua with floors below 1
// (a clock before 1970): the counter goes on as INCR would, from 1 and
// strictly above its old value, and never holds the floor.
func TestAcquireScriptFloorBelowOne(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, b, Config{Lease: 10 * time.Second})
			ctx := context.Background()
			for i, floor := range []int64{0, -5, 0, -1000} {
				n, err := tb.runAcquire("acme", fmt.Sprintf("value-%d", i), floor).Int64()
				if err != nil {
					t.Fatalf("acquire_lock.lua, floor %d: %v", floor, err)
				}
				if want := int64(i + 1); n != want {
					t.Errorf("acquire_lock.lua, floor %d = %d, want %d", floor, n, want)
				}
				if got := tb.get(t, tb.fenceKey("acme")); got != itoa(int64(i+1)) {
					t.Errorf("fence counter %q, want %d", got, i+1)
				}
				tb.client.Del(ctx, tb.lockKey("acme"))
			}
		})
	}
}

// TestAcquireCorruptCounter: a fence counter that is not an integer (or
// too large to count on exactly in Lua), or a key of another type, makes
// Acquire fail with a Redis error, not ErrLocked; the counter is left as
// it was and the lock is not held.
func TestAcquireCorruptCounter(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			for _, bad := range []string{"seven", "-3", "12.5", "", "9007199254740992"} {
				t.Run(fmt.Sprintf("%q", bad), func(t *testing.T) {
					t.Parallel()
					tb := setup(t, b, Config{Lease: 10 * time.Second})
					ctx := context.Background()
					tb.client.Set(ctx, tb.fenceKey("acme"), bad, 0)
					_, err := tb.locker.Acquire(ctx, "acme", holder("task-1"))
					var re *RedisError
					if !errors.As(err, &re) || errors.Is(err, tenantlock.ErrLocked) || re.Unavailable() {
						t.Fatalf("Acquire: err = %v, want a *RedisError, not unavailable", err)
					}
					if !strings.Contains(err.Error(), "tenantlock: fence counter "+tb.fenceKey("acme")+" is not an integer") {
						t.Errorf("Acquire: err = %v, want the script's error", err)
					}
					if got, err := tb.client.Get(ctx, tb.fenceKey("acme")).Result(); err != nil || got != bad {
						t.Errorf("fence counter %q (%v) after the error, want %q unchanged", got, err, bad)
					}
					if n := tb.client.Exists(ctx, tb.lockKey("acme")).Val(); n != 0 {
						t.Errorf("lock key exists after the error (%q), want it absent", tb.get(t, tb.lockKey("acme")))
					}
					// Straight from the script: the exact reply.
					err = tb.runAcquire("acme", "value-1", 5).Err()
					if want := "ERR tenantlock: fence counter " + tb.fenceKey("acme") + " is not an integer"; err == nil || !strings.HasSuffix(err.Error(), strings.TrimPrefix(want, "ERR ")) {
						t.Errorf("acquire_lock.lua: err = %v, want %q", err, want)
					}
					if n := tb.client.Exists(ctx, tb.lockKey("acme")).Val(); n != 0 {
						t.Errorf("lock key exists after the script's error, want it absent")
					}
					if got := tb.get(t, tb.fenceKey("acme")); got != bad {
						t.Errorf("fence counter %q after the script's error, want %q unchanged", got, bad)
					}
				})
			}
			t.Run("WrongType", func(t *testing.T) {
				t.Parallel()
				tb := setup(t, b, Config{Lease: 10 * time.Second})
				ctx := context.Background()
				tb.client.RPush(ctx, tb.fenceKey("acme"), "x")
				_, err := tb.locker.Acquire(ctx, "acme", holder("task-1"))
				var re *RedisError
				if !errors.As(err, &re) || errors.Is(err, tenantlock.ErrLocked) || re.Unavailable() {
					t.Fatalf("Acquire: err = %v, want a *RedisError, not unavailable", err)
				}
				if got := tb.client.LRange(ctx, tb.fenceKey("acme"), 0, -1).Val(); len(got) != 1 || got[0] != "x" {
					t.Errorf("fence key holds %q after the error, want the list [x] unchanged", got)
				}
				if n := tb.client.Exists(ctx, tb.lockKey("acme")).Val(); n != 0 {
					t.Errorf("lock key exists after the error, want it absent")
				}
			})
		})
	}
}

// TestAcquireScriptRetryAfterFenceSet: a retried acquire_lock.lua call
// (same value) answers the token the first run took, also when that run
// moved the counter above the floor (same millisecond as the acquisition
// before), and gives the lock a whole lease again; with the counter corrupt
// meanwhile it answers the error and writes nothing.
func TestAcquireScriptRetryAfterFenceSet(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t, b, Config{Lease: 10 * time.Second})
			ctx := context.Background()
			const floor = 1795306092787
			first, err := tb.runAcquire("acme", "value-1", floor).Int64()
			if err != nil || first != floor {
				t.Fatalf("first run = %d, %v; want the floor %d", first, err, int64(floor))
			}
			tb.client.Del(ctx, tb.lockKey("acme"))
			second, err := tb.runAcquire("acme", "value-2", floor).Int64()
			if err != nil || second != floor+1 {
				t.Fatalf("run in the same millisecond = %d, %v; want %d", second, err, int64(floor+1))
			}
			for i := range 2 {
				tb.client.PExpire(ctx, tb.lockKey("acme"), 2*time.Second)
				again, err := tb.runAcquire("acme", "value-2", floor+int64(i)*1000).Int64()
				if err != nil || again != second {
					t.Errorf("retry %d = %d, %v; want the same token %d", i, again, err, second)
				}
				if ttl := tb.client.PTTL(ctx, tb.lockKey("acme")).Val(); ttl <= 2*time.Second {
					t.Errorf("lock TTL after retry %d = %s, want the lease (10s) again", i, ttl)
				}
			}
			if got := tb.get(t, tb.fenceKey("acme")); got != itoa(second) {
				t.Errorf("fence counter %q after the retries, want %d (unchanged)", got, second)
			}

			tb.client.Set(ctx, tb.fenceKey("acme"), "seven", 0)
			tb.client.PExpire(ctx, tb.lockKey("acme"), 2*time.Second)
			if err := tb.runAcquire("acme", "value-2", floor).Err(); err == nil || !strings.Contains(err.Error(), "is not an integer") {
				t.Errorf("retry with a corrupt counter: err = %v, want the script's error", err)
			}
			if got := tb.get(t, tb.fenceKey("acme")); got != "seven" {
				t.Errorf("fence counter %q after the error, want %q unchanged", got, "seven")
			}
			if got := tb.get(t, tb.lockKey("acme")); got != "value-2" {
				t.Errorf("lock holds %q after the error, want %q (the earlier run's, kept)", got, "value-2")
			}
			if ttl := tb.client.PTTL(ctx, tb.lockKey("acme")).Val(); ttl > 2*time.Second {
				t.Errorf("lock TTL after the error = %s, want at most 2s (nothing written)", ttl)
			}
		})
	}
}
