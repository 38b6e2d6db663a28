package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/httpapi/metrics"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/tenantlock"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// scrape is one GET /metrics, parsed.
type scrape map[string]*dto.MetricFamily

// get returns the value of name{labels} (a histogram's sample count); NaN
// when the series is not there.
func (s scrape) get(name string, labels ...string) float64 {
	mf := s[name]
	if mf == nil {
		return math.NaN()
	}
series:
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if got[labels[i]] != labels[i+1] {
				continue series
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			return m.GetUntyped().GetValue()
		}
	}
	return math.NaN()
}

// metricsStack is a stack wired with metrics as cmd/deploycoord wires them.
type metricsStack struct {
	*stack
	rec *metrics.Recorder
}

func newMetricsStack(t *testing.T, b redistest.Backend) *metricsStack {
	t.Helper()
	reg := prometheus.NewRegistry()
	rec := metrics.New(reg)
	client, prefix := b.New(t)
	client.AddHook(repository.NewCommandHook(rec.RedisCommand))
	cfg := httpapi.Config{Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), Observe: rec.Observe}
	s := newStackOn(t, client, prefix, "coord-a", cfg, func(fc *facade.Config, lc *redislock.Config) {
		fc.Observer = rec
		lc.OnRenew = rec.LeaseRenewed
		lc.RenewEvery = 200 * time.Millisecond
	})
	if b.Mini != nil {
		s.mini = b.Mini(t)
	}
	rec.Watch(metrics.State{Plans: s.coord, Degraded: s.store.Degraded, LongStages: s.coord.LongStages})
	return &metricsStack{stack: s, rec: rec}
}

func (s *metricsStack) scrape(t *testing.T) scrape {
	t.Helper()
	a := serve(t, s.h, request{method: "GET", path: "/metrics", remote: "127.0.0.1:40000"})
	if a.Status != 200 {
		t.Fatalf("GET /metrics = %d %s", a.Status, a.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(a.Body))
	if err != nil {
		t.Fatalf("parse the scrape: %v", err)
	}
	return mfs
}

// awaitMetric scrapes until name{labels} reaches at least want.
func (s *metricsStack) awaitMetric(t *testing.T, want float64, name string, labels ...string) scrape {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		sc := s.scrape(t)
		if v := sc.get(name, labels...); v >= want {
			return sc
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v after 15s, want at least %v", name, labels, sc.get(name, labels...), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMetricsStack(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			testMetrics(t, newMetricsStack(t, b))
		})
	}
}

