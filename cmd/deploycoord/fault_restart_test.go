package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
)

// readiness is the part of a GET /readyz answer (200 or 503) the drills read.
type readiness struct {
	Status string `json:"status"`
	Checks struct {
		Redis         string `json:"redis"`
		Degraded      bool   `json:"degraded"`
		PendingWrites int    `json:"pendingWrites"`
		SelfCheck     *struct {
			Warnings  []string `json:"warnings"`
			RunID     string   `json:"runId"`
			Restarted bool     `json:"restarted"`
		} `json:"selfCheck"`
	} `json:"checks"`
}

func (n *node) readyz() (int, readiness) {
	n.t.Helper()
	st, _, body, err := n.req("GET", "/readyz", nil)
	if err != nil {
		n.t.Fatalf("GET /readyz on %s: %v", n.name, err)
	}
	var r readiness
	_ = json.Unmarshal(body, &r)
	return st, r
}

// TestFaultSelfCheckWarns is drill 6: on a Redis with maxmemory-policy
// volatile-lru and no persistence, the start-up self-check warns in the log
// and in the checks of /readyz (without making the instance unready).
func TestFaultSelfCheckWarns(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--maxmemory-policy", "volatile-lru")
	d := newDrill(t, srv)
	started := time.Now()
	a := d.start("coord-a")
	wants := []string{"maxmemory-policy is volatile-lru", "no persistence"}
	for _, w := range wants {
		var line logLine
		until(t, 10*time.Second, func() (bool, string) {
			for _, l := range a.log.all() {
				if l.Level == "warn" && strings.Contains(l.Raw, w) {
					line = l
					return true, ""
				}
			}
			return false, fmt.Sprintf("no warn log line mentions %q", w)
		})
		d.figure(fmt.Sprintf("process start → warning %q logged", w), line.At.Sub(started))
		t.Logf("self-check: %s", line.Raw)
	}
	var r readiness
	until(t, 10*time.Second, func() (bool, string) {
		var st int
		st, r = a.readyz()
		if st != http.StatusOK || r.Checks.SelfCheck == nil {
			return false, fmt.Sprintf("/readyz: %d %+v, want 200 with a self-check", st, r)
		}
		got := strings.Join(r.Checks.SelfCheck.Warnings, " | ")
		for _, w := range wants {
			if !strings.Contains(got, w) {
				return false, fmt.Sprintf("/readyz self-check warnings %q lack %q", got, w)
			}
		}
		return true, ""
	})
	t.Logf("/readyz warnings: %q", r.Checks.SelfCheck.Warnings)
}

// TestFaultRedisRestartedEmpty is drill 7: Redis restarts empty (no
// persistence) under an instance whose task is mid-stage and whose plan has
// a task queued. The instance detects the restart (run id), its lease
// renewal is refused (the lock key is gone), the stage is cut, and no stage
// call follows: not the next stage of the running task, not the queued
// task. Afterwards the records are gone: the SRE gets 404s.
func TestFaultRedisRestartedEmpty(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	d := newDrill(t, srv)
	tg := newFaultTarget(t)
	a := d.start("coord-a")
	tg.holdWhere(func(c stageCall) bool { return c.Stage == "hold" })
	p := a.createPlan(map[string]any{"name": "drill-restart", "stages": []any{tg.stage("push"), tg.stage("hold"), tg.stage("after")},
		"tenants": tenants("rs-1", "rs-2"), "maxConcurrency": 1})
	tg.waitCall(15*time.Second, "hold call", func(c stageCall) bool { return c.Tenant == "rs-1" && c.Stage == "hold" })
	_, before := a.readyz()

	restarted := time.Now()
	restartRedis(t, srv)
	d.figure("restart (SIGKILL → new server answers)", time.Since(restarted))
	lost := a.waitLog(restarted, 4*drillLease, "lease lost", "fenced write refused")
	d.figure("restart → running task stops ("+lost.Message+")", lost.At.Sub(restarted))
	t.Logf("owner: %s", lost.Raw)
	var cut stageCall
	until(t, 2*drillLease, func() (bool, string) {
		cs := tg.find(func(c stageCall) bool { return c.Stage == "hold" && !c.Open })
		if len(cs) == 0 {
			return false, "the hold call is still open"
		}
		cut = cs[0]
		return true, ""
	})
	d.figure("restart → stage call cut", cut.End.Sub(restarted))
	if l, ok := a.findLog(restarted, "redis restarted or failed over"); ok {
		d.figure("restart → restart detected (run id changed)", l.At.Sub(restarted))
	} else {
		// The run id is polled every second; it may come after the lease loss.
		l := a.waitLog(restarted, 3*drillLease, "redis restarted or failed over")
		d.figure("restart → restart detected (run id changed)", l.At.Sub(restarted))
	}
	// Watch for two leases after the restart: the suspect window and more.
	tg.release()
	until(t, 3*drillLease, func() (bool, string) {
		return time.Since(restarted) > 2*drillLease, ""
	})
	if cs := tg.find(func(c stageCall) bool { return c.Start.After(restarted) }); len(cs) > 0 {
		t.Errorf("stage calls after the restart: %v, want none (no stage starts on a lease Redis forgot)", cs)
	}
	if cs := tg.of("rs-2", ""); len(cs) > 0 {
		t.Errorf("the queued task of rs-2 called the target after the restart: %v", cs)
	}
	// /readyz tells the restart too (its self-check is re-read every 30s).
	var r readiness
	until(t, 45*time.Second, func() (bool, string) {
		var st int
		st, r = a.readyz()
		sc := r.Checks.SelfCheck
		return st == http.StatusOK && sc != nil && sc.Restarted && (before.Checks.SelfCheck == nil || sc.RunID != before.Checks.SelfCheck.RunID),
			fmt.Sprintf("/readyz after the restart: %d %+v, want ready with selfCheck.restarted and a new run id", st, sc)
	})
	d.figure("restart → /readyz shows selfCheck.restarted", time.Since(restarted))
	// What the SRE sees: the records went with the restart.
	for _, path := range []string{"/v1/tenants/rs-1/task", "/v1/tenants/rs-2/task", "/v1/plans/" + p.PlanID} {
		st, _, body, err := a.req("GET", path, nil)
		if err != nil || st != http.StatusNotFound {
			t.Errorf("GET %s after the restart: %d %v %s, want 404 (the records are gone)", path, st, err, body)
		}
	}
	if lk := a.lock("rs-1"); lk.Held {
		t.Errorf("lock of rs-1 after the restart: %+v, want free", lk)
	}
}

// restartRedis is srv.Restart, waiting for the port to be free in between:
// the instances reconnect while the server is down, and a client socket
// can hold the port (as its own ephemeral port) for a moment, which makes
// redis-server fail with "Address already in use".
func restartRedis(t *testing.T, srv *redistest.Server) {
	t.Helper()
	srv.Kill()
	until(t, 5*time.Second, func() (bool, string) {
		l, err := net.Listen("tcp", srv.Addr)
		if err != nil {
			return false, fmt.Sprintf("port of the killed redis-server still taken: %v", err)
		}
		_ = l.Close()
		return true, ""
	})
	srv.Start()
}
