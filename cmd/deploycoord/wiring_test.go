package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/repository"
)

// wiringLogs collects a Main's log lines.
type wiringLogs struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *wiringLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// find returns the decoded log lines with level and message.
func (l *wiringLogs) find(level, msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(l.b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["level"] == level && strings.Contains(fmt.Sprint(m["message"]), msg) {
			out = append(out, m)
		}
	}
	return out
}

func (l *wiringLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// wiringEnv is a getenv over "KEY=value" pairs.
func wiringEnv(kv ...string) func(string) string {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

// startWired runs a Main on a free loopback port with the environment kv
// and the flags args, closed when the test ends.
func startWired(t *testing.T, kv []string, args ...string) (*Main, *wiringLogs) {
	t.Helper()
	logs := &wiringLogs{}
	m := NewMain(logs, io.Discard)
	if err := m.ParseFlags(append([]string{"-listen", "127.0.0.1:0"}, args...), wiringEnv(kv...)); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v\n%s", err, logs)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if t.Failed() {
			t.Logf("logs:\n%s", logs)
		}
	})
	return m, logs
}

// wiredCall sends a request to m's API and returns the status and body.
func wiredCall(t *testing.T, m *Main, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+m.Addr+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// wiredJSON calls m's API, wants status and decodes the answer into v.
func wiredJSON(t *testing.T, m *Main, method, path, body string, status int, v any) {
	t.Helper()
	st, b := wiredCall(t, m, method, path, body)
	if st != status {
		t.Fatalf("%s %s = %d, want %d: %s", method, path, st, status, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
}

// wiredAwait polls cond every 20ms for up to 15s.
func wiredAwait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 15s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWiringSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		env        []string
		args       []string
		single     bool
		advertise  string
		errMention string
	}{
		{"DefaultsOK", nil, nil, false, "", ""},
		{"SingleFromEnvOK", []string{"DEPLOYCOORD_SINGLE_INSTANCE=true"}, nil, true, "", ""},
		{"SingleFlagWinsOK", []string{"DEPLOYCOORD_SINGLE_INSTANCE=true"}, []string{"-single-instance=false"}, false, "", ""},
		{"AdvertiseOK", []string{"DEPLOYCOORD_ADVERTISE_ADDR=coord-a.internal:8080"}, nil, false, "coord-a.internal:8080", ""},
		{"AdvertiseFlagOK", nil, []string{"-advertise-addr", "10.0.0.7:9000"}, false, "10.0.0.7:9000", ""},
		{"ErrSingleNotBool", []string{"DEPLOYCOORD_SINGLE_INSTANCE=maybe"}, nil, false, "", "DEPLOYCOORD_SINGLE_INSTANCE"},
		{"ErrAdvertiseNoPort", []string{"DEPLOYCOORD_ADVERTISE_ADDR=coord-a"}, nil, false, "", "DEPLOYCOORD_ADVERTISE_ADDR"},
		{"ErrAdvertiseSpace", []string{"DEPLOYCOORD_ADVERTISE_ADDR=coord a:80"}, nil, false, "", "DEPLOYCOORD_ADVERTISE_ADDR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := ParseConfig(tt.args, wiringEnv(tt.env...), io.Discard)
			if tt.errMention != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errMention) {
					t.Fatalf("err = %v, want one naming %s", err, tt.errMention)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.SingleInstance != tt.single || c.AdvertiseAddr != tt.advertise {
				t.Fatalf("SingleInstance %t, AdvertiseAddr %q; want %t, %q", c.SingleInstance, c.AdvertiseAddr, tt.single, tt.advertise)
			}
		})
	}
}