func testMetrics(t *testing.T, s *metricsStack) {
	ctx := context.Background()
	before := s.scrape(t)
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if math.IsNaN(before.get(name)) {
			t.Errorf("no %s in the scrape", name)
		}
	}
	if before.get("deploycoord_degraded") != 0 || before.get("deploycoord_orphaned_tasks") != 0 || before.get("deploycoord_plans", "status", "RUNNING") != 0 {
		t.Errorf("state gauges at start: degraded %v orphaned %v running plans %v", before.get("deploycoord_degraded"),
			before.get("deploycoord_orphaned_tasks"), before.get("deploycoord_plans", "status", "RUNNING"))
	}

	t.Run("NotFoundRequest", func(t *testing.T) {
		serve(t, s.h, request{method: "GET", path: "/v1/nothing"})
		if got := s.scrape(t).get("deploycoord_http_requests_total", "route", "unmatched", "code", "404"); got != 1 {
			t.Errorf("404 requests = %v, want 1", got)
		}
	})

	t.Run("PlanRun", func(t *testing.T) {
		p := s.do(t, "POST", "/v1/plans", `{"name": "m", "pipeline": "standard-deploy", "tenants": [{"tenantId": "t-m1"}, {"tenantId": "t-m2"}]}`, 201)
		s.await(t, "/v1/plans/"+p["planId"].(string), "status", "COMPLETED")
		sc := s.awaitMetric(t, 2, "deploycoord_tasks_finished_total", "status", "COMPLETED")
		checks := []struct {
			name   string
			labels []string
			want   float64
		}{
			{"deploycoord_tasks_started_total", nil, 2},
			{"deploycoord_stage_duration_seconds", []string{"kind", "noop", "outcome", "success"}, 2},
			{"deploycoord_plans", []string{"status", "COMPLETED"}, 1},
			{"deploycoord_http_requests_total", []string{"route", "/v1/plans", "code", "201"}, 1},
			{"deploycoord_http_request_duration_seconds", []string{"route", "/v1/plans"}, 1},
		}
		for _, c := range checks {
			if got := sc.get(c.name, c.labels...); got != c.want {
				t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
			}
		}
		was := before.get("deploycoord_redis_command_duration_seconds", "command", "pipeline")
		if math.IsNaN(was) {
			was = 0
		}
		if got := sc.get("deploycoord_redis_command_duration_seconds", "command", "pipeline"); !(got > was) {
			t.Errorf("redis pipelines observed = %v, no more than before the plan", got)
		}
	})

	t.Run("StageRetry", func(t *testing.T) {
		s.failing.Store("t-retry")
		spec := fmt.Sprintf(`{"name": "r", "stages": [{"name": "push", "kind": "http",
			"retry": {"maxAttempts": 2, "backoff": "fixed", "baseDelay": "10ms"},
			"http": {"method": "POST", "url": "%s/tenants/{{.TenantID}}/push", "successStatus": [200], "retryableStatus": [500]}}],
			"tenants": [{"tenantId": "t-retry"}]}`, s.target.URL)
		s.do(t, "POST", "/v1/plans", spec, 201)
		sc := s.awaitMetric(t, 1, "deploycoord_tasks_finished_total", "status", "FAILED")
		if got := sc.get("deploycoord_stage_retries_total", "kind", "http"); got != 1 {
			t.Errorf("http stage retries = %v, want 1", got)
		}
		if got := sc.get("deploycoord_stage_duration_seconds", "kind", "http", "outcome", "failure"); got != 2 {
			t.Errorf("failed http attempts = %v, want 2", got)
		}
	})

	t.Run("LockConflict", func(t *testing.T) {
		lease, err := s.locks.Acquire(ctx, "t-held", tenantlock.Holder{
			PlanID: "plan-01JDQZV5X8M7R2K9C3B4N6P0QS", TaskID: "task-01JDQZV5X8M7R2K9C3B4N6P0QS", Instance: "coord-b"})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = lease.Release(ctx) }()
		s.do(t, "POST", "/v1/plans", `{"name": "l", "pipeline": "standard-deploy", "onTenantLocked": "fail", "tenants": [{"tenantId": "t-held"}]}`, 201)
		s.awaitMetric(t, 1, "deploycoord_lock_conflicts_total")
	})

	t.Run("RenewalsAndRefusedWrite", func(t *testing.T) {
		// The task's record gets a fence above its writer's while its stage
		// sleeps: the write at the stage's end is refused (reason fence);
		// the lock itself is untouched, so its renewals go on.
		s.do(t, "POST", "/v1/plans", `{"name": "f", "stages": [{"name": "wait", "kind": "sleep", "sleep": {"duration": "1s"}}], "tenants": [{"tenantId": "t-fence"}]}`, 201)
		tk := s.await(t, "/v1/tenants/t-fence/task", "status", "RUNNING")
		key, err := s.keys.Task("t-fence", tk["taskId"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.client.HSet(ctx, key, "fence", int64(1)<<60).Err(); err != nil {
			t.Fatal(err)
		}
		sc := s.awaitMetric(t, 1, "deploycoord_fenced_write_refusals_total", "reason", "fence")
		if got := sc.get("deploycoord_lease_renewals_total", "result", "ok"); got < 1 {
			t.Errorf("lease renewals ok = %v during a 1s stage with renewals every 200ms", got)
		}
	})

	t.Run("LeaseLost", func(t *testing.T) {
		s.do(t, "POST", "/v1/plans", `{"name": "x", "stages": [{"name": "wait", "kind": "sleep", "sleep": {"duration": "5s"}}], "tenants": [{"tenantId": "t-lost"}]}`, 201)
		s.await(t, "/v1/tenants/t-lost/task", "status", "RUNNING")
		key, _ := s.keys.Lock("t-lost")
		if err := s.client.Set(ctx, key, "another holder", redis.KeepTTL).Err(); err != nil {
			t.Fatal(err)
		}
		s.awaitMetric(t, 1, "deploycoord_lease_lost_total")
		// The refused renewal is counted before the loss it causes, but a
		// scrape is no snapshot (the registry gathers its collectors
		// concurrently): one scrape may show the loss and not yet the
		// renewal. So it is awaited too, not read from the same scrape.
		s.awaitMetric(t, 1, "deploycoord_lease_renewals_total", "result", "failed")
	})

	if s.mini == nil {
		return
	}
	t.Run("DegradedAndRedisErrors", func(t *testing.T) {
		s.mini.Close()
		serve(t, s.h, request{method: "GET", path: "/v1/tenants/t-m1/task"})
		sc := s.scrape(t)
		if got := sc.get("deploycoord_degraded"); got != 1 {
			t.Errorf("degraded = %v with Redis down", got)
		}
		errs := 0.0
		for _, m := range sc["deploycoord_redis_command_errors_total"].GetMetric() {
			errs += m.GetCounter().GetValue()
		}
		if errs == 0 {
			t.Error("no Redis command errors counted with Redis down")
		}
		// The plans come from memory now (degraded): the gauges stay.
		if got := sc.get("deploycoord_state_scrape_failed"); got != 0 {
			t.Errorf("state_scrape_failed = %v although memory answers", got)
		}
	})
}
