package facade

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/internal/readmark"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
)

// Defaults of Config.
const (
	// LeaseDefault is the tenant lock lease; a RUNNING task whose owner has
	// not heartbeated for longer is reported orphaned.
	LeaseDefault = 60 * time.Second
	// PlanPollDefault is how often a plan's owner re-reads the plan record to
	// see pauses, resumes and cancels made on other instances.
	PlanPollDefault = time.Second
	// LockWaitPollDefault is how often a task of an "onTenantLocked: wait"
	// plan tries its tenant's lock again.
	LockWaitPollDefault = 500 * time.Millisecond
	// WriteTimeoutDefault bounds one storage write of a running task.
	WriteTimeoutDefault = 10 * time.Second
	// QueryTimeoutDefault bounds the Redis part of a query.
	QueryTimeoutDefault = 3 * time.Second
	// DegradedQueryTimeout is how long a query tries Redis while it is known
	// to be unreachable, before answering from memory.
	DegradedQueryTimeout = 250 * time.Millisecond
)

// Config configures a Coordinator. Zero fields mean the default.
type Config struct {
	// Instance names this coordinator instance (required); it is stored as
	// the owner of the plans and tasks it runs.
	Instance string
	// Lease is the tenant lock lease (LeaseDefault); it must match the
	// Locker's lease. It is also the orphan threshold.
	Lease time.Duration
	// Stages compiles stage specs into runnable stages (required).
	Stages *stage.Registry
	// Pipelines are the operator-defined pipelines a plan may name.
	Pipelines map[string][]task.StageSpec
	// MaxTenants caps tenants per plan (plan.MaxTenantsDefault).
	MaxTenants int
	// PlanPoll is how often a plan's owner re-reads its plan (PlanPollDefault).
	PlanPoll time.Duration
	// LockWaitPoll is how often a waiting task retries its tenant's lock.
	LockWaitPoll time.Duration
	// WriteTimeout bounds one storage write of a running task.
	WriteTimeout time.Duration
	// QueryTimeout bounds the Redis part of a query (QueryTimeoutDefault);
	// while Redis is known to be unreachable a query tries it for at most
	// DegradedQueryTimeout before answering from memory.
	QueryTimeout time.Duration
	// Clock returns the current time (time.Now).
	Clock Clock
	// Rand returns uniform numbers in [0, 1) for retry jitter (math/rand/v2).
	Rand func() float64
	// Logger receives the coordinator's logs (zerolog.Nop()).
	Logger *zerolog.Logger
	// Observer is told what happens, for metrics (none by default).
	Observer Observer
	// Addr and Version describe this instance in the instance registry.
	Addr, Version string
	// SingleInstance is set when the server runs in single-instance mode
	// (in-process locks; shown in the instance registry).
	SingleInstance bool
	// Heartbeat is how often the instance registers itself (Lease/3).
	Heartbeat time.Duration
	// ServerRunID returns the Redis server's run id; when set, a change is
	// taken as a restart or failover. RestartPoll is how often it is asked
	// (RestartPollDefault).
	ServerRunID func(context.Context) (string, error)
	RestartPoll time.Duration
	// SharedPlans makes a plan's work shared by every live instance
	// (docs/architecture.md, "Shared plan work"): tasks are queued in Redis, any instance running with
	// SharedPlans claims them, and maxConcurrency is one limit across all
	// instances. The store must implement WorkQueue; not with
	// SingleInstance.
	SharedPlans bool
}

// RestartPollDefault is how often the Redis run id is checked.
const RestartPollDefault = time.Second

