package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The binary on the two other Redis topologies (docs/operations.md on Redis topologies,
// docs/architecture.md): a 3-master Redis Cluster that the test reshards during a
// plan, and a master with a replica behind three sentinels that the test
// kills mid-plan. Each logs "FIGURE <test>: <what> = <value>" for
// docs/operations.md.

// recTarget is a deployment target that records every stage call, answers
// 500 for the tenant stages told to fail, can make a stage slow, and counts
// the calls of a tenant that were in flight at the same time (with one
// tenant lock there must be none).
type recTarget struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	calls    []*stageCall
	fail     map[string]bool // "<tenant>/<stage>"
	delay    map[string]time.Duration
	held     map[string]bool // stages whose calls wait for gate
	gate     chan struct{}
	inflight map[string]int
	overlaps []string
}

func newRecTarget(t *testing.T) *recTarget {
	tg := &recTarget{t: t, fail: map[string]bool{}, delay: map[string]time.Duration{}, held: map[string]bool{},
		gate: make(chan struct{}), inflight: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/tenants/{tenant}/{stage}", tg.serve)
	tg.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		tg.release()
		tg.srv.CloseClientConnections()
		tg.srv.Close()
		if t.Failed() {
			for _, c := range tg.snapshot() {
				t.Logf("[target] %s", c)
			}
		}
	})
	return tg
}

func (tg *recTarget) serve(w http.ResponseWriter, r *http.Request) {
	c := &stageCall{Tenant: r.PathValue("tenant"), Stage: r.PathValue("stage"), Key: r.Header.Get("Idempotency-Key"),
		Start: time.Now(), Open: true}
	if parts := strings.Split(c.Key, "/"); len(parts) == 3 {
		c.TaskID = parts[0]
	}
	tg.mu.Lock()
	tg.calls = append(tg.calls, c)
	if tg.inflight[c.Tenant] > 0 {
		tg.overlaps = append(tg.overlaps, c.String())
	}
	tg.inflight[c.Tenant]++
	delay, fail, held, gate := tg.delay[c.Stage], tg.fail[c.Tenant+"/"+c.Stage], tg.held[c.Stage], tg.gate
	tg.mu.Unlock()
	cut := false
	if held {
		select {
		case <-gate:
		case <-r.Context().Done():
			cut = true
		}
	}
	if !cut && delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			cut = true
		}
	}
	tg.mu.Lock()
	tg.inflight[c.Tenant]--
	c.End, c.Open, c.Cut = time.Now(), false, cut
	tg.mu.Unlock()
	if cut {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if fail {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = fmt.Fprintf(w, `{"error":"%s/%s is set to fail"}`, c.Tenant, c.Stage)
		return
	}
	_, _ = fmt.Fprintf(w, `{"tenant":%q,"stage":%q}`, c.Tenant, c.Stage)
}

func (tg *recTarget) stage(name string) map[string]any {
	return map[string]any{"name": name, "kind": "http", "timeout": "30s",
		"http": map[string]any{"method": "POST", "url": tg.srv.URL + "/tenants/{{.TenantID}}/" + name}}
}

func (tg *recTarget) setFail(tenant, stage string, fail bool) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.fail[tenant+"/"+stage] = fail
}

func (tg *recTarget) setDelay(stage string, d time.Duration) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.delay[stage] = d
}

// hold makes the calls of stage wait until release.
func (tg *recTarget) hold(stage string) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.held[stage] = true
}

// release lets every held call (and every later one) go.
func (tg *recTarget) release() {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	clear(tg.held)
	select {
	case <-tg.gate:
	default:
		close(tg.gate)
	}
}

func (tg *recTarget) snapshot() []stageCall {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	out := make([]stageCall, len(tg.calls))
	for i, c := range tg.calls {
		out[i] = *c
	}
	return out
}

// count returns how many calls of tenant's stage the target answered
// (calls cut by the caller are left out).
func (tg *recTarget) count(tenant, stage string) int {
	n := 0
	for _, c := range tg.snapshot() {
		if c.Tenant == tenant && c.Stage == stage && !c.Cut && !c.Open {
			n++
		}
	}
	return n
}

