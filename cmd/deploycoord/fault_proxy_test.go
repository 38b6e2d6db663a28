package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// redisProxy is an in-process toxiproxy between one instance and Redis.
type redisProxy struct {
	t *testing.T
	p *toxiproxy.Proxy
}

// newRedisProxy starts a proxy to upstream on a free local port.
func newRedisProxy(t *testing.T, upstream string) *redisProxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "redis", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("start toxiproxy: %v", err)
	}
	t.Cleanup(p.Stop)
	return &redisProxy{t: t, p: p}
}

// url is the Redis URL of the proxy.
func (rp *redisProxy) url() string { return "redis://" + rp.p.Listen }

// add adds a toxic (type typ, on stream "upstream" or "downstream") with
// attributes attrs. It may run on the target's goroutines: it reports
// trouble with Errorf.
func (rp *redisProxy) add(name, typ, stream string, attrs string) {
	rp.t.Helper()
	body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	if _, err := rp.p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		rp.t.Errorf("add toxic %s: %v", name, err)
	}
}

// remove removes the toxic name.
func (rp *redisProxy) remove(name string) {
	rp.t.Helper()
	if err := rp.p.Toxics.RemoveToxic(context.Background(), name); err != nil {
		rp.t.Errorf("remove toxic %s: %v", name, err)
	}
}

// TestFaultProxyBlackhole is drill 4a: the link between the owner and Redis
// goes silent (toxiproxy timeout toxics with timeout 0, both directions)
// while a stage call is in flight. The owner's renewals fail within their
// deadlines, its stage context is cut before the lease ends, and the other
// instance (direct to Redis) takes the task over after the lease and
// finishes it. When the link comes back the old owner stops.
func TestFaultProxyBlackhole(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	d := newDrill(t, srv)
	px := newRedisProxy(t, srv.Addr)
	tg := newFaultTarget(t)
	a := d.start("coord-a", "DEPLOYCOORD_REDIS_URL="+px.url())
	b := d.start("coord-b")
	const tenant = "bh-1"
	tg.holdWhere(func(c stageCall) bool { return c.Stage == "hold" && c.Attempt == 1 })
	p := a.createPlan(map[string]any{"name": "drill-blackhole", "stages": []any{tg.stage("push"), tg.stage("hold"), tg.stage("after")},
		"tenants": tenants(tenant)})
	tg.waitCall(15*time.Second, "hold call", func(c stageCall) bool { return c.Tenant == tenant && c.Stage == "hold" })
	first := b.task(tenant)
	lease := b.lock(tenant)

	// From the moment the link goes silent the other instance tries to take
	// the task over, as an eager SRE (or a script) would.
	cutOff := time.Now()
	px.add("blackhole-up", "timeout", "upstream", `{"timeout":0}`)
	px.add("blackhole-down", "timeout", "downstream", `{"timeout":0}`)
	type takeover struct {
		at   time.Time
		task httpapi.TaskDetail
		err  string
	}
	tookc := make(chan takeover, 1)
	go func() {
		deadline := time.Now().Add(5 * drillLease)
		last := ""
		for time.Now().Before(deadline) {
			st, _, body, err := b.req("POST", "/v1/tenants/"+tenant+"/retry", map[string]any{"reason": "drill: owner cut off"})
			if err == nil && st == http.StatusAccepted {
				var v httpapi.TaskDetail
				_ = json.Unmarshal(body, &v)
				tookc <- takeover{at: time.Now(), task: v}
				return
			}
			last = fmt.Sprintf("%d %s %v", st, body, err)
			time.Sleep(20 * time.Millisecond)
		}
		tookc <- takeover{err: "retry on coord-b never accepted: " + last}
	}()
	var cutCall stageCall
	stageCut := until(t, 3*drillLease, func() (bool, string) {
		cs := tg.find(func(c stageCall) bool { return c.Stage == "hold" && c.Attempt == 1 && c.Cut })
		if len(cs) == 0 {
			return false, "the owner's hold call is still open"
		}
		cutCall = cs[0]
		return true, ""
	})
	d.figure("blackhole → owner's stage call cut", stageCut)
	if l, ok := a.findLog(cutOff, "lease lost", "lease not confirmed"); ok {
		d.figure("blackhole → owner logs "+strings.SplitN(l.Message, ";", 2)[0], l.At.Sub(cutOff))
	}
	tk := <-tookc
	if tk.err != "" {
		t.Fatal(tk.err)
	}
	took := tk.task
	d.figure("blackhole → takeover accepted on the other instance", tk.at.Sub(cutOff))
	d.figure("owner's call cut → takeover accepted", tk.at.Sub(cutCall.End))
	// The lock's TTL when last read bounds when the lease ends in Redis.
	limit := time.Duration(lease.TTLMs) * time.Millisecond
	if tk.at.Before(cutCall.End) {
		knownBug(t, "lease-loss-waits-for-heartbeat",
			"the owner's stage call ran %s past the takeover (cut %s after the blackhole, lease ended in Redis after %s): "+
				"the stage context is cancelled only by the heartbeat goroutine of facade/runner.go, which sits in store.Beat "+
				"(timeout max(lease/3, 1s)) when the lease ends and, with both lease.Lost() and the ticker ready, may pick the "+
				"ticker again — two instances deployed the tenant at once",
			cutCall.End.Sub(tk.at), stageCut, limit)
	}
	// The stage is cut a guard (lease/10) before the lease would end
	// (measured 225–243ms before the takeover). What makes the drill fail
	// is the overlap checked above; this bound only catches a cut that
	// waits for something else (a socket timeout), with a quarter lease of
	// scheduling delay allowed on a loaded machine.
	if stageCut > limit+drillLease/4 {
		t.Errorf("owner's stage cut %s after the blackhole, want before its lease ends in Redis (%s after)", stageCut, limit)
	}
	// The heartbeats sent into the silent link return with an error at
	// their deadline (the lease's end; measured 1.96s of 2s): no call hangs
	// on the dead connection (ContextTimeoutEnabled). A hang would last a
	// socket timeout (10s and more); the bound leaves a loaded machine a
	// whole lease of scheduling delay.
	beat := a.waitLog(cutOff, 3*drillLease, "heartbeat failed")
	d.figure("blackhole → owner's heartbeat returns with an error", beat.At.Sub(cutOff))
	if took := beat.At.Sub(cutOff); took > 2*drillLease {
		t.Errorf("owner's heartbeat failed %s after the blackhole, want at its deadline (the lease, %s), not after a socket timeout: %s", took, drillLease, beat.Raw)
	}
	if took.Owner != "coord-b" || took.Attempt != 2 || took.Fence <= first.Fence {
		t.Fatalf("takeover: owner %s attempt %d fence %d, want coord-b 2 above %d", took.Owner, took.Attempt, took.Fence, first.Fence)
	}
	b.waitPlan(p.PlanID, 20*time.Second, "COMPLETED")

	healed := time.Now()
	px.remove("blackhole-up")
	px.remove("blackhole-down")
	line := a.waitLog(healed, 30*time.Second, "lease lost", "fenced write refused")
	d.figure("link back → old owner stops ("+line.Message+")", line.At.Sub(healed))

	for stage, want := range map[string][]int{"push": {1}, "hold": {1, 2}, "after": {2}} {
		var got []int
		for _, c := range tg.of(tenant, stage) {
			got = append(got, c.Attempt)
		}
		if !slices.Equal(got, want) {
			t.Errorf("target saw %s called by attempts %v, want %v", stage, got, want)
		}
	}
	if err := checkExclusive(tg.snapshot()); err != nil {
		t.Error(err)
	}
	final := b.task(tenant)
	if final.Status != task.StatusCompleted || final.Owner != "coord-b" || final.Fence != took.Fence {
		t.Errorf("final task: %s owner %s fence %d, want COMPLETED coord-b %d", final.Status, final.Owner, final.Fence, took.Fence)
	}
	checkCounts(t, b, p.PlanID)
}

