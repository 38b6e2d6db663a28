// Package metrics exposes deploycoord's Prometheus metrics: a Recorder is
// told what happens — by the coordinator (it is a facade.Observer), the
// HTTP API (httpapi.Config.Observe), the Redis client (a
// repository.CommandHook reports to RedisCommand) and the tenant locks
// (redislock.Config.OnRenew) — and reads the state gauges (plans by
// status, orphaned tasks, degraded) at scrape time from the sources given
// to Watch.
//
// It is a package of its own, not part of httpapi, so that programs using
// the API's types (deployctl, the benchmarks) do not link the Prometheus
// client.
//
// Every metric is named deploycoord_*; every label has a bounded set of
// values: task statuses, stage kinds (those registered), outcomes, refusal
// reasons, Redis command names (repository.CommandHook bounds them), route
// patterns ("unmatched" for unknown paths) and HTTP status codes.
package metrics

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Namespace prefixes every metric name.
const Namespace = "deploycoord"

// Bounds of the scrape-time gauges.
const (
	// OrphanPlansMax is how many RUNNING plans (newest first) the
	// orphaned_tasks gauge looks at.
	OrphanPlansMax = 100
	// StatusPlansMax is how many plans (newest first) the plans gauge
	// counts.
	StatusPlansMax = 1000
	// ScrapeTimeout bounds the reads of one scrape.
	ScrapeTimeout = 5 * time.Second
	// scrapeConcurrency bounds the plan reads of one scrape in flight.
	scrapeConcurrency = 8
)

// Histogram buckets, in seconds.
var (
	stageBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	httpBuckets  = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	redisBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
)

// PlanReader is what the scrape-time gauges read: *facade.Coordinator
// implements it.
type PlanReader interface {
	// Plans lists plans, newest first.
	Plans(ctx context.Context, f plan.ListFilter) ([]facade.PlanView, string, error)
	// Plan returns a plan with its counts and orphaned tasks (-1: unknown).
	Plan(ctx context.Context, planID string) (facade.PlanView, error)
}

// State names the sources of the scrape-time gauges. A nil field leaves its
// gauges out.
type State struct {
	// Plans feeds deploycoord_plans and deploycoord_orphaned_tasks.
	Plans PlanReader
	// Degraded feeds deploycoord_degraded (repository.Dual.Degraded).
	Degraded func() bool
	// LongStages feeds deploycoord_long_stages: the stages running on this
	// instance for longer than half their timeout
	// (facade.Coordinator.LongStages; no I/O).
	LongStages func() int
	// LegacyKeys feeds deploycoord_legacy_keys: whether plan creations write
	// the keys of storage layout 1 now (repository.Redis.LegacyKeysOn).
	LegacyKeys func() bool
}

// Recorder records deploycoord's metrics. It is safe for concurrent use;
// every method is cheap (no I/O) except the scrape itself.
type Recorder struct {
	tasksStarted    prometheus.Counter
	tasksFinished   *prometheus.CounterVec
	stageDuration   *prometheus.HistogramVec
	stageRetries    *prometheus.CounterVec
	lockConflicts   prometheus.Counter
	leaseRenewals   *prometheus.CounterVec
	leaseLost       prometheus.Counter
	writeRefusals   *prometheus.CounterVec
	redisErrors     *prometheus.CounterVec
	redisDuration   *prometheus.HistogramVec
	httpRequests    *prometheus.CounterVec
	httpDuration    *prometheus.HistogramVec
	degradedDesc    *prometheus.Desc
	orphanedDesc    *prometheus.Desc
	longStagesDesc  *prometheus.Desc
	legacyKeysDesc  *prometheus.Desc
	plansDesc       *prometheus.Desc
	scrapeErrorDesc *prometheus.Desc

	state atomic.Pointer[State]
}

var _ facade.Observer = (*Recorder)(nil)