// Coordinator runs plans and answers queries: the use cases of deploycoord.
// It is safe for concurrent use. Create it with New; stop it with Shutdown.
type Coordinator struct {
	store Store
	// queue is the store's shared work queue in shared mode, else nil.
	queue WorkQueue
	locks Locker[Lease]
	// claims takes a task's lock in its start write (claimstart.go); nil
	// when the store and the locker cannot.
	claims claimer
	// blindStarts: a claimed start entry whose task is not in memory starts
	// without reading the task (blindTask); needs claims.
	blindStarts bool
	cfg         Config
	log         zerolog.Logger
	now         Clock

	mu    sync.Mutex
	plans map[string]*planRun // plans this instance starts tasks for
	tasks map[string]*taskRun // task runs on this instance, by task id
	// acquiring marks, by task id, the calls on this instance between
	// taking a task's lock and registering its run (beginAcquire). A claimed
	// start registers its run only after its RUNNING write lands, so its
	// task is RUNNING here before c.tasks has it: orphaned and localRuns
	// count it as running here meanwhile.
	acquiring map[string]*acquireMark
	runs      sync.WaitGroup

	closing atomic.Bool
	// stopped is every plan run the shutdown stopped (guarded by mu):
	// Shutdown waits for them all, also those that left plans since.
	stopped []*planRun
	// claimedEntries counts the shared plans' claimed entries whose
	// runEntry has not returned — their permit release included — across
	// every run, also a run that ended and left c.plans (Idle).
	claimedEntries atomic.Int64
	// hardStop is cancelled when the shutdown grace period ends: stages
	// still running are interrupted.
	hardStop       context.Context
	cancelHardStop context.CancelFunc

	obs     Observer
	pub     *publisher
	started time.Time
	// live maps the instances alive at the last registry read (liveAt) to
	// their last heartbeat; runID is the Redis run id last seen; while
	// suspectUntil (unix ns) is ahead, no stage starts (Redis restarted).
	live         map[string]time.Time
	liveAt       time.Time
	runID        string
	suspectUntil atomic.Int64
	bgStop       chan struct{}
	bgDone       chan struct{}
	stopOnce     sync.Once
}

