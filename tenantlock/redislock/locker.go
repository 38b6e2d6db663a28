package redislock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/tenantlock"
)

const (
	// LeaseDefault is the lock TTL when Config.Lease is zero.
	LeaseDefault = 60 * time.Second
	// LeaseMin is the shortest lease New accepts.
	LeaseMin = 50 * time.Millisecond

	// driftFactor is redsync's allowance for clock drift: the local deadline
	// is Lease*driftFactor earlier than the key's expiry.
	driftFactor = 0.01
	// acquireTimeoutMin bounds redsync's timeout for the SET NX call from
	// below; redsync's default (Lease/20) is too short for short leases.
	acquireTimeoutMin = 100 * time.Millisecond
)

// Config configures a Locker. Zero fields take the documented defaults.
type Config struct {
	// Lease is the lock TTL (default LeaseDefault, at least LeaseMin). A
	// crashed holder's lock frees itself within one lease.
	Lease time.Duration
	// RenewEvery is the renewal period (default Lease/3; less than Lease).
	RenewEvery time.Duration
	// LockKey and FenceKey build the Redis keys for a tenant (required). The
	// coordinator passes the repository's key builders,
	// "{p}lock:tenant:{<tenant>}" and "{p}fence:tenant:{<tenant>}": the
	// literal braces are a Redis Cluster hash tag, so both keys (and the
	// tenant's records) share a slot.
	LockKey, FenceKey func(tenantID string) string
	// Clock gives the floor of fencing tokens (default time.Now): a token is
	// never below Clock().UnixMilli(). Lease deadlines use the monotonic
	// clock (time.Now), as redsync does.
	Clock func() time.Time
	// OnRenew, when set, is called by a lease's renewer after each
	// extension attempt with whether it was confirmed (for the lease
	// renewal metrics). It must be cheap and safe for concurrent use. An
	// attempt cut short by Release or Forget is not reported.
	OnRenew func(ok bool)
	// Unbatched turns off the batching of the lock's script calls (SET NX,
	// extension, release). By default a Locker has at most two of them in
	// flight: a call made while fewer are goes out at once from its
	// caller's goroutine; one made while two are waits for one of them to
	// return and then goes out in one pipeline with every other call that
	// waited (no timer delay). Each call still costs its caller one round
	// trip (a pipeline of k calls is one round trip for all k); what is
	// saved under concurrency is go-redis', the socket's and Redis' work per
	// command. With Unbatched every call is sent on its own from the
	// goroutine redsync starts for it, as many at once as callers.
	Unbatched bool
}

// Locker takes, inspects, force-releases and re-acquires tenant locks: in
// Redis (New) or in process memory (NewLocal, single-instance mode). It is
// safe for concurrent use.
type Locker struct {
	// local is the in-process lock table of a Locker made by NewLocal; nil
	// for Redis, and then it is the only field set.
	local *localTable

	client        redis.UniversalClient
	lease         time.Duration
	renewEvery    time.Duration
	lockKey       func(string) string
	fenceKey      func(string) string
	clock         func() time.Time
	timeoutFactor float64
	onRenew       func(bool)
	// opts are the redsync Mutex options every acquisition shares.
	opts [4]redsync.Option
	// batch sends the script calls in pipelines; nil when Unbatched.
	batch *batcher
}

// New returns a Locker on client. The client must be made with
// ContextTimeoutEnabled: true, else context deadlines do not reach the socket
// and a hung Redis can hold a renewal past the lease (see the package doc).
func New(client redis.UniversalClient, cfg Config) (*Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", tenantlock.ErrInvalid)
	}
	if cfg.LockKey == nil || cfg.FenceKey == nil {
		return nil, fmt.Errorf("%w: Config.LockKey and Config.FenceKey are required", tenantlock.ErrInvalid)
	}
	lease := cfg.Lease
	if lease == 0 {
		lease = LeaseDefault
	}
	if lease < LeaseMin {
		return nil, fmt.Errorf("%w: lease %s is shorter than %s", tenantlock.ErrInvalid, lease, LeaseMin)
	}
	renewEvery := cfg.RenewEvery
	if renewEvery == 0 {
		renewEvery = lease / 3
	}
	if renewEvery < 0 || renewEvery >= lease {
		return nil, fmt.Errorf("%w: renewal period %s must be positive and shorter than the lease %s", tenantlock.ErrInvalid, renewEvery, lease)
	}
	clock := cfg.Clock
	if clock == nil {
		clock = time.Now
	}
	tf := max(0.05, float64(acquireTimeoutMin)/float64(lease))
	l := &Locker{
		client:        client,
		lease:         lease,
		renewEvery:    renewEvery,
		lockKey:       cfg.LockKey,
		fenceKey:      cfg.FenceKey,
		clock:         clock,
		timeoutFactor: min(tf, 1.0/3),
		onRenew:       cfg.OnRenew,
	}
	l.opts = [4]redsync.Option{
		redsync.WithExpiry(l.lease),
		redsync.WithTries(1),
		redsync.WithDriftFactor(driftFactor),
		redsync.WithTimeoutFactor(l.timeoutFactor),
	}
	if !cfg.Unbatched {
		l.batch = &batcher{client: client, limit: batchLimit, wake: make(chan struct{}, 1)}
	}
	return l, nil
}

