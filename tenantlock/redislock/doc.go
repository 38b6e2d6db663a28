// Package redislock is the per-tenant lock of deploycoord on Redis: one lock
// per tenant, held while the tenant's task runs, with a lease that its holder
// renews and a fencing token that every task and checkpoint write carries
// (docs/architecture.md). It is the only package that uses redsync,
// and, with the repository and cmd, one of the few that use go-redis. The
// names its callers share with it — Holder, Info and the errors (ErrLocked,
// ErrLeaseLost, ErrLeaseRefused, ...) — are in package tenantlock, which
// imports only the standard library: package facade declares the Locker
// and Lease it needs over them and never links this package. NewLocal, the
// in-process locker of single-instance mode, lives here because it shares
// the Locker and Lease types and their code.
//
// # Keys
//
//	{p}lock:tenant:{<tenant>}    STRING  lock value (JSON naming the holder)   TTL = lease
//	{p}fence:tenant:{<tenant>}   STRING  last fencing token handed out        no TTL
//
// Config.LockKey and Config.FenceKey build them (the repository owns the key
// layout); the braces are a Redis Cluster hash tag, so both keys share the
// tenant's slot with its records and one script can check lock, fence and
// write the task atomically. Tenant ids and holder fields are checked
// against the tenant allowlist ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ (a byte
// loop with the regexp's semantics, tested against it) before anything
// reaches Redis.
//
// # Acquire, lease and renewal
//
//	Acquire ─SET NX PX, SET GET fence (one script)─► Lease ──renewer: PEXPIRE if value is ours,
//	   │                                              │      every RenewEvery (default Lease/3)
//	   └─ held ─► *LockedError (holder, TTL, fence)   ├─ refused ─────────────► lost at once, Refused (final)
//	                                                  ├─ failed / timed out ──► retry every RenewEvery/4
//	                                                  │                          until the deadline, then lost
//	                                                  │                          (not Refused: Reacquire may
//	                                                  │                          get it back)
//	                                                  ├─ Release ─► stop renewer, compare-and-delete
//	                                                  └─ Forget ──► stop renewer (last fenced write deleted the lock)
//
// Acquire takes a redsync Mutex with WithExpiry(Lease), WithTries(1) (the
// caller decides whether to wait) and a value that names the holder,
// {"planId","taskId","owner","nonce"}, unique per acquisition thanks to the
// random nonce (128 bits of math/rand/v2's ChaCha8, seeded by the runtime
// from system entropy: unique, not secret). The value is written by hand in
// exactly encoding/json's layout, and read back without encoding/json when
// it has that layout, so older values and foreign ones parse as before.
//
// Each Lease has one renewer goroutine, the only user of the Mutex
// (redsync's Mutex is not safe for concurrent use), and no other goroutine:
// a timer starts the renewer at the first renewal, so a lease released or
// forgotten within RenewEvery (a short task) never has a goroutine at all.
// Release stops the renewer (or its timer) and waits for it to exit before
// it unlocks, and other goroutines read the deadline atomically. Deadline
// is redsync's Until: the time the last confirmed request was sent plus the
// lease, less 1% for clock drift. Each extension runs with a context
// deadline no later than that, so a hung Redis cannot keep a lease alive
// past it: Lost closes by the deadline (plus scheduling slack) and Check
// fails before that by the caller's margin.
//
// A holder that must stop at once when its lease is lost — cancel the stage
// it runs — takes Lease.Context(parent): a context that the renewer itself
// cancels, with Err as its cause (context.Cause), in the same step that
// records the loss, before Lost closes. No goroutine of the caller's has to
// watch Lost. Release, Forget and a replacing Reacquire are not losses and
// leave it alone; its CancelFunc unregisters it. Lease.OnLost(f) is the
// same without a context: f is called with the loss in that same step (the
// coordinator's run cancels its stage from it).
//
// WithSetNXOnExtend is never used: it re-creates a lock that expired, which
// would resurrect a lease that another instance may have taken and released
// meanwhile, behind the back of the fencing token.
//
// # A lock taken by the caller's script: Claim and Adopt
//
// A caller that takes the lock in a script of its own, in the same atomic
// step as its own write (the repository's task start, task.Write.TakeLock),
// asks for a Claim first: a fresh value in this package's layout, the
// fence — the Locker's clock in ms, above the task's last fence, as
// Acquire's floor — and the lease, counted from that moment. Its script
// must do what acquire_lock.lua does for a free lock with that fence, and
// refuse (writing nothing) when the counter is not below it. Once it took
// the lock, Adopt returns the Lease, with a redsync Mutex made WithValue:
// renewed, released, lost and re-acquired like one Acquire took. A Claim
// adopted after its lease ran out is lost at once (lapsed, not refused).
// LockKeys names the keys, so the caller can check that its script takes
// the same ones; an in-process Locker (NewLocal) cannot be claimed.
//
// # Losing a lease, and taking it back
//
// A lease is lost in one of two ways, and Err, Check and Refused tell them
// apart (the coordinator's decision at a stage boundary, docs/architecture.md):
//
//   - Refused: an extension was refused — the lock was deleted
//     (force-released) or holds another value. Err is a
//     *tenantlock.RefusedError, matching tenantlock.ErrLeaseRefused and
//     tenantlock.ErrLeaseLost. The lease is gone for good; the holder stops.
//   - Lapsed: the deadline passed with no extension confirmed, because Redis
//     did not answer (or answered with errors). Err matches
//     tenantlock.ErrLeaseLost only. Another instance may or may not have
//     taken the tenant; the holder waits for Redis and calls
//     Locker.Reacquire.
//
// Confirmed is when Redis last confirmed the lease (acquisition or
// extension), for the coordinator's "suspect after a Redis restart" rule.
//
// Reacquire runs scripts/reacquire_lock.lua: if the lock still holds the
// lease's value, PEXPIRE it; if it is free and the fence counter still
// equals the lease's token, SET it again with the same value; else refuse.
// Only an acquirer (and a force-release) moves the counter, so an unchanged
// counter proves that no other holder took the tenant (and wrote with a
// newer token) meanwhile and no operator released it; the
// writes the holder kept in memory then pass the fenced script with the
// same value and fence. On success it returns a new Lease (same value and
// fence, its own renewer) and retires the old one, whose Release and Forget
// then do nothing. It refuses without a round trip a lease whose extension
// was refused: a lock that was force-released is free with an unchanged
// counter, and must not come back.
//
// A force-release while this instance cannot reach Redis leaves its lease
// lapsed, not refused; ForceRelease moves the counter on after deleting the
// lock, so Reacquire later finds the counter changed and refuses: the
// operator's release is never undone.
//
// # Fencing tokens
//
// redsync calls SetNX on its Pool's Conn; the package gives every Mutex its
// own Pool and Conn (redsyncBackend, which is also the Lease's backend: one
// allocation for the three) whose SetNX runs scripts/acquire_lock.lua
// instead of a bare SET NX PX: when the SET succeeds, the same script moves
// the tenant's fence counter on and returns the token, so a token is taken
// only by the acquirer, in the same atomic step and round trip as the lock.
// The token is the larger of a floor, Clock().UnixMilli(), and the old
// counter plus one (the script writes the floor with SET ... GET, which
// answers the old value in the same command, and writes old+1 over it only
// when the old value is not below the floor: two acquisitions in one
// millisecond). A counter lost to eviction or to a restart from an old snapshot still yields
// a token above every token handed out before, as long as tokens were not
// taken faster than one per millisecond and clocks agree within the time
// between two acquisitions of a tenant. The counter has no TTL, and while
// the lock is held only its holder has moved it, so it is exactly the
// holder's token; ForceRelease compares it with the token the operator saw
// (scripts/force_release_lock.lua, one atomic step). The script is
// idempotent: run again with a value the lock already holds (go-redis
// retrying a call whose answer was lost), it answers the same token and
// writes nothing; 0 therefore always means "held by someone else, nothing
// written".
//
// # Round trips
//
//	Acquire                         1  (acquire_lock.lua)
//	Claim, Adopt                    0  (the caller's script takes the lock)
//	Acquire refused (tenant locked) 2  (acquire_lock.lua, then the holder read: GET, PTTL, GET in MULTI/EXEC)
//	Release                         1  (redsync's compare-and-delete)
//	extension (renewer)             1  (redsync's PEXPIRE-if-ours) every RenewEvery
//	View, ForceRelease, Reacquire   1
//	Forget, Context                 0
//
// redsync sends its release after every failed lock attempt. When the
// script answered 0 (held by someone else, nothing written), the Conn
// answers that release itself (0, not deleted) without a round trip, so a
// refused acquisition costs 2 round trips, not 3. When the call failed or
// timed out, the SET may have landed, and the release goes out.
//
// # Batching
//
// By default (Config.Unbatched false) the script calls (SET NX, extension,
// release) of a Locker have at most two round trips in flight. A call made
// while fewer are in flight goes out at once from its caller's goroutine;
// calls made while two are wait, and as soon as one returns, one sender
// goroutine per Locker sends all of them in one pipeline (no timer delay).
// Each caller still sees one round trip, a pipeline of k acquisitions is one
// round trip for all k, and the sender, long-lived under load, runs
// go-redis on a stack that has grown once instead of growing the stack of
// the goroutine redsync starts for every call. A queued call whose context
// ended is not sent; a caller returns at its context's end at the latest.
// Calls without a deadline (a Release with such a context) are always sent
// directly. The sender exits after a second without work.
//
// # Single-instance mode
//
// NewLocal makes a Locker whose locks live in an in-process table (the
// seed's rule for DEPLOYCOORD_SINGLE_INSTANCE=true: keep executing in memory
// when Redis is unreachable). The Lease talks to its lock through a small
// backend interface, Redis (redsyncBackend) or the table (localBackend), so
// the API and the semantics are the same: a holder value in the same JSON
// form, the same lease, renewal and deadline (an extension is refused only
// after a force-release or an expiry), Reacquire, View and ForceRelease on
// the table, fences strictly increasing per tenant and never below
// Clock().UnixMilli() — so they stay above every token a Redis-backed
// instance handed out before, and a Redis-backed instance started later
// hands out larger ones again (the same floor argument as above).
//
// No lock key exists in Redis then. The fenced task writes compare the lock
// value stored in Redis, so a coordinator holding a Local lease (Lease.Local)
// writes with an empty lock value; the fence and the sequence number are
// still checked. For the same reason no write can delete an in-process lock,
// so a Local lease's Forget frees it (if it still holds the lease's value and
// was not replaced by Reacquire). The ctx arguments are not used by the
// table: every call is a short critical section.
package redislock
