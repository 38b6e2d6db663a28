package main

import (
	"net"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
)

// TestShutdownStopsClaimingAtOnce: a SIGTERM (Close) while an HTTP
// connection stays open — a client's spare connection, which holds the HTTP
// drain for its 5 s — stops the instance claiming and starting tasks of a
// shared plan at once, not after the drain; and the grace period runs from
// the signal. (Found by running the runbook: two tasks started 1.2 s and
// 3.7 s after the SIGTERM, and the grace ended 9 s after it with a 4 s grace.)
func TestShutdownStopsClaimingAtOnce(t *testing.T) {
	t.Parallel()
	_, prefix := redistest.Real(t)
	tg := newFaultTarget(t)
	tg.holdWhere(func(c stageCall) bool { return c.Tenant == "sc-1" })
	m, _, err := runMain(t, "-redis-url", "redis://"+redistest.Addr(), "-key-prefix", prefix, "-instance-id", "sc-a",
		"-inline-http-hosts", "127.0.0.1", "-rate-limit", "off", "-shutdown-grace", "3s")
	if err != nil {
		t.Fatal(err)
	}
	a := local(t, m)
	p := a.createPlan(map[string]any{"name": "sc", "maxConcurrency": 1, "stages": []any{tg.stage("push")}, "tenants": tenants("sc-1", "sc-2", "sc-3")})
	tg.waitCall(10*time.Second, "push of sc-1", func(c stageCall) bool { return c.Tenant == "sc-1" })
	idle, err := net.Dial("tcp", m.Addr) // never sends a request
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()

	closed := make(chan error, 1)
	began := time.Now()
	go func() { closed <- m.Close() }()
	time.Sleep(200 * time.Millisecond)
	tg.release() // sc-1's stage ends: a claiming instance would start sc-2 now
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
	took := time.Since(began)
	for _, tenant := range []string{"sc-2", "sc-3"} {
		if cs := tg.of(tenant, ""); len(cs) != 0 {
			t.Errorf("%s's stage was called %v after the shutdown began, at %v", tenant, cs[0].Start.Sub(began), cs[0].Start)
		}
	}
	if cs := tg.of("sc-1", ""); len(cs) != 1 || cs[0].Open {
		t.Errorf("sc-1's calls %+v: want one, answered (its stage finished within the grace)", cs)
	}
	t.Logf("Close took %v (HTTP drain held by the idle connection); plan %s", took, p.PlanID)
}