// batchLimit is the most script round trips a batching Locker has in
// flight at once. With 1 (one pipeline at a time), two concurrent callers
// already wait for each other's round trip, which costs more than it saves
// (BenchmarkAcquireParallel: +70% CPU per acquisition); with 2 a pair of
// callers goes out as without batching, and a burst still batches: 64
// concurrent acquisitions share a pipeline about 18 at a time.
const batchLimit = 2

// newMutex returns a redsync Mutex on b (its only pool) with the Locker's
// options and extra.
func (l *Locker) newMutex(b *redsyncBackend, key string, extra redsync.Option) *redsync.Mutex {
	b.pools[0] = b
	opts := [5]redsync.Option{l.opts[0], l.opts[1], l.opts[2], l.opts[3], extra}
	return redsync.New(b.pools[:]...).NewMutex(key, opts[:]...)
}

// acquireAttempts bounds the attempts of Acquire when the lock keeps being
// freed between its refused SET NX and the read of its holder.
const acquireAttempts = 4

// Acquire takes the tenant's lock for h with a new fencing token, in one round
// trip (the token is taken by the SET NX script), and starts renewing it. It
// does not wait: when another holder has the lock it returns a
// *tenantlock.LockedError (errors.Is tenantlock.ErrLocked) naming that holder,
// after a second round trip that reads the holder. A Redis failure or an ended
// context is a *RedisError; a bad tenant id or holder field an error matching
// tenantlock.ErrInvalid.
//
// The SET NX call is bounded by Lease/20, at least 100ms and at most
// Lease/3 (and by ctx); the lease's deadline counts from when it was sent.
func (l *Locker) Acquire(ctx context.Context, tenantID string, h tenantlock.Holder) (*Lease, error) {
	if err := validTenant(tenantID); err != nil {
		return nil, err
	}
	if err := validHolder(h); err != nil {
		return nil, err
	}
	if l.local != nil {
		return l.local.acquire(tenantID, h)
	}
	// Another attempt only when the lock was freed between the refused SET
	// NX and the read of its holder (a short-lived holder under contention).
	lockKey, fenceKey := l.lockKey(tenantID), l.fenceKey(tenantID)
	for attempt := 0; ; attempt++ {
		b := &redsyncBackend{lk: l, tenantID: tenantID, fenceKey: fenceKey, value: encodeValue(h)}
		m := l.newMutex(b, lockKey, redsync.WithGenValueFunc(b.genValue))
		b.m = m
		err := m.TryLockContext(ctx)
		if err == nil {
			return newLease(tenantID, h, m.Value(), b.fence, m.Until(), l.renewEvery, b, l.onRenew), nil
		}
		if !isTaken(err) {
			return nil, redisError(ctx, "acquire", tenantID, err)
		}
		info, err := l.View(ctx, tenantID)
		if err != nil {
			return nil, err
		}
		if !info.Held && attempt < acquireAttempts-1 {
			continue
		}
		return nil, &tenantlock.LockedError{TenantID: tenantID, Holder: info.Holder, TTL: info.TTL, Fence: info.Fence, Value: info.Value}
	}
}