// New returns a Recorder whose metrics, and the Go runtime and process
// collectors, are registered with reg (those two are skipped when reg has
// them already). It panics when reg holds deploycoord metrics already: use
// one Recorder per registry.
func New(reg prometheus.Registerer) *Recorder {
	name := func(n string) string { return prometheus.BuildFQName(Namespace, "", n) }
	m := &Recorder{
		tasksStarted: prometheus.NewCounter(prometheus.CounterOpts{Name: name("tasks_started_total"),
			Help: "Task runs started on this instance (start, retry, resume, takeover)."}),
		tasksFinished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("tasks_finished_total"),
			Help: "Task runs ended on this instance, by the status they ended in."}, []string{"status"}),
		stageDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name("stage_duration_seconds"),
			Help: "Duration of stage attempts, by stage kind and outcome (success, failure, skip).", Buckets: stageBuckets},
			[]string{"kind", "outcome"}),
		stageRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("stage_retries_total"),
			Help: "Stage attempts that failed and will be retried, by stage kind."}, []string{"kind"}),
		lockConflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: name("lock_conflicts_total"),
			Help: "Tenant locks found held by another task when a task wanted to start."}),
		leaseRenewals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("lease_renewals_total"),
			Help: "Tenant lock lease extensions, by result (ok: confirmed; failed: refused, failed or timed out)."},
			[]string{"result"}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{Name: name("lease_lost_total"),
			Help: "Tenant lock leases lost by running tasks (refused or lapsed)."}),
		writeRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("fenced_write_refusals_total"),
			Help: "Task writes the store refused, by reason (lock, fence, seq, missing)."}, []string{"reason"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("redis_command_errors_total"),
			Help: "Redis round trips that failed (connection, timeout, error reply), by command (\"pipeline\" for pipelines)."},
			[]string{"command"}),
		redisDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name("redis_command_duration_seconds"),
			Help:    "Duration of Redis round trips, by command (\"pipeline\" for pipelines; blocking feed reads included).",
			Buckets: redisBuckets}, []string{"command"}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("http_requests_total"),
			Help: "HTTP requests answered, by route pattern and status code."}, []string{"route", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name("http_request_duration_seconds"),
			Help:    "Time to answer HTTP requests, by route pattern (long polls and event streams included).",
			Buckets: httpBuckets}, []string{"route"}),
		degradedDesc: prometheus.NewDesc(name("degraded"),
			"1 while answers may come from memory because Redis is unreachable (or writes wait to be written back), else 0.", nil, nil),
		orphanedDesc: prometheus.NewDesc(name("orphaned_tasks"),
			"RUNNING tasks whose owner instance is gone, summed over the newest 100 RUNNING plans.", nil, nil),
		longStagesDesc: prometheus.NewDesc(name("long_stages"),
			"Stages running on this instance for longer than half their timeout (a hung target shows here before the timeout fails it; sum over instances).", nil, nil),
		legacyKeysDesc: prometheus.NewDesc(name("legacy_keys"),
			"1 while this instance's plan creations also write the keys instances of storage layout 1 read (DEPLOYCOORD_LEGACY_KEYS: an older version is alive, or on), else 0.", nil, nil),
		plansDesc: prometheus.NewDesc(name("plans"),
			"Plans by status among the newest 1000 plans (older ones are not counted).", []string{"status"}, nil),
		scrapeErrorDesc: prometheus.NewDesc(name("state_scrape_failed"),
			"1 when the plans and orphaned_tasks gauges could not be read at this scrape (they are left out), else 0.", nil, nil),
	}
	reg.MustRegister(m.tasksStarted, m.tasksFinished, m.stageDuration, m.stageRetries, m.lockConflicts,
		m.leaseRenewals, m.leaseLost, m.writeRefusals, m.redisErrors, m.redisDuration, m.httpRequests,
		m.httpDuration, stateCollector{m})
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				panic("metrics: " + err.Error())
			}
		}
	}
	// Series that exist from the start, so rates and alerts see zeros.
	for _, s := range []task.Status{task.StatusCompleted, task.StatusFailed, task.StatusPaused, task.StatusCancelled} {
		m.tasksFinished.WithLabelValues(string(s))
	}
	for _, r := range []string{"ok", "failed"} {
		m.leaseRenewals.WithLabelValues(r)
	}
	for _, r := range []task.RefuseReason{task.RefusedLock, task.RefusedFence, task.RefusedSeq, task.RefusedMissing} {
		m.writeRefusals.WithLabelValues(string(r))
	}
	return m
}

// Watch sets the sources of the scrape-time gauges (the coordinator and the
// store are made after the Recorder, which they report to).
func (m *Recorder) Watch(s State) { m.state.Store(&s) }

// TaskStarted implements facade.Observer.
func (m *Recorder) TaskStarted() { m.tasksStarted.Inc() }

// TaskFinished implements facade.Observer.
func (m *Recorder) TaskFinished(status task.Status) {
	m.tasksFinished.WithLabelValues(string(status)).Inc()
}

// StageAttempt implements facade.Observer.
func (m *Recorder) StageAttempt(kind string, outcome task.Outcome, d time.Duration) {
	m.stageDuration.WithLabelValues(kind, string(outcome)).Observe(d.Seconds())
}

// StageRetry implements facade.Observer.
func (m *Recorder) StageRetry(kind string) { m.stageRetries.WithLabelValues(kind).Inc() }