// TestFaultProxyLatency is drill 4b: every byte between the owner and Redis
// is delayed by more than a lease (latency toxics on both directions) from
// the middle of a stage. Whatever happens next — the owner regains its
// lease or the other instance takes over — no two calls of the tenant
// overlap at the target and a later holder has a larger fence.
func TestFaultProxyLatency(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	d := newDrill(t, srv)
	px := newRedisProxy(t, srv.Addr)
	tg := newFaultTarget(t)
	for _, s := range []string{"s1", "s2", "s3", "s4"} {
		tg.setDelay(s, 400*time.Millisecond)
	}
	a := d.start("coord-a", "DEPLOYCOORD_REDIS_URL="+px.url())
	b := d.start("coord-b")
	const tenant = "lat-1"
	latency := drillLease * 5 / 4
	slowedc := make(chan time.Time, 1)
	var once sync.Once
	tg.setOnCall(func(c stageCall) {
		if c.Stage == "s2" && c.Attempt == 1 {
			once.Do(func() {
				px.add("slow-up", "latency", "upstream", fmt.Sprintf(`{"latency":%d}`, latency.Milliseconds()))
				px.add("slow-down", "latency", "downstream", fmt.Sprintf(`{"latency":%d}`, latency.Milliseconds()))
				slowedc <- time.Now()
			})
		}
	})
	p := a.createPlan(map[string]any{"name": "drill-latency",
		"stages": []any{tg.stage("s1"), tg.stage("s2"), tg.stage("s3"), tg.stage("s4")}, "tenants": tenants(tenant)})
	slowed := waitToxic(t, slowedc)
	first := b.task(tenant)
	fences := map[string]int64{first.TaskID + "#1": first.Fence}

	// The other instance tries to take over for a while; the owner may keep
	// the tenant (its lease lands late but lands) or lose it.
	var took *httpapi.TaskDetail
	deadline := time.Now().Add(6 * drillLease)
	attempts := 0
	for time.Now().Before(deadline) && took == nil {
		attempts++
		st, _, body, err := b.req("POST", "/v1/tenants/"+tenant+"/retry", map[string]any{"reason": "drill: owner slow"})
		if err == nil && st == http.StatusAccepted {
			v := decode[httpapi.TaskDetail](t, body)
			took = &v
			fences[v.TaskID+"#2"] = v.Fence
			d.figure("latency → takeover accepted", time.Since(slowed))
			break
		}
		if st != http.StatusConflict {
			t.Fatalf("retry on coord-b: %d %s %v, want 202 or 409", st, body, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if took == nil {
		d.figure("takeover attempts refused while the owner's writes land late", attempts)
	}
	healed := time.Now()
	px.remove("slow-up")
	px.remove("slow-down")
	p = b.waitPlan(p.PlanID, 40*time.Second, "COMPLETED", "FAILED")
	d.figure("latency removed → plan finished", time.Since(healed))
	if p.Status != "COMPLETED" {
		tk := b.task(tenant)
		t.Errorf("plan %s (task %s: %s), want COMPLETED", p.Status, tk.Status, tk.LastError)
	}

	calls := tg.snapshot()
	if err := checkExclusive(calls); err != nil {
		t.Error(err)
	}
	hs := holdingsByAttempt(calls, fences)
	if err := checkFences(hs); err != nil {
		t.Error(err)
	}
	var owners []string
	for _, h := range hs {
		owners = append(owners, fmt.Sprintf("%s fence %d %s..%s", h.TaskID[len(h.TaskID)-2:], h.Fence, h.First.Format("05.000"), h.Last.Format("05.000")))
	}
	t.Logf("holders at the target: %v", owners)
	for _, c := range calls {
		t.Logf("call %s", c)
	}
	tk := b.task(tenant)
	if tk.Status == task.StatusCompleted {
		for _, s := range []string{"s1", "s2", "s3", "s4"} {
			answered := 0
			for _, c := range tg.of(tenant, s) {
				if !c.Cut {
					answered++
				}
			}
			if answered < 1 {
				t.Errorf("stage %s never answered, yet the task completed", s)
			}
		}
	}
	checkCounts(t, b, p.PlanID)
}

// waitToxic waits until the target's hook has added a toxic and returns
// when it did.
func waitToxic(t *testing.T, added <-chan time.Time) time.Time {
	t.Helper()
	select {
	case at := <-added:
		return at
	case <-time.After(15 * time.Second):
		t.Fatal("the target never saw the stage call that adds the toxic")
		return time.Time{}
	}
}

// holdingsByAttempt is holdings with one holder per task attempt (a retry
// of the same task is a new holder with a new fence).
func holdingsByAttempt(calls []stageCall, fences map[string]int64) []holding {
	cs := slices.Clone(calls)
	for i := range cs {
		cs[i].TaskID = fmt.Sprintf("%s#%d", cs[i].TaskID, cs[i].Attempt)
	}
	return holdings(cs, fences)
}

// TestFaultProxyResetDuringCheckpoint is drill 4c: the connection between
// the owner and Redis is reset (toxiproxy reset_peer on the replies) at a
// stage boundary, so the checkpoint write reaches Redis but its answer is
// lost; the toxic stays until the owner reports the write waiting, then
// goes. The runner must find out that its write landed: the task completes,
// every stage succeeded once in the timeline, the checkpoint lists each
// stage once and the plan counts agree with the records.
func TestFaultProxyResetDuringCheckpoint(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	d := newDrill(t, srv)
	px := newRedisProxy(t, srv.Addr)
	tg := newFaultTarget(t)
	a := d.start("coord-a", "DEPLOYCOORD_REDIS_URL="+px.url())
	const tenant = "rst-1"
	resetc := make(chan time.Time, 1)
	var once sync.Once
	tg.setOnCall(func(c stageCall) {
		if c.Stage == "s2" {
			once.Do(func() {
				at := time.Now()
				px.add("reset", "reset_peer", "downstream", `{"timeout":0}`)
				resetc <- at
			})
		}
	})
	p := a.createPlan(map[string]any{"name": "drill-reset",
		"stages": []any{tg.stage("s1"), tg.stage("s2"), tg.stage("s3")}, "tenants": tenants(tenant)})
	resetAt := waitToxic(t, resetc)
	// Keep the toxic until the owner gives up on the write for now (it then
	// retries it through the fenced script), or for a lease at most.
	line, waited := a.findLog(resetAt, "redis unreachable; write waits in memory")
	for !waited && time.Since(resetAt) < drillLease {
		time.Sleep(10 * time.Millisecond)
		line, waited = a.findLog(resetAt, "redis unreachable; write waits in memory")
	}
	px.remove("reset")
	healed := time.Now()
	d.figure("reset toxic in place", healed.Sub(resetAt))
	if !waited {
		t.Fatal("the owner never reported a write waiting: the reset caught no task write, the drill did not happen")
	}
	t.Logf("owner: %s", line.Raw)
	// The task completes — or the owner stops, taking its own landed write
	// for someone else's.
	var refused logLine
	var tk httpapi.TaskDetail
	until(t, 30*time.Second, func() (bool, string) {
		if l, ok := a.findLog(resetAt, "fenced write refused"); ok {
			refused = l
			return true, ""
		}
		tk = a.task(tenant)
		return tk.Status == task.StatusCompleted, fmt.Sprintf("task of %s is %s", tenant, tk.Status)
	})
	d.figure("reset removed → outcome known", time.Since(healed))
	if refused.Raw != "" {
		tk = a.task(tenant)
		knownBug(t, "landed-write-taken-for-refusal",
			"the owner's checkpoint write landed but its answer was lost; the retry (a new write id) was refused \"seq\" and the "+
				"runner stopped the task (facade/runner.go commit treats every RefusedError as lost ownership; repository/dual.go "+
				"WriteTask even computes `landed` but returns the refusal): the task stays %s at %s, orphaned after a lease: %s",
			tk.Status, tk.CurrentStage, refused.Raw)
	}
	tl := a.timeline(tenant)
	for _, s := range []string{"s1", "s2"} {
		if n := countEv(tl, task.EventStageSucceeded, s); n != 1 {
			t.Errorf("timeline: %s succeeded %d times, want once: %s", s, n, evTypes(tl))
		}
	}
	ck := a.checkpoint(tenant)
	seen := map[string]bool{}
	for _, s := range ck.CompletedStages {
		if seen[s] {
			t.Errorf("checkpoint lists %s twice: %v", s, ck.CompletedStages)
		}
		seen[s] = true
	}
	if !seen["s1"] || !seen["s2"] {
		t.Errorf("checkpoint %v lacks s1 or s2", ck.CompletedStages)
	}
	for _, s := range []string{"s1", "s2", "s3"} {
		if n := len(tg.of(tenant, s)); n > 1 {
			t.Errorf("target saw %s %d times, want at most once", s, n)
		}
	}
	checkLedger(t, d, p.PlanID, tk.TaskID)
	checkCounts(t, a, p.PlanID)
}

// checkLedger requires the plan counts' ledger entry of a task to carry the
// task record's status, seq and fence (repository/doc.go "The write
// protocol").
func checkLedger(t *testing.T, d *drill, planID, taskID string) {
	t.Helper()
	store := d.store()
	rec, _, err := store.Task(ctxTimeout(t), taskID)
	if err != nil {
		t.Errorf("task %s in Redis: %v", taskID, err)
		return
	}
	key, err := store.Keys().PlanCounts(planID)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := redistest.NewClient(t, d.addr).HGet(ctxTimeout(t), key, "t:"+taskID).Result()
	if err != nil {
		t.Errorf("ledger entry of %s: %v", taskID, err)
		return
	}
	// "status|seq|fence|writeId|owner|tenant": the entry follows the writes
	// that move the counts (status changes), so its seq may trail the
	// record's while the task stays RUNNING, and equals it once the task's
	// last write moved it.
	parts := strings.Split(entry, "|")
	if len(parts) < 5 {
		t.Errorf("ledger entry of %s is %q", taskID, entry)
		return
	}
	seq, _ := strconv.ParseInt(parts[1], 10, 64)
	fence, _ := strconv.ParseInt(parts[2], 10, 64)
	switch {
	case parts[0] != string(rec.Status) || fence != rec.Fence || parts[4] != rec.Owner || seq > rec.Seq:
		t.Errorf("ledger entry of %s is %q, record has status %s seq %d fence %d owner %s", taskID, entry, rec.Status, rec.Seq, rec.Fence, rec.Owner)
	case !rec.Status.Active() && seq != rec.Seq:
		t.Errorf("ledger entry of finished task %s is %q, record has seq %d: the final write should have moved it", taskID, entry, rec.Seq)
	}
}