// Claim prepares the taking of the tenant's lock for h by a script of the
// caller's (a store's task start, task.Write.TakeLock; the script must do
// what acquire_lock.lua does for a free lock, with the Claim's fence
// instead of the counter's next value): a fresh value, the fence — the
// Locker's clock in Unix ms, as Acquire's floor, and above after (the
// task's last fence) — and the lease, counted from now. Adopt makes the
// Lease once the script took the lock. A Locker made by NewLocal cannot be
// claimed from a script: an error matching tenantlock.ErrInvalid.
func (l *Locker) Claim(tenantID string, h tenantlock.Holder, after int64) (tenantlock.Claim, error) {
	if err := validTenant(tenantID); err != nil {
		return tenantlock.Claim{}, err
	}
	if err := validHolder(h); err != nil {
		return tenantlock.Claim{}, err
	}
	if l.local != nil {
		return tenantlock.Claim{}, fmt.Errorf("%w: claim tenant %s: in-process locks are not taken by store scripts", tenantlock.ErrInvalid, tenantID)
	}
	return tenantlock.Claim{Value: encodeValue(h), Fence: max(l.clock().UnixMilli(), after+1), Lease: l.lease, Sent: time.Now()}, nil
}

// Adopt returns the Lease of a lock that a script took as c says (Claim),
// renewed from now on like one Acquire took. The lease counts from c.Sent:
// adopted after it ran out (the script was answered late), it is lost at
// once, as a lease whose renewals Redis did not confirm in time, and
// Reacquire may take it back.
func (l *Locker) Adopt(tenantID string, h tenantlock.Holder, c tenantlock.Claim) (*Lease, error) {
	if err := validTenant(tenantID); err != nil {
		return nil, err
	}
	if l.local != nil || c.Value == "" || c.Fence < 1 || c.Lease != l.lease {
		return nil, fmt.Errorf("%w: adopt tenant %s: not a claim of this Locker", tenantlock.ErrInvalid, tenantID)
	}
	// As redsync computes Until: from when the call was sent, less the
	// drift allowance.
	until := c.Sent.Add(l.lease - time.Duration(float64(l.lease)*driftFactor))
	b := &redsyncBackend{lk: l, tenantID: tenantID, fenceKey: l.fenceKey(tenantID), value: c.Value} // Mutex on first use
	return newLease(tenantID, h, c.Value, c.Fence, until, l.renewEvery, b, l.onRenew), nil
}

// LockKeys returns the tenant's lock and fence keys (Config.LockKey and
// FenceKey), so that a caller whose script takes the lock (Claim) can check
// it uses the same ones; "" for a Locker made by NewLocal.
func (l *Locker) LockKeys(tenantID string) (lockKey, fenceKey string) {
	if l.local != nil {
		return "", ""
	}
	return l.lockKey(tenantID), l.fenceKey(tenantID)
}

// View returns who holds the tenant's lock, for how long, and the last
// fencing token, in one round trip (a MULTI/EXEC block, so the three reads
// are consistent). A value this package did not write is reported as held,
// with a zero tenantlock.Holder and the raw Value.
func (l *Locker) View(ctx context.Context, tenantID string) (tenantlock.Info, error) {
	if err := validTenant(tenantID); err != nil {
		return tenantlock.Info{}, err
	}
	if l.local != nil {
		return l.local.view(tenantID), nil
	}
	var get, fence *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err := l.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, l.lockKey(tenantID))
		pttl = p.PTTL(ctx, l.lockKey(tenantID))
		fence = p.Get(ctx, l.fenceKey(tenantID))
		return nil
	})
	// A missing key is redis.Nil on its command; any other error fails the view.
	for _, c := range []redis.Cmder{get, pttl, fence} {
		if c.Err() != nil && !errors.Is(c.Err(), redis.Nil) {
			err = c.Err()
		}
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return tenantlock.Info{}, redisError(ctx, "view", tenantID, err)
	}
	info := tenantlock.Info{TenantID: tenantID}
	if info.Fence, err = parseFence(fence.Val()); err != nil {
		return tenantlock.Info{}, fmt.Errorf("tenantlock: view tenant %s: %w", tenantID, err)
	}
	if get.Err() == nil {
		fillHeld(&info, get.Val(), pttl.Val())
	}
	return info, nil
}

