package redislock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
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

// redsyncDeleteHash is the SHA1 of redsync's release script (deleteScript
// in redsync's scripts.go, its compare-and-delete), which redsync also sends
// after every failed lock attempt.
const redsyncDeleteHash = "e950836ed1e694540c503ef9972b8de518044d3b"

// redsyncBackend is the Redis side of one redsync Mutex, and so of one
// acquisition and of the Lease it makes: redsync's Pool (the Mutex's only
// one), whose Conn is the same struct (redsyncConn), and the Lease's
// backend. One allocation serves all three.
//
// The Conn wraps the go-redis client like redsync's goredis pool, except
// that SetNX runs acquire_lock.lua, which takes the fencing token in the
// same atomic step as the lock and leaves it in fence, and that script calls
// go through the Locker's batcher when batching is on. Get keeps the
// context it is given for the calls that follow: redsync calls Get and then
// the Conn from one goroutine per operation, and the operations of one Mutex
// never overlap — one pool; the acquisition, then the renewer, then Release
// after the renewer has exited — each goroutine started after the previous
// one handed its result back over a channel. So the fields are plain.
//
// As a backend, only the Lease's renewer calls extend, and Release after the
// renewer has exited; redsync's Mutex is not safe for concurrent use.
type redsyncBackend struct {
	lk *Locker
	// m is the Mutex; for a lease made from a lock taken elsewhere (Adopt,
	// Reacquire) it is made on first use (mutex), so a task whose last
	// write deletes the lock before a renewal never builds one.
	m        *redsync.Mutex
	tenantID string
	fenceKey string
	// value is the value the Mutex takes the lock with.
	value string
	// pools is the Mutex's list of pools: this backend.
	pools [1]redsyncredis.Pool
	// ctx is the context of the operation under way (see Get).
	ctx context.Context
	// fence is the token taken by a successful SetNX, 0 before.
	fence int64
	// refused is the value of a SetNX that Redis answered with "held by
	// someone else", nothing written: the compare-and-delete that redsync
	// sends next for that value is answered here, without a round trip.
	refused string
}

// genValue is the Mutex's value function.
func (b *redsyncBackend) genValue() (string, error) { return b.value, nil }

// Get implements redsyncredis.Pool.
func (b *redsyncBackend) Get(ctx context.Context) (redsyncredis.Conn, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	b.ctx = ctx
	return (*redsyncConn)(b), nil
}

// redsyncConn is a redsyncBackend as redsync's Conn; every call runs with the
// context given to Get.
type redsyncConn redsyncBackend

func (c *redsyncConn) Get(name string) (string, error) {
	v, err := c.lk.client.Get(c.ctx, name).Result()
	return v, noErrNil(err)
}

func (c *redsyncConn) Set(name, value string) (bool, error) {
	v, err := c.lk.client.Set(c.ctx, name, value, 0).Result()
	return v == "OK", err
}

// SetNX takes the lock and a fencing token (acquire_lock.lua) instead of a
// bare SET NX PX. When the script answers that another value holds the lock
// (nothing was written), the value is remembered so that the release redsync
// sends after the failed attempt costs no round trip; on an error or a
// timeout the SET may have landed, and the release goes out.
func (c *redsyncConn) SetNX(name, value string, expiry time.Duration) (bool, error) {
	floor := c.lk.clock().UnixMilli()
	v, err := c.lk.evalSha(c.ctx, acquireLockSrc,
		"evalsha", acquireLockScript.Hash(), 2, name, c.fenceKey, value, expiry.Milliseconds(), floor)
	if err != nil {
		return false, err
	}
	n, ok := v.(int64)
	switch {
	case !ok:
		return false, fmt.Errorf("acquire_lock.lua returned %T, want an integer", v)
	case n < 0:
		// The lock holds this very value: a retried call after the first
		// one landed, with the fence counter gone meanwhile. Not a clean
		// refusal: the release goes out.
		return false, errors.New("acquire_lock.lua: the lock holds this acquisition's value but the fence counter is missing")
	case n == 0:
		c.refused = value
		return false, nil
	}
	c.fence = n
	return true, nil
}

// Eval runs redsync's release and extend scripts (EVALSHA, then EVAL when
// Redis lost its script cache). The release that follows a refused SetNX
// for the same value is answered without a round trip: 0, not deleted (the
// lock holds another value).
func (c *redsyncConn) Eval(script *redsyncredis.Script, keysAndArgs ...any) (any, error) {
	if script.Hash == redsyncDeleteHash && c.refused != "" && len(keysAndArgs) == 2 && keysAndArgs[1] == c.refused {
		c.refused = ""
		return int64(0), nil
	}
	c.refused = ""
	args := make([]any, 0, 3+len(keysAndArgs))
	args = append(args, "evalsha", script.Hash, script.KeyCount)
	args = append(args, keysAndArgs...)
	v, err := c.lk.evalSha(c.ctx, script.Src, args...)
	return v, noErrNil(err)
}

func (c *redsyncConn) ScriptLoad(script *redsyncredis.Script) error {
	h, err := c.lk.client.ScriptLoad(c.ctx, script.Src).Result()
	if err == nil {
		script.Hash = h
	}
	return err
}

func (c *redsyncConn) PTTL(name string) (time.Duration, error) {
	return c.lk.client.PTTL(c.ctx, name).Result()
}

func (c *redsyncConn) Close() error { return nil }

func noErrNil(err error) error {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

// mutex returns b's Mutex, making it (with b's value) on first use.
func (b *redsyncBackend) mutex() *redsync.Mutex {
	if b.m == nil {
		b.m = b.lk.newMutex(b, b.lk.lockKey(b.tenantID), redsync.WithValue(b.value))
	}
	return b.m
}

func (b *redsyncBackend) extend(ctx context.Context) (time.Time, error) {
	m := b.mutex()
	ok, err := m.ExtendContext(ctx)
	if ok {
		return m.Until(), nil
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
	ok, err := b.mutex().UnlockContext(ctx)
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