// LockConflict implements facade.Observer.
func (m *Recorder) LockConflict() { m.lockConflicts.Inc() }

// LeaseLost implements facade.Observer.
func (m *Recorder) LeaseLost() { m.leaseLost.Inc() }

// WriteRefused implements facade.Observer.
func (m *Recorder) WriteRefused(reason task.RefuseReason) {
	m.writeRefusals.WithLabelValues(string(reason)).Inc()
}

// LeaseRenewed records a lease extension attempt: the hook of
// redislock.Config.OnRenew.
func (m *Recorder) LeaseRenewed(ok bool) {
	if ok {
		m.leaseRenewals.WithLabelValues("ok").Inc()
	} else {
		m.leaseRenewals.WithLabelValues("failed").Inc()
	}
}

// RedisCommand records a Redis round trip: the callback of
// repository.NewCommandHook (which bounds the command names).
func (m *Recorder) RedisCommand(command string, d time.Duration, failed bool) {
	m.redisDuration.WithLabelValues(command).Observe(d.Seconds())
	if failed {
		m.redisErrors.WithLabelValues(command).Inc()
	}
}

// Observe records an HTTP request: the hook of httpapi.Config.Observe.
func (m *Recorder) Observe(route string, status int, d time.Duration) {
	m.httpRequests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.httpDuration.WithLabelValues(route).Observe(d.Seconds())
}

// stateCollector reads the state gauges at scrape time.
type stateCollector struct{ m *Recorder }

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.degradedDesc
	ch <- c.m.orphanedDesc
	ch <- c.m.longStagesDesc
	ch <- c.m.legacyKeysDesc
	ch <- c.m.plansDesc
	ch <- c.m.scrapeErrorDesc
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	s := m.state.Load()
	if s == nil {
		return
	}
	if s.Degraded != nil {
		ch <- prometheus.MustNewConstMetric(m.degradedDesc, prometheus.GaugeValue, boolGauge(s.Degraded()))
	}
	if s.LegacyKeys != nil {
		ch <- prometheus.MustNewConstMetric(m.legacyKeysDesc, prometheus.GaugeValue, boolGauge(s.LegacyKeys()))
	}
	if s.LongStages != nil {
		ch <- prometheus.MustNewConstMetric(m.longStagesDesc, prometheus.GaugeValue, float64(s.LongStages()))
	}
	if s.Plans == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	byStatus, errStatus := planStatuses(ctx, s.Plans)
	orphaned, errOrphans := orphanedTasks(ctx, s.Plans)
	if errStatus == nil {
		for _, st := range plan.Statuses {
			ch <- prometheus.MustNewConstMetric(m.plansDesc, prometheus.GaugeValue, float64(byStatus[st]), string(st))
		}
	}
	if errOrphans == nil {
		ch <- prometheus.MustNewConstMetric(m.orphanedDesc, prometheus.GaugeValue, float64(orphaned))
	}
	failed := 0.0
	if errStatus != nil || errOrphans != nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(m.scrapeErrorDesc, prometheus.GaugeValue, failed)
}

// planStatuses counts the newest StatusPlansMax plans by status (three
// round trips: the listing reads the ids, the records and the counts).
func planStatuses(ctx context.Context, r PlanReader) (map[plan.Status]int, error) {
	ps, _, err := r.Plans(ctx, plan.ListFilter{Limit: StatusPlansMax})
	if err != nil {
		return nil, err
	}
	out := map[plan.Status]int{}
	for _, p := range ps {
		out[p.Status]++
	}
	return out, nil
}

// orphanedTasks sums the orphaned tasks of the newest OrphanPlansMax
// RUNNING plans: a listing, then one Plan read per plan (two round trips
// each; two more for a plan whose running tasks must be read one by one —
// see facade's orphaned count), scrapeConcurrency at a time. A plan whose count is unknown (-1:
// this instance has no recent view of the live instances) or that
// vanished counts 0.
func orphanedTasks(ctx context.Context, r PlanReader) (int, error) {
	ps, _, err := r.Plans(ctx, plan.ListFilter{Status: plan.StatusRunning, Limit: OrphanPlansMax})
	if err != nil {
		return 0, err
	}
	var (
		mu    sync.Mutex
		total int
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, scrapeConcurrency)
	)
	for _, p := range ps {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			v, err := r.Plan(ctx, p.ID)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, facade.ErrNotFound):
			case err != nil:
				if first == nil {
					first = err
				}
			case v.Orphaned > 0:
				total += v.Orphaned
			}
		})
	}
	wg.Wait()
	return total, first
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