// ForceRelease deletes the tenant's lock if the fencing token is still
// expectedFence (break-glass: the operator saw that token), atomically, and
// returns the lock as it was. It also moves the fence counter on, so the
// released holder cannot take the lock back with Reacquire. Returns
// tenantlock.ErrNotHeld (with the Info) when nobody holds the lock, a
// *tenantlock.MismatchError (errors.Is tenantlock.ErrFenceMismatch) when the
// lock changed hands, a *RedisError when Redis failed.
func (l *Locker) ForceRelease(ctx context.Context, tenantID string, expectedFence int64) (tenantlock.Info, error) {
	if err := validTenant(tenantID); err != nil {
		return tenantlock.Info{}, err
	}
	if expectedFence <= 0 {
		return tenantlock.Info{}, fmt.Errorf("%w: expected fence %d must be positive", tenantlock.ErrInvalid, expectedFence)
	}
	if l.local != nil {
		return l.local.forceRelease(tenantID, expectedFence)
	}
	code, value, ttl, fence, err := runForceRelease(ctx, l.client, l.lockKey(tenantID), l.fenceKey(tenantID), expectedFence)
	if err != nil {
		return tenantlock.Info{}, redisError(ctx, "force-release", tenantID, err)
	}
	info := tenantlock.Info{TenantID: tenantID}
	if info.Fence, err = parseFence(fence); err != nil {
		return tenantlock.Info{}, fmt.Errorf("tenantlock: force-release tenant %s: %w", tenantID, err)
	}
	if code == forceNotHeld {
		return info, fmt.Errorf("tenantlock: force-release tenant %s: %w", tenantID, tenantlock.ErrNotHeld)
	}
	fillHeld(&info, value, ttl)
	if code == forceMismatch {
		return info, &tenantlock.MismatchError{Expected: expectedFence, Current: info}
	}
	return info, nil
}

// Reacquire takes lease's lock back with the same value and fencing token,
// in one round trip (scripts/reacquire_lock.lua), when it is still ours or
// nobody took the tenant since it lapsed: if the lock still holds the
// lease's value its expiry is pushed out; if it is free and the tenant's
// fence counter is still the lease's token, it is set again. Writes guarded
// by the lease's value and fence then pass as before. This is how a holder
// whose lease ran out while Redis was unreachable goes on (docs/architecture.md).
//
// It returns a new Lease — same tenant, holder, value and fence, a fresh
// deadline, its own renewer — and retires the old one: its renewer stops,
// and its Release and Forget do nothing (calling them is safe; release the
// new Lease instead). The old lease's Lost and Err keep what they said.
//
// Returns a *tenantlock.RefusedError (errors.Is tenantlock.ErrLeaseRefused and
// tenantlock.ErrLeaseLost), with the lock as found in Current, when the lock
// holds another value or the counter moved (another holder took a token, even if
// it is gone again); at once, without a round trip, when an extension of the
// lease was refused before (the lock was deleted or overwritten: a force-release
// must not be undone), when the lease was released, or when it was re-acquired
// already. A failed or timed-out call is a *RedisError (Unavailable when Redis
// was unreachable or too slow; try again later); the call is bounded like
// Acquire's SET NX. A nil lease or one of the other kind of Locker (Redis or
// in-process) is an error matching tenantlock.ErrInvalid.
//
// Do not re-acquire a lease whose lock the task's last write deleted
// (task.Write.ReleaseLock): it would take the lock again.
func (l *Locker) Reacquire(ctx context.Context, lease *Lease) (*Lease, error) {
	if lease == nil {
		return nil, fmt.Errorf("%w: reacquire: nil lease", tenantlock.ErrInvalid)
	}
	if lease.Local() != (l.local != nil) {
		return nil, fmt.Errorf("%w: reacquire tenant %s: the lease comes from another kind of Locker (in-process or Redis)", tenantlock.ErrInvalid, lease.tenantID)
	}
	lease.relMu.Lock()
	defer lease.relMu.Unlock()
	refuse := func(reason string) error {
		return &tenantlock.RefusedError{TenantID: lease.tenantID, Fence: lease.fence, Reason: reason}
	}
	var before *tenantlock.RefusedError
	switch {
	case lease.replaced.Load():
		return nil, refuse("the lease was re-acquired already: use the Lease that Reacquire returned")
	case lease.deleted.Load():
		return nil, refuse("the lease was released")
	case errors.As(lease.Err(), &before):
		return nil, refuse("an extension was refused before (" + before.Reason + ")")
	}
	var (
		next *Lease
		err  error
	)
	if l.local != nil {
		next, err = l.local.reacquire(lease)
	} else {
		next, err = l.reacquire(ctx, lease)
	}
	if err != nil {
		return nil, err
	}
	lease.replaced.Store(true)
	lease.released.Store(true)
	lease.halt()
	return next, nil
}

