package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi/metrics"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// value returns the value of the series name{labels} in reg (a counter's
// or gauge's value, a histogram's sample count), and whether it exists.
func value(t *testing.T, reg *prometheus.Registry, name string, labels ...string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if len(got) != len(want) {
				continue
			}
			for k, v := range want {
				if got[k] != v {
					continue series
				}
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue(), true
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue(), true
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func must(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	v, ok := value(t, reg, name, labels...)
	if !ok {
		t.Fatalf("no series %s%v", name, labels)
	}
	return v
}

// plans is a PlanReader with canned answers.
type plans struct {
	list     []facade.PlanView
	orphaned map[string]int
	err      error
	calls    atomic.Int64
}

func (p *plans) Plans(_ context.Context, f plan.ListFilter) ([]facade.PlanView, string, error) {
	p.calls.Add(1)
	if p.err != nil {
		return nil, "", p.err
	}
	var out []facade.PlanView
	for _, v := range p.list {
		if f.Status == "" || v.Status == f.Status {
			out = append(out, v)
		}
	}
	if len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, "", nil
}

func (p *plans) Plan(_ context.Context, id string) (facade.PlanView, error) {
	p.calls.Add(1)
	n, ok := p.orphaned[id]
	if !ok {
		return facade.PlanView{}, facade.ErrNotFound
	}
	return facade.PlanView{Plan: &plan.Plan{ID: id, Status: plan.StatusRunning}, Orphaned: n}, nil
}

func planView(i int, s plan.Status) facade.PlanView {
	return facade.PlanView{Plan: &plan.Plan{ID: fmt.Sprintf("plan-%d", i), Status: s}}
}

func TestRecorderEvents(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		do     func(m *metrics.Recorder)
		metric string
		labels []string
		want   float64
	}{
		{"TaskStarted", func(m *metrics.Recorder) { m.TaskStarted(); m.TaskStarted() }, "deploycoord_tasks_started_total", nil, 2},
		{"TaskFinished", func(m *metrics.Recorder) { m.TaskFinished(task.StatusFailed) }, "deploycoord_tasks_finished_total", []string{"status", "FAILED"}, 1},
		{"StageAttempt", func(m *metrics.Recorder) { m.StageAttempt("http", task.OutcomeFailure, 2*time.Second) },
			"deploycoord_stage_duration_seconds", []string{"kind", "http", "outcome", "failure"}, 1},
		{"StageRetry", func(m *metrics.Recorder) { m.StageRetry("http") }, "deploycoord_stage_retries_total", []string{"kind", "http"}, 1},
		{"LockConflict", func(m *metrics.Recorder) { m.LockConflict() }, "deploycoord_lock_conflicts_total", nil, 1},
		{"LeaseRenewedOK", func(m *metrics.Recorder) { m.LeaseRenewed(true); m.LeaseRenewed(false) }, "deploycoord_lease_renewals_total", []string{"result", "ok"}, 1},
		{"LeaseRenewedFailed", func(m *metrics.Recorder) { m.LeaseRenewed(false) }, "deploycoord_lease_renewals_total", []string{"result", "failed"}, 1},
		{"LeaseLost", func(m *metrics.Recorder) { m.LeaseLost() }, "deploycoord_lease_lost_total", nil, 1},
		{"WriteRefused", func(m *metrics.Recorder) { m.WriteRefused(task.RefusedFence) }, "deploycoord_fenced_write_refusals_total", []string{"reason", "fence"}, 1},
		{"RedisDuration", func(m *metrics.Recorder) { m.RedisCommand("get", time.Millisecond, false) }, "deploycoord_redis_command_duration_seconds", []string{"command", "get"}, 1},
		{"RedisError", func(m *metrics.Recorder) {
			m.RedisCommand("get", time.Millisecond, true)
			m.RedisCommand("get", 0, false)
		},
			"deploycoord_redis_command_errors_total", []string{"command", "get"}, 1},
		{"HTTPRequest", func(m *metrics.Recorder) { m.Observe("unmatched", 404, time.Millisecond) },
			"deploycoord_http_requests_total", []string{"route", "unmatched", "code", "404"}, 1},
		{"HTTPDuration", func(m *metrics.Recorder) { m.Observe("/v1/plans", 200, time.Millisecond) },
			"deploycoord_http_request_duration_seconds", []string{"route", "/v1/plans"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			m := metrics.New(reg)
			if v, _ := value(t, reg, tt.metric, tt.labels...); v != 0 {
				t.Fatalf("%s = %v before anything happened", tt.metric, v)
			}
			tt.do(m)
			if got := must(t, reg, tt.metric, tt.labels...); got != tt.want {
				t.Fatalf("%s%v = %v, want %v", tt.metric, tt.labels, got, tt.want)
			}
		})
	}
}

func TestRecorderZeroSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	for _, s := range []struct{ name, label, value string }{
		{"deploycoord_tasks_finished_total", "status", "COMPLETED"},
		{"deploycoord_lease_renewals_total", "result", "failed"},
		{"deploycoord_fenced_write_refusals_total", "reason", "lock"},
	} {
		if _, ok := value(t, reg, s.name, s.label, s.value); !ok {
			t.Errorf("%s{%s=%q} is not there from the start", s.name, s.label, s.value)
		}
	}
	if _, ok := value(t, reg, "go_goroutines"); !ok {
		t.Error("no Go runtime metrics")
	}
	if _, ok := value(t, reg, "deploycoord_degraded"); ok {
		t.Error("deploycoord_degraded reported before Watch")
	}
}