// New returns a Coordinator over store and locks. L, the locks' own lease
// type, is inferred from locks.
func New[L Lease](store Store, locks Locker[L], cfg Config) (*Coordinator, error) {
	if store == nil || locks == nil {
		return nil, errors.New("facade: store and locks are required")
	}
	if !task.ValidInstanceID(cfg.Instance) {
		return nil, fmt.Errorf("facade: instance id %s must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", task.Quote(cfg.Instance))
	}
	if cfg.Stages == nil {
		return nil, errors.New("facade: a stage registry is required")
	}
	for name, stages := range cfg.Pipelines {
		if !task.ValidStageName(name) {
			return nil, fmt.Errorf("facade: pipeline name %s is not valid", task.Quote(name))
		}
		if len(stages) == 0 {
			return nil, fmt.Errorf("facade: pipeline %s has no stages", name)
		}
		if err := plan.ValidateStages(stages); err != nil {
			return nil, fmt.Errorf("facade: pipeline %s: %w", name, err)
		}
		if _, err := cfg.Stages.CompileAll(stages, stage.SourceOperator); err != nil {
			return nil, fmt.Errorf("facade: pipeline %s: %w", name, err)
		}
	}
	var queue WorkQueue
	if cfg.SharedPlans {
		q, ok := store.(WorkQueue)
		switch {
		case cfg.SingleInstance:
			return nil, errors.New("facade: shared plans need instances sharing Redis, not the single-instance mode")
		case !ok:
			return nil, fmt.Errorf("facade: shared plans need a store with a work queue; a %T has none", store)
		}
		queue = q
	}
	if cfg.Lease <= 0 {
		cfg.Lease = LeaseDefault
	}
	if cfg.PlanPoll <= 0 {
		cfg.PlanPoll = PlanPollDefault
	}
	if cfg.LockWaitPoll <= 0 {
		cfg.LockWaitPoll = LockWaitPollDefault
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = WriteTimeoutDefault
	}
	if cfg.QueryTimeout <= 0 {
		cfg.QueryTimeout = QueryTimeoutDefault
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = max(cfg.Lease/3, 10*time.Millisecond)
	}
	if cfg.RestartPoll <= 0 {
		cfg.RestartPoll = RestartPollDefault
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	c := &Coordinator{
		store: store, queue: queue, locks: leases[L]{locks}, claims: claimStarts(store, locks), cfg: cfg, now: cfg.Clock,
		log:   log.With().Str("component", "facade").Logger(),
		plans: map[string]*planRun{}, tasks: map[string]*taskRun{},
		obs: cfg.Observer, started: cfg.Clock().UTC(),
		bgStop: make(chan struct{}), bgDone: make(chan struct{}),
	}
	if bs, ok := store.(blindStore); ok && c.claims != nil {
		c.blindStarts = bs.BlindStarts()
	}
	c.hardStop, c.cancelHardStop = context.WithCancel(context.Background())
	c.pub = newPublisher(store, c.log.With().Str("component", "feed").Logger())
	go c.background()
	if queue != nil {
		go c.discover()
	}
	return c, nil
}

// Instance returns this coordinator's instance id.
func (c *Coordinator) Instance() string { return c.cfg.Instance }

// Lease returns the tenant lock lease (the orphan threshold).
func (c *Coordinator) Lease() time.Duration { return c.cfg.Lease }

// Actor says who asks for an operator action, for the audit trail.
type Actor struct {
	// Name is the caller's token name ("" when auth is off: "anonymous").
	Name string
	Role string
	// RequestID ties timeline entries to the HTTP request.
	RequestID string
	// Addr is the client address.
	Addr string
}

func (a Actor) event(typ task.EventType, at time.Time, reason string) task.Event {
	ev := task.Event{At: at.UTC(), Type: typ, Reason: reason, Actor: actorName(a), Role: a.Role, RequestID: a.RequestID}
	if a.Addr != "" {
		ev.Data = map[string]any{"clientAddr": a.Addr}
	}
	return ev
}

func actorName(a Actor) string {
	if a.Name == "" {
		return "anonymous"
	}
	return a.Name
}

// PlanView is a plan as queried: the record, its task counts, how many of
// its RUNNING tasks are orphaned (their owner is not alive; -1 when this
// instance cannot tell) and whether the answer came from memory because
// Redis was unreachable.
type PlanView struct {
	*plan.Plan
	Counts   plan.Counts
	Orphaned int
	Degraded bool
}

// TaskView is a task as queried: the record, its checkpoint (nil if none),
// whether it is orphaned and whether the answer came from memory.
type TaskView struct {
	*task.Task
	Checkpoint *checkpoint.Checkpoint
	Orphaned   bool
	Degraded   bool
	// LockExpiresAt is when the tenant's lock frees unless renewed, for a
	// RUNNING task holding it (a single task's view only; nil otherwise):
	// an orphaned task can be retried from then on.
	LockExpiresAt *time.Time
}

func (c *Coordinator) taskView(t *task.Task, ck *checkpoint.Checkpoint, degraded bool) TaskView {
	return TaskView{Task: t, Checkpoint: ck, Orphaned: c.orphaned(t), Degraded: degraded}
}

// orphaned reports whether t is RUNNING without a live owner: its owner
// instance stopped heartbeating (or, here, does not run it any more), or the
// task's own heartbeat is older than the lease (its lease is gone).
func (c *Coordinator) orphaned(t *task.Task) bool { return c.orphanedBut(t, 0) }

// orphanedBut is orphaned for a caller that is itself between taking the
// tenant lock for t and registering a run of it (own = 1: its beginAcquire
// mark does not make t run here — a take-over by this instance of a task
// left RUNNING under its own id, say by a write a failover lost).
func (c *Coordinator) orphanedBut(t *task.Task, own int) bool {
	if t.Status != task.StatusRunning {
		return false
	}
	if t.Owner == c.cfg.Instance {
		c.mu.Lock()
		_, here := c.tasks[t.ID]
		if m := c.acquiring[t.ID]; m != nil && m.calls > own {
			here = true
		}
		c.mu.Unlock()
		// A task of this instance id that does not run here, nor is being
		// started here, belongs to an earlier process with the same id,
		// which died.
		return !here
	}
	if alive, known := c.ownerAlive(t.Owner); known && !alive {
		return true
	}
	return t.Orphaned(c.now(), c.cfg.Lease)
}

// queryCtx bounds the Redis part of a query: an SRE asking during an
// outage gets the answer from memory, marked degraded, in a blink rather
// than after the client's timeouts.
func (c *Coordinator) queryCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	d := c.cfg.QueryTimeout
	if c.degraded() {
		d = min(d, DegradedQueryTimeout)
	}
	// A mark of its own for the query's reads (degradedOf).
	ctx, _ = readmark.With(ctx)
	return context.WithTimeout(ctx, d)
}