// reacquire is Reacquire on Redis.
func (l *Locker) reacquire(ctx context.Context, old *Lease) (*Lease, error) {
	tenantID := old.tenantID
	cctx, cancel := context.WithTimeout(ctx, time.Duration(float64(l.lease)*l.timeoutFactor))
	defer cancel()
	start := time.Now()
	code, value, ttl, fence, err := runReacquire(cctx, l.client, l.lockKey(tenantID), l.fenceKey(tenantID), old.value, l.lease, old.fence)
	if err != nil {
		return nil, redisError(cctx, "reacquire", tenantID, err)
	}
	now := time.Now()
	if code == reacquireRefused {
		info := tenantlock.Info{TenantID: tenantID}
		if info.Fence, err = parseFence(fence); err != nil {
			return nil, fmt.Errorf("tenantlock: reacquire tenant %s: %w", tenantID, err)
		}
		reason := "the lock holds another value"
		if value != "" {
			fillHeld(&info, value, ttl)
		} else {
			reason = fmt.Sprintf("the lock is free but its fence counter is %d: another holder took the tenant since", info.Fence)
		}
		return nil, &tenantlock.RefusedError{TenantID: tenantID, Fence: old.fence, Reason: reason, Current: info}
	}
	// As redsync computes Until: from when the call was sent, less the
	// drift allowance.
	until := start.Add(l.lease - time.Duration(float64(l.lease)*driftFactor))
	if !now.Before(until) {
		// The lock is ours in Redis until it expires; a retry finds it so.
		return nil, &RedisError{Op: "reacquire", TenantID: tenantID, Cause: "re-acquisition confirmed after the lease ran out", unavailable: true}
	}
	b := &redsyncBackend{lk: l, tenantID: tenantID, fenceKey: l.fenceKey(tenantID), value: old.value} // Mutex on first use
	return newLease(tenantID, old.holder, old.value, old.fence, until, l.renewEvery, b, l.onRenew), nil
}

func fillHeld(info *tenantlock.Info, value string, ttl time.Duration) {
	info.Held = true
	info.Value = value
	if h, ok := decodeValue(value); ok {
		info.Holder = h
	}
	// PTTL answers -1 (no expiry, a foreign key) or -2 (gone) as negative
	// durations; report no time left then.
	info.TTL = max(ttl, 0)
}

func parseFence(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("fence counter holds %s, not an integer", quote(s))
	}
	return n, nil
}

// lockValue is the JSON stored as the lock's value. The nonce makes every
// acquisition's value unique, so a holder's compare-and-delete never matches
// a later holder's lock.
type lockValue struct {
	tenantlock.Holder
	Nonce string `json:"nonce"`
}

// Field prefixes of the lock value, in the order encoding/json writes
// lockValue's fields.
const (
	valuePlan  = `{"planId":"`
	valueTask  = `","taskId":"`
	valueOwner = `","owner":"`
	valueNonce = `","nonce":"`
	valueEnd   = `"}`
)

// encodeValue returns the lock value for h with a fresh nonce: exactly what
// json.Marshal writes for lockValue. The nonce is 128 bits of math/rand/v2
// (ChaCha8, seeded by the runtime from the system's entropy): it must be
// unique per acquisition, not secret — anyone who can read the lock key
// can read the value. Holder fields that pass validHolder need no JSON
// escaping; any other holder goes through encoding/json.
func encodeValue(h tenantlock.Holder) string {
	var nonce [32]byte
	const hexDigits = "0123456789abcdef"
	for i, r := range [2]uint64{rand.Uint64(), rand.Uint64()} {
		for j := range 8 {
			b := byte(r >> (8 * j))
			nonce[16*i+2*j], nonce[16*i+2*j+1] = hexDigits[b>>4], hexDigits[b&0xf]
		}
	}
	if validHolder(h) != nil {
		v, err := json.Marshal(lockValue{Holder: h, Nonce: string(nonce[:])})
		if err != nil { // cannot happen: strings only
			panic(fmt.Sprintf("tenantlock: encode lock value: %v", err))
		}
		return string(v)
	}
	var sb strings.Builder
	sb.Grow(len(valuePlan) + len(h.PlanID) + len(valueTask) + len(h.TaskID) + len(valueOwner) + len(h.Instance) +
		len(valueNonce) + len(nonce) + len(valueEnd))
	sb.WriteString(valuePlan)
	sb.WriteString(h.PlanID)
	sb.WriteString(valueTask)
	sb.WriteString(h.TaskID)
	sb.WriteString(valueOwner)
	sb.WriteString(h.Instance)
	sb.WriteString(valueNonce)
	sb.Write(nonce[:])
	sb.WriteString(valueEnd)
	return sb.String()
}