func TestRecorderState(t *testing.T) {
	t.Parallel()
	t.Run("OK", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		m := metrics.New(reg)
		src := &plans{orphaned: map[string]int{"plan-0": 2, "plan-1": -1, "plan-2": 3}}
		src.list = []facade.PlanView{planView(0, plan.StatusRunning), planView(1, plan.StatusRunning),
			planView(2, plan.StatusRunning), planView(3, plan.StatusRunning), planView(4, plan.StatusFailed)}
		var degraded, legacy atomic.Bool
		var long atomic.Int64
		m.Watch(metrics.State{Plans: src, Degraded: degraded.Load, LongStages: func() int { return int(long.Load()) }, LegacyKeys: legacy.Load})
		if got := must(t, reg, "deploycoord_legacy_keys"); got != 0 {
			t.Errorf("legacy_keys = %v", got)
		}
		legacy.Store(true)
		if got := must(t, reg, "deploycoord_legacy_keys"); got != 1 {
			t.Errorf("legacy_keys = %v while they are written", got)
		}
		if got := must(t, reg, "deploycoord_long_stages"); got != 0 {
			t.Errorf("long_stages = %v", got)
		}
		long.Store(3)
		if got := must(t, reg, "deploycoord_long_stages"); got != 3 {
			t.Errorf("long_stages = %v, want 3", got)
		}
		if got := must(t, reg, "deploycoord_degraded"); got != 0 {
			t.Errorf("degraded = %v", got)
		}
		// plan-1 cannot tell (-1), plan-3 vanished: they count 0.
		if got := must(t, reg, "deploycoord_orphaned_tasks"); got != 5 {
			t.Errorf("orphaned_tasks = %v, want 5", got)
		}
		if r, f, c := must(t, reg, "deploycoord_plans", "status", "RUNNING"), must(t, reg, "deploycoord_plans", "status", "FAILED"),
			must(t, reg, "deploycoord_plans", "status", "CANCELLED"); r != 4 || f != 1 || c != 0 {
			t.Errorf("plans RUNNING %v FAILED %v CANCELLED %v", r, f, c)
		}
		degraded.Store(true)
		if got := must(t, reg, "deploycoord_degraded"); got != 1 {
			t.Errorf("degraded = %v after the store degraded", got)
		}
	})
	t.Run("ErrLeftOut", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		m := metrics.New(reg)
		m.Watch(metrics.State{Plans: &plans{err: errors.New("redis down")}})
		if _, ok := value(t, reg, "deploycoord_plans", "status", "RUNNING"); ok {
			t.Error("plans gauge reported although the plans could not be read")
		}
		if got := must(t, reg, "deploycoord_state_scrape_failed"); got != 1 {
			t.Errorf("state_scrape_failed = %v", got)
		}
		if _, ok := value(t, reg, "deploycoord_long_stages"); ok {
			t.Error("long_stages reported without a source")
		}
	})
	t.Run("BoundedOK", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		m := metrics.New(reg)
		src := &plans{orphaned: map[string]int{}}
		for i := range 300 {
			src.list = append(src.list, planView(i, plan.StatusRunning))
			src.orphaned[fmt.Sprintf("plan-%d", i)] = 1
		}
		m.Watch(metrics.State{Plans: src})
		if got := must(t, reg, "deploycoord_orphaned_tasks"); got != metrics.OrphanPlansMax {
			t.Errorf("orphaned_tasks = %v, want %d (the newest %d RUNNING plans)", got, metrics.OrphanPlansMax, metrics.OrphanPlansMax)
		}
		if c := src.calls.Load(); c != 2+metrics.OrphanPlansMax {
			t.Errorf("a scrape made %d reads, want %d", c, 2+metrics.OrphanPlansMax)
		}
	})
}

func TestRecorderHTTP(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.TaskStarted()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "\ndeploycoord_tasks_started_total 1\n") {
		t.Fatalf("scrape:\n%s", b)
	}
}

func TestNewTwiceOnOneRegistryPanics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	defer func() {
		if recover() == nil {
			t.Fatal("a second Recorder on the same registry did not panic")
		}
	}()
	metrics.New(reg)
}