// TestWiringSingleInstance runs a task with and without
// DEPLOYCOORD_SINGLE_INSTANCE: in single-instance mode the tenant lock is
// in-process (held as the API shows, no lock key in Redis) and the
// instance registry says so.
func TestWiringSingleInstance(t *testing.T) {
	t.Parallel()
	for _, single := range []bool{true, false} {
		t.Run(fmt.Sprintf("Single%t", single), func(t *testing.T) {
			t.Parallel()
			m, logs := startWired(t, []string{fmt.Sprintf("DEPLOYCOORD_SINGLE_INSTANCE=%t", single)},
				"-lock-lease", "3s", "-advertise-addr", "coord-1.internal:8080")
			warned := len(logs.find("warn", "SINGLE-INSTANCE MODE")) > 0
			if warned != single {
				t.Errorf("single-instance warning logged: %t, in single-instance mode: %t", warned, single)
			}
			var p httpapi.Plan
			// The stage holds the lock 3s, so the checks below run while the
			// task does, even on a loaded machine.
			wiredJSON(t, m, "POST", "/v1/plans", `{"name": "s", "stages": [{"name": "hold", "kind": "sleep", "sleep": {"duration": "3s"}}], "tenants": [{"tenantId": "t-one"}]}`, 201, &p)
			// Wait for the lock of the started task (RUNNING with the lock's
			// fence), not just any lock: an acquisition whose SET NX outlived
			// its call bound is undone (redsync deletes the key it set) and
			// taken again later, so a lock seen held before the task started
			// may be gone at the next read (seen in CI under load).
			var lock httpapi.Lock
			var tk httpapi.TaskDetail
			wiredAwait(t, "lock held by the running task", func() bool {
				wiredJSON(t, m, "GET", "/v1/tenants/t-one/lock", "", 200, &lock)
				wiredJSON(t, m, "GET", "/v1/tenants/t-one/task", "", 200, &tk)
				return lock.Held && tk.Status == "RUNNING" && tk.Fence == lock.Fence
			})
			keys, err := repository.NewKeys(m.Config.KeyPrefix)
			if err != nil {
				t.Fatal(err)
			}
			lockKey, _ := keys.Lock("t-one")
			n, err := m.client.Exists(context.Background(), lockKey).Result()
			if err != nil {
				t.Fatal(err)
			}
			if (n == 1) == single {
				t.Errorf("lock key %s exists: %t, in single-instance mode: %t", lockKey, n == 1, single)
			}
			var insts httpapi.InstanceList
			wiredJSON(t, m, "GET", "/v1/instances", "", 200, &insts)
			if len(insts.Instances) != 1 || insts.Instances[0].SingleInstance != single || insts.Instances[0].Addr != "coord-1.internal:8080" ||
				insts.Instances[0].Version != Version || !insts.Instances[0].Alive {
				t.Errorf("instances = %+v", insts.Instances)
			}
			wiredAwait(t, "plan completed", func() bool {
				wiredJSON(t, m, "GET", "/v1/plans/"+p.PlanID, "", 200, &p)
				return p.Status == "COMPLETED"
			})
		})
	}
}

// TestWiringReadyz runs the server on a throwaway Redis that may evict
// keys and keeps nothing on disk: the self-check warns at start and in
// /readyz; a hung Redis makes /readyz 503 (with the checks), a restart
// shows.
func TestWiringReadyz(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--maxmemory-policy", "volatile-lru")
	m, logs := startWired(t, nil, "-redis-url", "redis://"+srv.Addr, "-key-prefix", redistest.Prefix(t))
	var warnings []string
	for _, l := range logs.find("warn", "redis self-check") {
		warnings = append(warnings, fmt.Sprint(l["warning"]))
	}
	if !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "maxmemory-policy is volatile-lru") }) {
		t.Errorf("start-up self-check warnings = %q", warnings)
	}
	var r httpapi.Readiness
	wiredJSON(t, m, "GET", "/readyz", "", 200, &r)
	sc := r.Checks.SelfCheck
	if r.Checks.Redis != "ok" || r.Checks.Degraded || r.Checks.PendingWrites != 0 || sc == nil || sc.RunID == "" || sc.Restarted || sc.CheckedAt == nil {
		t.Fatalf("ready checks = %+v, self-check %+v", r.Checks, sc)
	}
	joined := strings.Join(sc.Warnings, "\n")
	if !strings.Contains(joined, "maxmemory-policy is volatile-lru") || !strings.Contains(joined, "no persistence") {
		t.Errorf("self-check warnings = %q", sc.Warnings)
	}

	srv.Stop()
	st, body := wiredCall(t, m, "GET", "/readyz", "")
	srv.Cont()
	var p struct {
		httpapi.Problem
		Checks httpapi.ReadyChecks `json:"checks"`
	}
	if err := json.Unmarshal(body, &p); err != nil || st != 503 || p.Code != httpapi.CodeUnavailable || p.Checks.Redis == "ok" || p.Checks.SelfCheck == nil {
		t.Fatalf("readyz with Redis stopped = %d %s", st, body)
	}

	// Read the settings at every probe from now on, and restart Redis: a
	// new run id.
	m.selfCheck.mu.Lock()
	m.selfCheck.every = 0
	m.selfCheck.mu.Unlock()
	srv.Restart()
	wiredAwait(t, "restart shown", func() bool {
		st, b := wiredCall(t, m, "GET", "/readyz", "")
		var r httpapi.Readiness
		return st == 200 && json.Unmarshal(b, &r) == nil && r.Checks.SelfCheck != nil && r.Checks.SelfCheck.Restarted &&
			r.Checks.SelfCheck.RunID != sc.RunID
	})
}