// forgetter is a Store that keeps copies of tasks in memory
// (repository.Dual).
type forgetter interface {
	Forget(taskID string, fence int64)
}

// forget tells the store that this instance stopped its run of task id
// with fence without its last write (lease lost, a start or failure not
// written): its copy of the task is not the stored state, and it will not
// write it again. A newer run of the task here (another fence) keeps its.
func (c *Coordinator) forget(taskID string, fence int64) {
	if f, ok := c.store.(forgetter); ok {
		f.Forget(taskID, fence)
	}
}

// pendingWrites is a Store that may hold writes for Redis (repository.Dual
// in single-instance mode): while it does, Redis' records are behind.
type pendingWrites interface{ Pending() int }

// degradedOf reports whether the answers of the reads made with ctx (a
// query's, from queryCtx) may not be Redis' own: one came from memory (the
// store marked ctx, readmark), or writes wait to be written back. The
// store's Degraded flag is not asked: another goroutine's Redis call may
// clear or set it between this query's reads and this look.
func (c *Coordinator) degradedOf(ctx context.Context) bool {
	if readmark.Memory(ctx) {
		return true
	}
	p, ok := c.store.(pendingWrites)
	return ok && p.Pending() > 0
}

func (c *Coordinator) degraded() bool {
	d, ok := c.store.(interface{ Degraded() bool })
	return ok && d.Degraded()
}

// Running returns the number of task runs in progress on this instance.
func (c *Coordinator) Running() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tasks)
}

// Idle waits until no task runs on this instance and every plan run here
// has ended or waits for its plan to be resumed, with no permit of a shared
// plan left to free (checked every 10ms), or ctx ends; for tests and
// benchmarks.
func (c *Coordinator) Idle(ctx context.Context) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if c.idle() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (c *Coordinator) idle() bool {
	if c.claimedEntries.Load() > 0 {
		return false // a claimed entry's task or its permit's release
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.tasks) > 0 {
		return false
	}
	for _, pr := range c.plans {
		pr.mu.Lock()
		waiting := (pr.waiters > 0 || pr.shared && pr.inflight == 0 && pr.status != plan.StatusRunning) && len(pr.running) == 0 &&
			len(pr.release) == 0 && !pr.freeing // permits to free, or being freed
		pr.mu.Unlock()
		if !waiting {
			return false
		}
	}
	return true
}

// compile resolves and compiles a plan's stages.
func (c *Coordinator) compile(p *plan.Plan) ([]stage.Runnable, error) {
	src := stage.SourceInline
	if p.Pipeline != "" {
		src = stage.SourceOperator
	}
	runs, err := c.cfg.Stages.CompileAll(p.Stages, src)
	if err != nil {
		return nil, wrapf(ErrInvalid, "%v", err)
	}
	return runs, nil
}

func checkTenant(id string) error {
	if err := task.CheckTenantID(id); err != nil {
		return wrapf(ErrInvalid, "%v", err)
	}
	return nil
}

func checkReason(reason string) error {
	if err := plan.CheckReason(reason); err != nil {
		return wrapf(ErrInvalid, "%s", strings.TrimPrefix(err.Error(), plan.ErrInvalid.Error()+": "))
	}
	return nil
}