// overlapping returns the calls that began while another call of the same
// tenant was in flight.
func (tg *recTarget) overlapping() []string {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return slices.Clone(tg.overlaps)
}

// TestE2ERedisCluster: the binary on a 3-master Redis Cluster runs a plan
// whose keys land on every master, while slots the plan uses move: the
// slots of tenants whose stage call is in flight and the plan's own slot
// (record, counts, task list) are migrated to other masters (MIGRATE: the
// instances meet ASK, then MOVED), and the slots of the plan's last tenants
// are resharded with redis-cli --cluster reshard. Every stage runs exactly
// once, no two calls of a tenant overlap, the counts equal the records; a
// failed tenant is retried from its checkpoint on the other instance.
func TestE2ERedisCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prefix := redistest.Prefix(t)
	env := []string{
		"DEPLOYCOORD_REDIS_CLUSTER_ADDRS=" + strings.Join(cl.Addrs(), ","),
		"DEPLOYCOORD_KEY_PREFIX=" + prefix,
		"DEPLOYCOORD_LISTEN=127.0.0.1:0",
		"DEPLOYCOORD_INLINE_HTTP_HOSTS=127.0.0.1",
		"DEPLOYCOORD_LOCK_LEASE=3s",
		"DEPLOYCOORD_RATE_LIMIT=off",
	}
	tg := newRecTarget(t)
	tg.setDelay("push", 400*time.Millisecond)
	a := startNode(t, "cl-a", env)
	b := startNode(t, "cl-b", env)
	d := &drill{t: t, name: "E2ERedisCluster"}

	// The tenants: 24 anywhere, then 6 whose slots are among the lowest 200
	// of the second master (the hash tag is the tenant id, so a tenant's slot
	// is its id's); those come last in the plan, and are resharded to the
	// third master while the plan runs.
	from, to := cl.Nodes[1], cl.Nodes[2]
	ranges, err := cl.Slots(ctx, from)
	if err != nil || len(ranges) != 1 {
		t.Fatalf("second master serves %v (%v), want one range", ranges, err)
	}
	const reshardSlots = 200
	low := func(id string) bool {
		s := redistest.KeySlot(id)
		return s >= ranges[0][0] && s < ranges[0][0]+reshardSlots
	}
	var ids, moving []string
	for i := 0; len(ids) < 24 || len(moving) < 6; i++ {
		id := fmt.Sprintf("ct-%04d", i)
		switch {
		case low(id) && len(moving) < 6:
			moving = append(moving, id)
		case !low(id) && len(ids) < 24:
			ids = append(ids, id)
		}
	}
	ids = append(ids, moving...)
	perMaster := map[string]int{}
	for _, id := range ids {
		n, err := cl.Owner(ctx, redistest.KeySlot(id))
		if err != nil {
			t.Fatal(err)
		}
		perMaster[n.Addr]++
	}
	if len(perMaster) != 3 {
		t.Fatalf("the plan's tenants live on %d masters, want 3: %v", len(perMaster), perMaster)
	}
	other := func(n *redistest.ClusterNode) *redistest.ClusterNode {
		for _, o := range cl.Nodes {
			if o != n {
				return o
			}
		}
		return nil
	}

	const bad = "ct-0005"
	if !slices.Contains(ids[:24], bad) {
		t.Fatalf("tenant %s is not among the first 24: %v", bad, ids)
	}
	tg.setFail(bad, "verify", true)
	p := a.createPlan(map[string]any{
		"name":           "on-a-cluster",
		"stages":         []any{tg.stage("push"), tg.stage("verify")},
		"tenants":        tenants(ids...),
		"maxConcurrency": 4,
	})

	// While push calls are in flight: migrate those tenants' slots and the
	// plan's slot to other masters.
	var inFlight []string
	until(t, 20*time.Second, func() (bool, string) {
		inFlight = inFlight[:0]
		for _, c := range tg.snapshot() {
			if c.Open && c.Stage == "push" {
				inFlight = append(inFlight, c.Tenant)
			}
		}
		return len(inFlight) >= 2, fmt.Sprintf("%d push calls in flight", len(inFlight))
	})
	inFlight = inFlight[:2]
	began := time.Now()
	for _, key := range []string{inFlight[0], inFlight[1], p.PlanID} {
		slot := redistest.KeySlot(key)
		n, err := cl.Owner(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.MigrateSlot(ctx, slot, other(n)); err != nil {
			t.Fatalf("migrate slot %d of %s: %v", slot, key, err)
		}
		if now, _ := cl.Owner(ctx, slot); now == n {
			t.Fatalf("slot %d of %s still on %s after MigrateSlot", slot, key, n.Addr)
		}
	}
	d.figure("3 slots migrated (2 tenants mid-stage, the plan) in", time.Since(began))
	for _, id := range inFlight {
		if n := tg.count(id, "push"); n != 0 {
			t.Errorf("the push call of %s ended before its slot had moved: the migration did not happen mid-stage", id)
		}
	}

	began = time.Now()
	if err := cl.Reshard(ctx, from, to, reshardSlots); err != nil {
		t.Fatalf("reshard %d slots: %v", reshardSlots, err)
	}
	d.figure(fmt.Sprintf("reshard of %d slots holding the plan's last %d tenants", reshardSlots, len(moving)), time.Since(began))
	pending := 0
	for _, id := range moving {
		if n, err := cl.Owner(ctx, redistest.KeySlot(id)); err != nil || n != to {
			t.Errorf("tenant %s is served by %v after the reshard, want %s", id, n, to.Addr)
		}
		if tg.count(id, "verify") == 0 {
			pending++
		}
	}
	d.figure("of the resharded tenants, tasks not finished when the reshard ended", pending)
	if pending == 0 {
		t.Errorf("every resharded tenant had finished before its slot moved: the reshard did not happen during the plan")
	}

	p = a.waitPlan(p.PlanID, 60*time.Second, "FAILED")
	if p.Counts["COMPLETED"] != len(ids)-1 || p.Counts["FAILED"] != 1 {
		t.Fatalf("plan counts %v, want %d COMPLETED and 1 FAILED", p.Counts, len(ids)-1)
	}
	checkCounts(t, b, p.PlanID)
	for _, id := range ids {
		for _, stage := range []string{"push", "verify"} {
			if n := tg.count(id, stage); n != 1 {
				t.Errorf("target answered %s/%s %d times, want once", id, stage, n)
			}
		}
	}
	if o := tg.overlapping(); len(o) != 0 {
		t.Errorf("calls of one tenant overlapped: %q", o)
	}

	// The failed tenant, retried from its checkpoint on the other instance.
	tk := b.task(bad)
	if tk.Status != "FAILED" || tk.Checkpoint == nil || !slices.Equal(tk.Checkpoint.CompletedStages, []string{"push"}) {
		t.Fatalf("task of %s: status %s checkpoint %+v, want FAILED after push", bad, tk.Status, tk.Checkpoint)
	}
	tg.setFail(bad, "verify", false)
	retried := must[httpapi.TaskDetail](b, "POST", "/v1/tenants/"+bad+"/retry",
		map[string]any{"reason": "cluster e2e: target fixed", "fromCheckpoint": true, "expectedAttempt": 1}, http.StatusAccepted)
	// Shared plans: the retry is queued (202, PENDING, the new attempt) and
	// runs on whichever instance claims it.
	if retried.Attempt != 2 || retried.Status != "PENDING" {
		t.Fatalf("retry answered attempt %d status %s, want 2 PENDING (queued)", retried.Attempt, retried.Status)
	}
	b.waitPlan(p.PlanID, 30*time.Second, "COMPLETED")
	if push, verify := tg.count(bad, "push"), tg.count(bad, "verify"); push != 1 || verify != 2 {
		t.Errorf("target answered %s push %d and verify %d times, want 1 and 2 (only the failed stage re-runs)", bad, push, verify)
	}
	if ck := a.checkpoint(bad); !slices.Equal(ck.CompletedStages, []string{"push", "verify"}) {
		t.Errorf("checkpoint of %s: %v, want push and verify", bad, ck.CompletedStages)
	}
	checkCounts(t, a, p.PlanID)

	// The plan's keys are on every master (tests may SCAN; the product does not).
	keys, err := cl.KeysPerNode(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range cl.Nodes {
		if keys[n.Addr] == 0 {
			t.Errorf("master %s holds none of the plan's keys: %v", n.Addr, keys)
		}
		total += keys[n.Addr]
	}
	d.figure("keys under the prefix per master (after the plan)",
		fmt.Sprint(keys[cl.Nodes[0].Addr], "/", keys[cl.Nodes[1].Addr], "/", keys[cl.Nodes[2].Addr], " of ", total))
	a.stop()
	b.stop()
}

// TestE2ESentinelFailover: two instances on a master with one replica
// behind three sentinels each run a plan when the master is killed (kill
// -9). The sentinels promote the replica; the instances follow it and see
// its run id before their first write reaches it (on the new connection,
// not a second later by the periodic check); no stage starts on an
// instance from the kill until one lease after it saw the change; no two
// calls of a tenant are ever in flight at once; every plan completes (what
// the failover orphaned or failed is retried from its checkpoint) with
// counts equal to the records.
//
//   - HeldStage: the first stage is held at the target across the kill and
//     answered the moment the sentinels agree, so its checkpoint is the
//     first write the new master gets.
//   - BusyWrites: short stages, 16 tasks at a time, killed while writes are
//     in flight (the replication lag is what a failover can lose).
func TestE2ESentinelFailover(t *testing.T) {
	t.Parallel()
	t.Run("HeldStage", func(t *testing.T) {
		t.Parallel()
		sentinelDrill(t, sentinelCase{tenants: 8, concurrency: 4, hold: true})
	})
	t.Run("BusyWrites", func(t *testing.T) {
		t.Parallel()
		sentinelDrill(t, sentinelCase{tenants: 60, concurrency: 8, delay: 40 * time.Millisecond})
	})
}

// sentinelCase is one variant of the Sentinel drill: tenants per plan (one
// plan per instance), the plans' maxConcurrency, and whether the first
// stage is held across the kill (else each stage call takes delay, and the
// master is killed once a third of the tasks have finished).
type sentinelCase struct {
	tenants, concurrency int
	hold                 bool
	delay                time.Duration
}

func sentinelDrill(t *testing.T, sc sentinelCase) {
	s := redistest.StartSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const lease = 4 * time.Second
	env := []string{
		"DEPLOYCOORD_REDIS_SENTINEL_ADDRS=" + strings.Join(s.Addrs(), ","),
		"DEPLOYCOORD_REDIS_SENTINEL_MASTER=" + s.Name,
		"DEPLOYCOORD_KEY_PREFIX=" + redistest.Prefix(t),
		"DEPLOYCOORD_LISTEN=127.0.0.1:0",
		"DEPLOYCOORD_INLINE_HTTP_HOSTS=127.0.0.1",
		"DEPLOYCOORD_LOCK_LEASE=" + lease.String(),
		"DEPLOYCOORD_RATE_LIMIT=off",
	}
	tg := newRecTarget(t)
	if sc.hold {
		tg.hold("push")
	}
	tg.setDelay("push", sc.delay)
	tg.setDelay("verify", sc.delay)
	a := startNode(t, "sn-a", env)
	b := startNode(t, "sn-b", env)
	d := &drill{t: t, name: strings.TrimPrefix(t.Name(), "Test")}
	nodes := map[string]*node{"sa": a, "sb": b}

	plans := map[string]string{} // tenant prefix -> plan id
	for _, pre := range []string{"sa", "sb"} {
		var ids []string
		for i := range sc.tenants {
			ids = append(ids, fmt.Sprintf("%s-%02d", pre, i))
		}
		p := nodes[pre].createPlan(map[string]any{
			"name":           "failover-" + pre,
			"stages":         []any{tg.stage("push"), tg.stage("verify")},
			"tenants":        tenants(ids...),
			"maxConcurrency": sc.concurrency,
		})
		plans[pre] = p.PlanID
	}
	// Replication is asynchronous: a failover loses what the replica had
	// not received when the master died. The drill is about the writes
	// after that moment (tasks orphaned, retried), not about the plans
	// themselves, so it waits for the replica to acknowledge them (one
	// run, under -race on a loaded machine, lost a plan created before the
	// kill). WAIT counts the replicas that acknowledged every write so far.
	mc := redis.NewClient(&redis.Options{Addr: s.Master.Addr})
	n, err := mc.Wait(ctx, 1, 10*time.Second).Result()
	_ = mc.Close()
	if err != nil || n < 1 {
		t.Fatalf("WAIT for the replica to acknowledge the plans: %d replicas, %v", n, err)
	}
	if sc.hold {
		until(t, 20*time.Second, func() (bool, string) {
			open := 0
			for _, c := range tg.snapshot() {
				if c.Open {
					open++
				}
			}
			return open == 2*sc.concurrency, fmt.Sprintf("%d stage calls in flight, want %d", open, 2*sc.concurrency)
		})
		time.Sleep(500 * time.Millisecond)
	} else {
		until(t, 30*time.Second, func() (bool, string) {
			done := 0
			for _, c := range tg.snapshot() {
				if c.Stage == "verify" && !c.Open {
					done++
				}
			}
			return done >= 2*sc.tenants/3, fmt.Sprintf("%d tasks done", done)
		})
	}

	old := s.Master.Addr
	killed := time.Now()
	s.Master.Kill()
	// A stage whose start was written just before the master died reaches
	// the target a little later; anything decided after the kill waits for
	// a master (Redis answers nothing until the failover, seconds later).
	quiet := time.Now().Add(500 * time.Millisecond)
	promoted, err := s.WaitFailover(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	d.figure("kill -9 of the master until the sentinels agree on the replica", time.Since(killed))
	if promoted != s.Replica.Addr {
		t.Fatalf("sentinels promoted %s, want the replica %s", promoted, s.Replica.Addr)
	}
	tg.release()

	// Each instance sees the new run id; no stage starts on it from the
	// kill until one lease after it saw the change (none may start on the
	// new master before the change is seen either).
	for pre, n := range nodes {
		l := n.waitLog(killed, 30*time.Second, "redis restarted or failed over")
		d.figure(n.name+" logged the run id change after the kill", l.At.Sub(killed))
		windowEnd := l.At.Add(lease - 200*time.Millisecond)
		for _, c := range tg.snapshot() {
			if strings.HasPrefix(c.Tenant, pre+"-") && c.Start.After(quiet) && c.Start.Before(windowEnd) {
				t.Errorf("%s started %s after the kill (%s) and within one lease of seeing the new run id (at %s): "+
					"leases must be suspect", n.name, c, killed.Format("15:04:05.000"), l.At.Format("15:04:05.000"))
			}
		}
	}

	// Writes continue on the new master: every task finishes or shows
	// orphaned (its lease lost), then the orphans and failures are retried
	// from their checkpoints and both plans complete.
	var orphaned, failed int
	for pre, n := range nodes {
		id := plans[pre]
		until(t, 60*time.Second, func() (bool, string) {
			p := n.plan(id)
			o := 0
			if p.Orphaned != nil {
				o = *p.Orphaned
			}
			return p.Counts["PENDING"] == 0 && p.Counts["RUNNING"] == o,
				fmt.Sprintf("plan %s: counts %v, orphaned %d", id, p.Counts, o)
		})
		d.figure("plan "+pre+" settled (every task finished or orphaned) after the kill", time.Since(killed))
		if l, ok := n.findLog(killed, "task finished"); ok {
			d.figure(n.name+": first task finished after the kill", l.At.Sub(killed))
		}
		for _, tk := range n.allTasks(id) {
			if tk.Status == "COMPLETED" {
				continue
			}
			if tk.Orphaned {
				orphaned++
			} else {
				failed++
			}
			d.figure("not completed by the failover", fmt.Sprintf("%s %s orphaned=%v %q", tk.TenantID, tk.Status, tk.Orphaned, tk.LastError))
			st, body := n.do("POST", "/v1/tenants/"+tk.TenantID+"/retry",
				map[string]any{"reason": "sentinel e2e: after the failover", "fromCheckpoint": true})
			if st != http.StatusAccepted {
				t.Errorf("retry of %s (%s, orphaned %v): %d %s", tk.TenantID, tk.Status, tk.Orphaned, st, body)
			}
		}
	}
	d.figure("tasks orphaned by the failover (retried)", orphaned)
	d.figure("tasks failed by the failover (retried)", failed)
	for pre, n := range nodes {
		n.waitPlan(plans[pre], 60*time.Second, "COMPLETED")
		checkCounts(t, n, plans[pre])
	}
	d.figure("plans completed after the kill", time.Since(killed))
	for _, n := range []*node{a, b} {
		// One change, one warning: the failover client's connections to the
		// sentinels (whose run ids differ) must not count as a master's.
		changes := 0
		for _, l := range n.log.all() {
			if strings.Contains(l.Message, "redis restarted or failed over") {
				changes++
			}
		}
		if changes != 1 {
			t.Errorf("%s logged %d run id changes, want 1 (the failover)", n.name, changes)
		}
	}

	reruns := 0
	for pre := range nodes {
		for i := range sc.tenants {
			for _, stage := range []string{"push", "verify"} {
				if n := tg.count(fmt.Sprintf("%s-%02d", pre, i), stage); n > 1 {
					reruns += n - 1
				}
			}
		}
	}
	d.figure("stage calls answered again (re-runs)", reruns)
	cut := 0
	for _, c := range tg.snapshot() {
		if c.Cut {
			cut++
		}
	}
	d.figure("stage calls cut by their instance (a lease not confirmed in time), each run again", cut)
	regained := 0
	for pre, n := range nodes {
		for i := range sc.tenants {
			regained += countEv(n.timeline(fmt.Sprintf("%s-%02d", pre, i)), "task.lease_regained", "")
		}
	}
	d.figure("leases taken back with the same fence (task.lease_regained)", regained)
	if o := tg.overlapping(); len(o) != 0 {
		t.Errorf("calls of one tenant were in flight at once (a stage ran twice at once): %q", o)
	}
	for _, n := range []*node{a, b} {
		lost, _ := n.metric("deploycoord_lease_lost_total")
		refused, _ := n.metric("deploycoord_fenced_write_refusals_total")
		d.figure(n.name+" leases lost / fenced writes refused", fmt.Sprint(lost, " / ", refused))
	}
	a.stop()
	b.stop()
}

// TestReadyzClusterDown: a Redis Cluster with one slot unserved (deleted
// from its master: CLUSTERDOWN for every command, while every master still
// answers PING) is not ready: /readyz is 503 and says why, and ready again
// once the slot is served. (Found by running the runbook: /readyz said
// ready while the API answered 503 CLUSTERDOWN.)
func TestReadyzClusterDown(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, _, err := runMain(t, "-redis-cluster-addrs", strings.Join(cl.Addrs(), ","), "-key-prefix", redistest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	n := local(t, m)
	ready := func() (int, string) {
		st, _, body, err := n.req("GET", "/readyz", nil)
		if err != nil {
			t.Fatal(err)
		}
		return st, string(body)
	}
	if st, body := ready(); st != 200 {
		t.Fatalf("/readyz of a healthy cluster: %d %s", st, body)
	}
	master := cl.Nodes[0]
	ranges, err := cl.Slots(ctx, master)
	if err != nil || len(ranges) == 0 {
		t.Fatalf("slots of %s: %v %v", master.Addr, ranges, err)
	}
	slot := ranges[0][0]
	mc := cl.NodeClient(t, master)
	if err := mc.Do(ctx, "CLUSTER", "DELSLOTS", slot).Err(); err != nil {
		t.Fatal(err)
	}
	until(t, 20*time.Second, func() (bool, string) {
		st, body := ready()
		return st == 503 && strings.Contains(body, "cluster_state is not ok"), fmt.Sprintf("/readyz with slot %d unserved: %d %s", slot, st, body)
	})
	if err := mc.Do(ctx, "CLUSTER", "ADDSLOTS", slot).Err(); err != nil {
		t.Fatal(err)
	}
	until(t, 30*time.Second, func() (bool, string) {
		st, body := ready()
		return st == 200, fmt.Sprintf("/readyz with the slot served again: %d %s", st, body)
	})
}