// TestWiringMetricsAndLongPoll runs a task on the shared Redis and scrapes
// /metrics: the coordinator, lease renewals, Redis commands and HTTP
// requests are all measured. A long poll longer than the Redis client's
// read timeout (3s) ends normally.
func TestWiringMetricsAndLongPoll(t *testing.T) {
	t.Parallel()
	_, prefix := redistest.Real(t) // skips without a Redis; deletes the prefix after
	m, _ := startWired(t, nil, "-redis-url", "redis://"+redistest.Addr(), "-key-prefix", prefix, "-lock-lease", "2s")
	if got, want := m.redisPool, 10*runtime.GOMAXPROCS(0)+httpapi.MaxLongPollsDefault; got != want {
		t.Errorf("Redis pool size = %d, want %d", got, want)
	}

	type polled struct {
		status int
		feed   httpapi.Feed
		took   time.Duration
	}
	done := make(chan polled, 1)
	go func() {
		start := time.Now()
		st, b := wiredCall(t, m, "GET", "/v1/events?after=$&type=plan.cancelled&wait=4s", "")
		var f httpapi.Feed
		_ = json.Unmarshal(b, &f)
		done <- polled{st, f, time.Since(start)}
	}()

	var p httpapi.Plan
	wiredJSON(t, m, "POST", "/v1/plans", `{"name": "m", "stages": [{"name": "hold", "kind": "sleep", "sleep": {"duration": "1500ms"}}], "tenants": [{"tenantId": "t-m"}]}`, 201, &p)
	wiredAwait(t, "plan completed", func() bool {
		wiredJSON(t, m, "GET", "/v1/plans/"+p.PlanID, "", 200, &p)
		return p.Status == "COMPLETED"
	})
	// The plan is COMPLETED in Redis as soon as the final write's script
	// ran; the runner counts the task finished once it has the answer: read
	// the metrics until they show it (the other checks follow from it).
	var mfs map[string]*dto.MetricFamily
	finished := func() bool {
		st, body := wiredCall(t, m, "GET", "/metrics", "")
		if st != 200 {
			t.Fatalf("GET /metrics = %d %s", st, body)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		var err error
		if mfs, err = parser.TextToMetricFamilies(bytes.NewReader(body)); err != nil {
			t.Fatal(err)
		}
		for _, mm := range mfs["deploycoord_tasks_finished_total"].GetMetric() {
			if mm.GetCounter().GetValue() > 0 {
				return true
			}
		}
		return false
	}
	wiredAwait(t, "task counted finished", finished)
	sum := func(name string, match func(labels map[string]string) bool) float64 {
		total := 0.0
		for _, mm := range mfs[name].GetMetric() {
			labels := map[string]string{}
			for _, lp := range mm.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if !match(labels) {
				continue
			}
			switch {
			case mm.Counter != nil:
				total += mm.GetCounter().GetValue()
			case mm.Histogram != nil:
				total += float64(mm.GetHistogram().GetSampleCount())
			case mm.Gauge != nil:
				total += mm.GetGauge().GetValue()
			}
		}
		return total
	}
	all := func(map[string]string) bool { return true }
	label := func(k, v string) func(map[string]string) bool {
		return func(l map[string]string) bool { return l[k] == v }
	}
	checks := []struct {
		what string
		got  float64
		ok   func(float64) bool
	}{
		{"tasks finished COMPLETED", sum("deploycoord_tasks_finished_total", label("status", "COMPLETED")), func(v float64) bool { return v == 1 }},
		{"lease renewals ok (1.5s stage, renewals every 667ms)", sum("deploycoord_lease_renewals_total", label("result", "ok")), func(v float64) bool { return v >= 1 }},
		{"redis round trips", sum("deploycoord_redis_command_duration_seconds", all), func(v float64) bool { return v > 10 }},
		{"POST /v1/plans 201", sum("deploycoord_http_requests_total", func(l map[string]string) bool { return l["route"] == "/v1/plans" && l["code"] == "201" }),
			func(v float64) bool { return v == 1 }},
		{"plans COMPLETED", sum("deploycoord_plans", label("status", "COMPLETED")), func(v float64) bool { return v == 1 }},
		{"degraded", sum("deploycoord_degraded", all), func(v float64) bool { return v == 0 }},
		{"go runtime", sum("go_goroutines", all), func(v float64) bool { return v > 0 }},
	}
	for _, c := range checks {
		if !c.ok(c.got) {
			t.Errorf("%s = %v", c.what, c.got)
		}
	}
	// A gauge checked for 0 must be there at all.
	if len(mfs["deploycoord_degraded"].GetMetric()) == 0 {
		t.Error("deploycoord_degraded is not exported")
	}

	r := <-done
	if r.status != 200 || len(r.feed.Events) != 0 || r.took < 3500*time.Millisecond {
		t.Fatalf("4s long poll = %d %+v after %s", r.status, r.feed, r.took)
	}
}
