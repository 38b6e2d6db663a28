package tenantlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/acquire_lock.lua
	acquireLockSrc    string
	acquireLockScript = redis.NewScript(acquireLockSrc)

	//go:embed scripts/force_release_lock.lua
	forceReleaseLockSrc    string
	forceReleaseLockScript = redis.NewScript(forceReleaseLockSrc)

	//go:embed scripts/reacquire_lock.lua
	reacquireLockSrc    string
	reacquireLockScript = redis.NewScript(reacquireLockSrc)
)

// lockPool is the redsync pool of one acquisition. It wraps the go-redis
// client like redsync's goredis pool, except that SetNX runs
// acquire_lock.lua, which takes the fencing token in the same atomic step as
// the lock and hands it over in fence. A pool per acquisition knows its
// tenant's fence key and keeps the token away from every other acquisition.
type lockPool struct {
	client   redis.UniversalClient
	fenceKey string
	clock    func() time.Time
	// fence is the token taken by a successful SetNX, 0 before. redsync
	// calls SetNX on a goroutine of its own and hands the result back over
	// a channel; atomic keeps that visible to any reader.
	fence atomic.Int64
}

// Get implements redsyncredis.Pool.
func (p *lockPool) Get(ctx context.Context) (redsyncredis.Conn, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	return &lockConn{p: p, ctx: ctx}, nil
}

// lockConn implements redsyncredis.Conn; every call runs with the context
// given to Get.
type lockConn struct {
	p   *lockPool
	ctx context.Context
}

func (c *lockConn) Get(name string) (string, error) {
	v, err := c.p.client.Get(c.ctx, name).Result()
	return v, noErrNil(err)
}

func (c *lockConn) Set(name, value string) (bool, error) {
	v, err := c.p.client.Set(c.ctx, name, value, 0).Result()
	return v == "OK", err
}

// SetNX takes the lock and a fencing token (acquire_lock.lua) instead of a
// bare SET NX PX.
func (c *lockConn) SetNX(name, value string, expiry time.Duration) (bool, error) {
	floor := c.p.clock().UnixMilli()
	n, err := acquireLockScript.Run(c.ctx, c.p.client, []string{name, c.p.fenceKey},
		value, expiry.Milliseconds(), floor).Int64()
	if err != nil {
		return false, err
	}
	if n <= 0 {
		return false, nil
	}
	c.p.fence.Store(n)
	return true, nil
}

// Eval runs redsync's release and extend scripts (EVALSHA, then EVAL when
// Redis lost its script cache).
func (c *lockConn) Eval(script *redsyncredis.Script, keysAndArgs ...any) (any, error) {
	keys := make([]string, script.KeyCount)
	for i := range keys {
		keys[i] = keysAndArgs[i].(string)
	}
	args := keysAndArgs[script.KeyCount:]
	v, err := c.p.client.EvalSha(c.ctx, script.Hash, keys, args...).Result()
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		v, err = c.p.client.Eval(c.ctx, script.Src, keys, args...).Result()
	}
	return v, noErrNil(err)
}

func (c *lockConn) ScriptLoad(script *redsyncredis.Script) error {
	h, err := c.p.client.ScriptLoad(c.ctx, script.Src).Result()
	if err == nil {
		script.Hash = h
	}
	return err
}

func (c *lockConn) PTTL(name string) (time.Duration, error) {
	return c.p.client.PTTL(c.ctx, name).Result()
}

func (c *lockConn) Close() error { return nil }