// decodeValue parses a value written by encodeValue; ok is false for any
// other (foreign) value. Values in encodeValue's exact layout are read
// without encoding/json; anything else goes through json.Unmarshal, so the
// result is the same as json.Unmarshal's either way.
func decodeValue(s string) (tenantlock.Holder, bool) {
	if h, nonce, ok := splitValue(s); ok {
		if nonce != "" && validHolder(h) == nil && plainJSON(nonce) {
			return h, true
		}
	}
	var v lockValue
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return tenantlock.Holder{}, false
	}
	if v.Nonce == "" || validHolder(v.Holder) != nil {
		return tenantlock.Holder{}, false
	}
	return v.Holder, true
}

// splitValue cuts s along encodeValue's layout; ok is false when s is laid
// out otherwise. The parts are not checked.
func splitValue(s string) (h tenantlock.Holder, nonce string, ok bool) {
	rest, ok := strings.CutPrefix(s, valuePlan)
	if !ok {
		return tenantlock.Holder{}, "", false
	}
	for _, f := range []struct {
		field *string
		next  string
	}{{&h.PlanID, valueTask}, {&h.TaskID, valueOwner}, {&h.Instance, valueNonce}} {
		if *f.field, rest, ok = strings.Cut(rest, f.next); !ok {
			return tenantlock.Holder{}, "", false
		}
	}
	if nonce, ok = strings.CutSuffix(rest, valueEnd); !ok {
		return tenantlock.Holder{}, "", false
	}
	return h, nonce, true
}

// plainJSON reports whether s is a JSON string's contents that decodes to
// itself: printable ASCII without quotes or backslashes.
func plainJSON(s string) bool {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// idPattern is the tenant id allowlist (docs/architecture.md), kept here so that
// this package does not import the domain packages; holder fields follow it
// too. It keeps braces, colons, glob characters, whitespace and control
// characters out of keys, lock values and log lines. validID checks it.
const idPattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`

// idByte tells the bytes allowed in an id after its first; idFirst the ones
// allowed first.
var idByte, idFirst = func() (rest, first [256]bool) {
	for c := range 256 {
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		first[c] = alnum
		rest[c] = alnum || c == '.' || c == '_' || c == '-'
	}
	return rest, first
}()

// validID reports whether id matches idPattern: 1 to 128 bytes, an ASCII
// letter or digit first, then ASCII letters, digits, '.', '_' or '-'.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 128 || !idFirst[id[0]] {
		return false
	}
	for i := 1; i < len(id); i++ {
		if !idByte[id[i]] {
			return false
		}
	}
	return true
}

func validTenant(id string) error {
	if !validID(id) {
		return fmt.Errorf("%w: tenant id %s must match %s", tenantlock.ErrInvalid, quote(id), idPattern)
	}
	return nil
}

func validHolder(h tenantlock.Holder) error {
	switch {
	case !validID(h.PlanID):
		return invalidHolder("plan id", h.PlanID)
	case !validID(h.TaskID):
		return invalidHolder("task id", h.TaskID)
	case !validID(h.Instance):
		return invalidHolder("instance", h.Instance)
	}
	return nil
}

func invalidHolder(name, v string) error {
	return fmt.Errorf("%w: holder %s %s must match %s", tenantlock.ErrInvalid, name, quote(v), idPattern)
}

// quote quotes s for an error message, escaping control characters and
// cutting it short.
func quote(s string) string {
	const limit = 64
	if len(s) > limit {
		return strconv.Quote(s[:limit]) + "..."
	}
	return strconv.Quote(s)
}
