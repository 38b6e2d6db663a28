// Package repository stores plans and tasks: in Redis (Redis, the
// authoritative copy every instance reads), in process memory (Memory, for
// tests and as the bounded half of Dual) and in both (Dual, the double write
// of docs/architecture.md, "The storage layout"). All three implement facade.Store. go-redis lives here and
// in no other domain package; its errors never leave the package.
//
// # Keys
//
// Keys (keys.go) builds every key; braces are literal Redis Cluster hash
// tags, so everything about one tenant shares the tenant's slot and
// everything about one plan the plan's slot. Every id is checked against its
// allowlist (task.ValidTenantID, task.ValidID, plan.ValidID) before it
// reaches a key; a bad one is an error and nothing is sent.
//
//	key                                    type    holds                                   TTL
//	{p}plan:{planId}                       HASH    plan record                             Config.TTL
//	{p}plan:{planId}:tasks                 LIST    task ids in plan order                  Config.TTL
//	{p}plan:{planId}:counts                HASH    counts per status, RUNNING@<owner>,     Config.TTL
//	                                               ledger t:<taskId>
//	{p}plan:{planId}:queue                 LIST    shared work: <kind>|<tenantId>|<taskId>  Config.TTL
//	{p}plan:{planId}:permits               ZSET    claimed entries by lease end ms          Config.TTL
//	                                               (Redis clock; see queue.go)
//	{p}plans                               ZSET    plan ids by creation ms                 none (pruned
//	                                                                                       on create)
//	{p}plans:active                        SET     plan ids whose work may be queued       none
//	{p}task:{tenantId}:<taskId>            HASH    task record (and ttlAt)                 Config.TTL
//	{p}task:{tenantId}:<taskId>:timeline   LIST    JSON task.Event, newest TimelineMax     Config.TTL
//	{p}ckpt:{tenantId}:<taskId>            STRING  checkpoint JSON                         Config.TTL
//	{p}taskrefs:{<hour>.<shard>}           HASH    task id -> tenant id, for the tasks     Config.TTL
//	                                               whose id was made in that hour (Unix    (after the
//	                                               ms / 3 600 000), one of 16 shards by    last task
//	                                               the id's last digit                     added)
//	{p}index:tenant:{tenantId}:history     ZSET    the tenant's task ids by creation ms;   Config.TTL
//	                                               the newest (among ties the greatest
//	                                               id) is the tenant's current task
//	{p}lock:tenant:{tenantId}              STRING  lock value (package tenantlock)         lease
//	{p}fence:tenant:{tenantId}             STRING  fencing counter (package tenantlock)    none
//	{p}events                              STREAM  event feed, an entry per batch of      trimmed to
//	                                               events (n, c, b: see Event feed)        Config.EventsMax
//	                                                                                       events
//	{p}instances                           ZSET    instance ids by last heartbeat ms       none (pruned
//	                                                                                       on register)
//	{p}instance:{<id>}                     HASH    instance record (id, addr, version,     registration
//	                                               startedAt, lastSeen, tasksRunning,      ttl
//	                                               singleInstance, storageLayout)
//	{p}index:tenant:{tenantId}             STRING  storage layout 1's tenant index and     Config.TTL
//	{p}taskref:{taskId}                    STRING  taskref, written only for instances of
//	                                               that layout (Config.LegacyKeys,
//	                                               legacy.go)
//	{p}legacy:backfill                     STRING  marker of the last backfill of those    10 minutes
//	                                               keys (its start time)
//
// TTLs are set when a key is created and given again by the writes that
// touch it once it has lost more than min(TTL/100, 30 s) of it: a task
// record holds ttlAt, when its keys last got the TTL (the writer's clock,
// Unix ms; set at creation), which write_task.lua reads with the record's
// other fields and, past the margin, refreshes the record, timeline,
// checkpoint and history together (they were set together) and
// ttlAt — as far as the instances' clocks agree (one whose clock is behind
// by d refreshes d later);
// a counts move does the same for the plan's keys with the plan record's
// ttlAt (set at creation); the taskref bucket is refreshed with the counts moves of a
// task created longer ago than the margin. A checkpoint is always SET with the
// TTL and a timeline a write creates gets it. So a key expires between
// TTL - 30 s and TTL after the last write that touched it — no command of
// its own on most writes instead of five PEXPIREs (a running task's keys have
// days left).
// UpdatePlan, CreatePlan and the other writes set the TTL of what they write.
//
// # Scripts
//
// Lua scripts sit in scripts/<verb>_<noun>.lua, embedded, each opening with
// a header listing KEYS, ARGV and the reply. Every key comes in KEYS (none is
// built in Lua), time comes in ARGV from Config.Clock, no source is built
// from input, no Redis Functions. A store loads all scripts on first use
// (SCRIPT LOAD, one round trip, or Preload; on a Redis Cluster to every
// node) and runs them with EVALSHA; a script Redis no longer knows
// (NOSCRIPT, after a restart, a SCRIPT FLUSH or a promoted replica) is sent
// again with EVAL to the node that answered so, also inside pipelines, and
// the next call reloads them all. Every script touches keys of one slot
// (the tenant's or the plan's): it runs unchanged on a cluster. derive_plan.lua is a library prepended to the three scripts
// that move counts.
//
// # The write protocol
//
// A stage transition is one round trip: one pipeline holding
//
//  1. write_task.lua, in the tenant's slot: refuses (writing nothing) when
//     the record is missing, when a lock value is given and the tenant lock
//     does not hold it, when the stored fence is above the writer's, or when
//     the stored seq is not the expected one — in that order — and replies
//     with the stored status, seq, fence and owner (the *task.RefusedError).
//     Otherwise it writes the mutable fields (seq+1, fence = the writer's),
//     the checkpoint, the timeline (bounded: one RPUSH, an LTRIM only past
//     the bound), the TTLs when due, clears the requests if asked, deletes
//     the lock if asked (its value matched) and replies with the seq and the
//     stored pause/cancel requests. A write id stored on the record makes a
//     client-retried write succeed again without writing. The fields written
//     at creation and normally never changed (plan id, params, total stages,
//     creation time) are sent as a digest only; a write whose task changed
//     one of them is answered "send them" before anything is written, and
//     the store sends it again with them (one more round trip, record.go).
//     A write of a RUNNING task (not a start, re-run or takeover) sends
//     only the mutable fields that changed since the task's last write this
//     store saw acknowledged, and heartbeatAt, relative to that write's id
//     ("?prevWrite"); a record that no longer carries that id answers "send
//     them" the same way (delta.go; Config.FullWrites turns it off).
//     A task's first write (seq 0: the record as created, which leaves out
//     the mutable fields at their zero) leaves out those still at their
//     zero too.
//     The script runs after a prefix of its kind (scripts.go): write_lock.lua
//     for a write under a lock taken before, start_lock.lua for a task's
//     start that takes the tenant lock itself (task.Write.TakeLock: a key
//     more, the fence counter). The start's checks are those above but the
//     lock's; once they pass it takes the lock (SET NX PX, the write's lock
//     value and ARGV[7] ms) and the fence (SET … GET of the counter to the
//     write's fence), or refuses with {3, "locked" | "fence"} — the counter
//     put back, the lock deleted, nothing written: *task.LockNotTakenError,
//     and the caller takes the lock the usual way. A run's last write
//     (task.Write.ReleaseLock) checks and deletes the lock with one GETDEL:
//     another value found is put back with Config.LockLease as TTL and the
//     write refused ("lock"); a later refusal (fence, seq, "send them")
//     puts the writer's own lock back the same way.
//  2. move_plan_counts.lua, in the plan's slot, only when the write moves
//     the counts: when the status changes (Write.PrevStatus != Task.Status),
//     and on a takeover or re-run of a RUNNING task — PrevStatus and status
//     RUNNING with Write.ClearRequests set, as the coordinator sets it on
//     every re-run and takeover write (a stage write of a RUNNING task
//     leaves ClearRequests unset and the counts alone). The counts hash
//     holds, per task, a ledger entry "status|seq|fence|writeId|owner|tenant".
//     The update applies only if the write's (seq, fence) is greater than
//     the entry's: it moves the status counters (and RUNNING@<owner>) from
//     the entry's status to the new one — or, the status unchanged, moves
//     RUNNING@<owner> from the entry's owner to the new one — stores the
//     entry and derives the plan's status with the rule of plan.Derive, the
//     task's move being the entry's status → the new status (written to the
//     plan hash when it changes; returned as task.WriteResult.PlanStatus).
//     An update that does not apply moves and derives nothing. A move to an
//     active status whose counter is then at least 1 (every task start)
//     skips the derivation: under plan.Derive's rule it cannot change the
//     plan's status unless it re-runs a task of a finished plan (derived).
//
// Why the counts cannot drift from the records: every committed write has a
// larger seq than the one before it (compare-and-set), so its update beats
// every earlier entry. A refused write carries a seq no larger than the
// stored one (stale) or one more (refused by lock or fence); in the second
// case it usually ties the next committed write's seq with a smaller fence,
// but not always (an unlocked operator write racing a writer whose lease
// lapsed). The pipelines of two writers may also interleave, so a refused
// write's update can land before a committed one's and make it lose. Hence
// the rule: when step 1 says "refused" and step 2 says "applied", the store
// reads the record (one round trip) and sends correct_plan_counts.lua (one
// more), which — if the entry still carries the refused write's id — sets it
// to the record's state (status, seq, fence, owner) and moves the counters
// with it. Every committed write after that read has a larger seq and still
// applies; every one before it is in the state read. Counts are wrong only
// inside those two round trips; if the writer dies there, RepairCounts (a
// recount of the records, merged with ledger entries newer than the
// recount) puts them right. A task without a ledger entry moves nothing.
//
// Per-owner counters follow the writes that move the counts: a takeover
// (RUNNING → RUNNING with ClearRequests and a new owner) moves the task from
// RUNNING@<old owner> to RUNNING@<new owner>. A write that keeps a RUNNING
// task RUNNING under another owner without ClearRequests would leave the
// counter behind until the task's next status change or a repair; the
// coordinator never makes one.
//
// The task's move also decides what the plan's status does (plan.Derive): a
// finished plan reopens only on a manual re-run (a move to RUNNING from
// anything but PENDING), and the failure threshold pauses only on a new
// failure, so a plan resumed over its threshold runs on. The correction
// derives with the corrected (refused) status → the stored one as the move
// — with no move when the task is stored RUNNING under the refused write's
// fence (the run that sent it, still running: undoing its stale failure is
// no re-run and reopens no plan); RepairCounts derives with no move. A correction that changed the counts
// comes back with the refusal (task.WriteResult.CountsCorrected, with the
// plan's status and counts after it) for the coordinator to publish
// (plan.counts_corrected, and the plan's status event when the refused move
// and its correction together changed the status).
//
// # Group commit
//
// Task writes made while another pipeline of task writes is in flight wait
// and go together in the next one (up to Config.WriteBatchMax writes; no
// timer: a write that finds none in flight is sent at once), and the counts
// moves of one plan in such a pipeline go in one call of
// move_plan_counts.lua, applied in order as if each had its own call. Each
// write still waits for exactly one exchange with Redis: a batch of k writes
// is one round trip for all k. A caller whose context ends while it waits is
// answered at once with the context's error (its write is dropped if not
// sent yet; if sent, it may land — as after a timeout). Config.NoWriteBatching
// sends every write in a pipeline of its own. See groupcommit.go.
//
// The reads of TaskByTenant and Task (the index or taskref, the record and
// the checkpoint) are grouped the same way with the reads of concurrent
// queries: each step of a query waits for one exchange with Redis, shared
// with the others in flight, so the round trips below hold per query and
// under load many queries cost Redis and the server one read and one write
// each side. Config.NoReadBatching turns it off.
//
// # Round trips
//
//	WriteTask, no status change          1   write_task.lua (shared with concurrent writes)
//	WriteTask, status change or takeover 1   pipeline: write_task + move_plan_counts (which also moves
//	  (a start with TakeLock too)
//	                                          the task between the plan's status indexes) + ZADD GT of
//	                                          the plan in {p}plans:status:<S> (+2 when a refused
//	                                          write's counts update applied: read + correction; +1 when
//	                                          the task's fixed fields changed; +1 when the plan record
//	                                          is gone: ZREM of the ZADD's ghost)
//	CreatePlan                           1 + ceil(tasks/Config.Batch)  (1 000 tasks at 500: 3)
//	UpdatePlan, RequestTask, Beat        1
//	Plan                                 1   HGETALL plan + HMGET counts, whatever the plan's size
//	TaskByTenant                         1-2 ZREVRANGE history 0 0 (the index) + HGETALL record + GET
//	                                          checkpoint of the task the index named at the tenant's last
//	                                          query (Config.TenantHints) — or, for a task kept with its
//	                                          version (not RUNNING), the index + HMGET of 6 version
//	                                          fields, the kept record answering when they match
//	                                          (readcache.go) — then, if the index moved on (or no
//	                                          hint, or the version changed), those of its task
//	Task                                 2   HGET taskref bucket (+ GET of an older version's taskref
//	                                          STRING), then HGETALL record + GET checkpoint
//	TenantHistory                        2   ZREVRANGE, then pipelined HGETALLs
//	Timeline                             1   EXISTS + LRANGE
//	PlanTasks (a page)                   2   list_plan_tasks.lua (ids and tenants from the ledger,
//	                                          up to ScanMax entries with a filter), then HGETALLs
//	Plans (a page)                       2   ZREVRANGEBYSCORE, then HGETALLs (more pages of
//	                                          candidates with a status filter, up to ScanMax)
//	PlanCounts (≤ 1 000 plans)           1   pipelined HMGET of each plan's counts hash
//	SearchTasks (a page)                 3   ZREVRANGE of the plans-by-status indexes asked for, then
//	                                          search_plan_tasks.lua per plan (pipelined, 32 plans a
//	                                          round trip, by upper bound), then HGETALLs; 2 with a plan
//	                                          id; +2 a round when stage/Match drop entries (up to
//	                                          ScanMax examined); +1 to prune emptied plans (search.go)
//	RepairCounts                         4 + ceil(tasks/Batch)  (list + ledger, record batches, script,
//	                                          reindex_plan.lua + ZADD GT of the plans-by-status indexes;
//	                                          +1 a batch for tasks whose ledger lost the tenant)
//	TasksByTenant (≤ 1 000 tenants)      1-2 pipelined index reads (+ HGETALL + GET of the hinted tasks),
//	                                          then pipelined HGETALL + GET checkpoint of the others
//	RunningByOwner                       1   HMGET RUNNING@<owner>…, O(owners)
//	RegisterInstance, DeregisterInstance 1   pipeline (HSET + PEXPIRE + ZADD + prune; DEL + ZADD XX)
//	Instances                            2   ZREVRANGE, then pipelined HGETALLs
//	PublishEvents                        1   pipelined append_events.lua, one per 100 events
//	ReadEvents                           1   XREVRANGE + XREAD pipelined (+1 XREVRANGE for "$"; +1
//	                                          XREAD BLOCK for a long poll that finds nothing at once; a
//	                                          read takes one more per chunk, up to FeedScanFactor × Limit
//	                                          events with a filter)
//	ServerInfo, ServerRunID              1   INFO server (+ CONFIG GET × 4, pipelined); on a cluster
//	                                          CLUSTER SLOTS, then one to every master at once
//
// (+1, once per store or after NOSCRIPT, to load the scripts.)
//
// # Errors
//
// Missing records are task.ErrNotFound or plan.ErrNotFound; bad input wraps
// task.ErrInvalid or plan.ErrInvalid; a record that cannot be parsed wraps
// ErrCorrupt and names its key. A connection failure, timeout or context
// deadline while talking to Redis is an *UnavailableError (method
// Unavailable() true, errors.Is ErrUnavailable, and context.DeadlineExceeded
// when that was the cause); a cancelled context stays errors.Is
// context.Canceled. After an unavailable error on a write its outcome is
// unknown: the record's seq tells.
//
// # Instances
//
// Every instance registers itself with a heartbeat (RegisterInstance, ttl =
// the lease): its record expires with the ttl, its entry in {p}instances
// (score = last heartbeat) stays for InstancePruneAfter (a day), pruned by
// later registrations. Instances lists the index newest first; an instance
// whose record expired (crashed) or was removed (DeregisterInstance, a clean
// shutdown, which sets the entry's score to the time it left) is listed with
// its id and last-seen time only, so "last seen 3 min ago" stays visible.
// The coordinator counts a plan's orphaned tasks as RUNNING minus
// RunningByOwner of the live instances.
//
// # Event feed
//
// PublishEvents stores a batch of events as stream entries of up to 100
// events each (append_events.lua, one call per entry, one pipeline): fields
// n (events), c (the feed's running count of events) and b (the events, a
// JSON array). The entry <ms>-<s> holds the events <ms>-<s> .. <ms>-<s+n-1>
// — every event has a stream id of its own, the cursor format the API
// documents — and the next entry starts after them. Each append trims whole
// entries whose events all lie beyond the newest Config.EventsMax (default
// 100 000): retention is a count, not a time, between EventsMax and
// EventsMax + 99 events, so a reader that falls further behind silently
// skips what was trimmed (the task timelines keep each task's history). An
// entry without field b (written before batching) is one event with the
// entry's id. Cursors: "" reads from the oldest kept, "$" from now on
// (turned into the concrete last event id), an event id right after that
// event, also inside an entry (the entry holding it is read with
// XREVRANGE, pipelined with the first XREAD). Filters are applied in Go: a
// call examines at most FeedScanFactor × Limit events and returns the id of
// the last event examined, so a client never reads an event twice. A long
// poll (wait > 0) is XREAD BLOCK, ending 100ms before the context's
// deadline; it holds one pooled connection while it waits.
//
// # Server self-check
//
// ServerInfo reads the run id (its change means a restart or failover) and
// the settings that decide whether data survives: maxmemory-policy must be
// noeviction (an evicted lock, fence or record breaks the guarantees) and
// persistence should be on. Fields Redis will not tell (CONFIG renamed,
// disabled or not permitted; miniredis) are Unknown; ServerInfo.Warnings
// explains each risk. On a Redis Cluster both read every master (the run id
// names each master's, so a restart or failover of any of them, or a master
// joining or leaving, changes it; a warning names the master it is about).
//
// # Memory and Dual
//
// The files, by store:
//
//	Redis    redis.go, redis_create.go, redis_task.go, batch.go, groupcommit.go,
//	         record.go, encode.go, feed_redis.go, instance.go, server.go,
//	         idempotency.go, keys.go, scripts.go + scripts/*.lua
//	Memory   memory.go (plans), memory_task.go (tasks), memfresh.go (compact new
//	         tasks), feed.go (its feed ring), mirror.go (what the Dual asks of
//	         it: Mirror*, Resolve*, *Queued)
//	Dual     dual.go (reads, writes), dual_writebehind.go (write-behind queue),
//	         dual_queue.go (the shared work queue, Redis only)
//
// Dual composes the two through their exported methods only. A stage write
// reads as a straight line: Dual.WriteTask → EncodeWrite (once) →
// Redis.WriteEncoded (group commit, write_task.lua [+ move_plan_counts.lua])
// → Memory.MirrorWrite of the same EncodedWrite.
//
// Memory applies the same checks (the lock through MemoryConfig.LockValue),
// counts, plan.Derive and paging in process memory, with deep copies in and
// out (a walk for plain JSON values, encoding/json for the rest); its feed
// is a ring of exactly MemoryConfig.EventsMax entries. It keeps a new plan's
// tasks compact (memfresh.go: one template record for the plan and, per
// task, what differs from it) until each is first written; its maps are
// reallocated once they fall far below their peak, so a finished plan of
// 100 000 tasks leaves nothing behind. Timelines and checkpoints are kept
// as their JSON. Dual writes to Redis first — the scripts decide — and
// mirrors accepted writes into a Memory with DropFinished, which keeps only
// unfinished tasks and plans; a write's checkpoint and events are encoded
// once for both. It reads Redis and falls back to memory only when Redis is
// unreachable, reporting Degraded until a Redis call succeeds again. With
// shared plans (DualConfig.SharedWork) a plan it creates is not mirrored
// (other instances finish its tasks: memory would hold it for good), and a
// start entry of a shared plan needs no read: the coordinator starts it
// blind (task.Write.Blind, with shared Redis only): write_task.lua checks
// the record is of the writer's plan and answers with its fixed fields,
// which WriteEncoded sets on the task (EncodedWrite.setFixed) before Dual
// mirrors it. The event feed is Redis' only (unavailable when Redis is).
//
// When Redis cannot take a write, Dual has two modes (docs/architecture.md, "When Redis is unreachable or restarts"):
//
//	several instances (default)   the write fails (*UnavailableError); the caller keeps it and
//	                              retries it through the fenced script when Redis is back. Memory
//	                              takes it as pending: the record, checkpoint and counts are
//	                              overwritten, the timeline entries kept apart, the aggregate kept
//	                              even if finished. When the same write succeeds later (or is
//	                              refused because its first attempt had landed) the pending copy
//	                              is replaced, never applied twice; a refusal drops it.
//	single instance               the write is applied to memory with its checks (fence, seq; no
//	(DualConfig.SingleInstance)   lock check: leases are in-process) and queued; the call succeeds.
//	                              While the queue is not empty every write queues behind it, reads
//	                              come from memory (Redis for what memory lacks), Degraded is true,
//	                              RepairCounts is unavailable and queued aggregates stay in memory.
//	                              The flusher (Start/Close) pings Redis every ProbeInterval and
//	                              writes the queue back in order through the normal methods; a task
//	                              write carries the id of its first attempt, so one that reached
//	                              Redis before the timeout is not applied twice; a plan creation
//	                              that did is rewritten whole (a request that did is stored again:
//	                              its timeline entry may appear twice). A write-back Redis refuses
//	                              (e.g. the records are gone after a restart without persistence)
//	                              goes to DualConfig.OnReplayError and is dropped; an unreachable
//	                              Redis stops the flush until the next probe. Heartbeats are
//	                              queued too; Beat accepts an empty lock value (fence check only).
package repository