func noErrNil(err error) error {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

// redsyncBackend is a Lease's backend on Redis: the redsync mutex that took
// the lock. Only the Lease's renewer goroutine calls it, and Release after
// the renewer has exited; redsync's Mutex is not safe for concurrent use.
type redsyncBackend struct {
	m        *redsync.Mutex
	tenantID string
}

func (b *redsyncBackend) extend(ctx context.Context) (time.Time, error) {
	ok, err := b.m.ExtendContext(ctx)
	if ok {
		return b.m.Until(), nil
	}
	if isTaken(err) {
		return time.Time{}, fmt.Errorf("%w: the lock was deleted or holds another value", errRefused)
	}
	if err == nil || errors.Is(err, redsync.ErrExtendFailed) {
		// Redis extended the key, but too late for the local estimate.
		err = errors.New("extension confirmed after the lease ran out")
	}
	return time.Time{}, redisError(ctx, "extend", b.tenantID, err)
}

func (b *redsyncBackend) forget() {}

func (b *redsyncBackend) release(ctx context.Context) error {
	ok, err := b.m.UnlockContext(ctx)
	switch {
	case ok:
		return nil
	case errors.Is(err, redsync.ErrLockAlreadyExpired):
		return nil
	case isTaken(err):
		return errRefused
	default:
		return redisError(ctx, "release", b.tenantID, err)
	}
}

// isTaken reports whether redsync found the key holding another value (or,
// for extend and release, no value).
func isTaken(err error) bool {
	var taken *redsync.ErrTaken
	return errors.As(err, &taken)
}

const (
	forceNotHeld  = 0
	forceMismatch = 1
	forceReleased = 2
)

func runForceRelease(ctx context.Context, c redis.UniversalClient, lockKey, fenceKey string, expected int64) (code int64, value string, ttl time.Duration, fence string, err error) {
	res, err := forceReleaseLockScript.Run(ctx, c, []string{lockKey, fenceKey}, expected).Slice()
	if err != nil {
		return 0, "", 0, "", err
	}
	if len(res) != 4 {
		return 0, "", 0, "", fmt.Errorf("force_release_lock.lua returned %d values, want 4", len(res))
	}
	code, _ = res[0].(int64)
	value, _ = res[1].(string)
	ms, _ := res[2].(int64)
	fence, _ = res[3].(string)
	return code, value, time.Duration(ms) * time.Millisecond, fence, nil
}

const (
	reacquireRefused  = 0
	reacquireExtended = 1
	reacquireSet      = 2
)

// runReacquire runs reacquire_lock.lua; value, ttl and fence are the lock
// and counter as found.
func runReacquire(ctx context.Context, c redis.UniversalClient, lockKey, fenceKey, value string, lease time.Duration, fence int64) (code int64, found string, ttl time.Duration, counter string, err error) {
	res, err := reacquireLockScript.Run(ctx, c, []string{lockKey, fenceKey}, value, lease.Milliseconds(), fence).Slice()
	if err != nil {
		return 0, "", 0, "", err
	}
	if len(res) != 4 {
		return 0, "", 0, "", fmt.Errorf("reacquire_lock.lua returned %d values, want 4", len(res))
	}
	code, _ = res[0].(int64)
	found, _ = res[1].(string)
	ms, _ := res[2].(int64)
	counter, _ = res[3].(string)
	return code, found, time.Duration(ms) * time.Millisecond, counter, nil
}

// redisError turns a go-redis or redsync error into a *RedisError, keeping
// only its text (and the context error, if the context ended).
func redisError(ctx context.Context, op, tenantID string, err error) *RedisError {
	e := &RedisError{Op: op, TenantID: tenantID, Cause: err.Error()}
	var re *RedisError
	if errors.As(err, &re) {
		e.Cause, e.unavailable, e.ctxErr = re.Cause, re.unavailable, re.ctxErr
		return e
	}
	// redsync prefixes the node ("node #0: ..."); there is only one.
	var node *redsync.RedisError
	if errors.As(err, &node) && node.Err != nil {
		e.Cause = node.Err.Error()
	}
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
		e.ctxErr = context.Canceled
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		e.ctxErr = context.DeadlineExceeded
		e.unavailable = true
	default:
		e.unavailable = unreachable(err)
	}
	return e
}

// unreachable reports whether err means Redis could not be reached or is not
// ready to serve, rather than a refused command.
func unreachable(err error) bool {
	var ne net.Error
	switch {
	case errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrClosed),
		errors.Is(err, redsync.ErrFailed): // the SET NX answered after the lease's validity was used up
		return true
	}
	for _, prefix := range []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "BUSY"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}
