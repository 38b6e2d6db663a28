package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/redistest"
)

// Kinds of round trips the classifier tells apart.
const (
	rtLockAcquire = "lock acquire"
	rtTaskStart   = "task start write (PENDING→RUNNING)"
	rtStage       = "stage transition write"
	rtTaskFinish  = "task finish write (+ lock release)"
	rtScriptLoad  = "script load"
	rtPlanStatus  = "plan status read"
	rtTenantIndex = "tenant index read"
	rtTaskRecord  = "task record read (+ checkpoint)"
	rtPlanCreate  = "plan creation"
	rtLockRelease = "lock release"
	rtLockExtend  = "lock extend"
	rtHeartbeat   = "heartbeat"
	rtEventFeed   = "event feed append"
	rtClaim       = "task claim (plan queue + permit)"
	rtPermitRenew = "permit renewal"
	rtPermitFree  = "permit release"
	rtQueuePush   = "plan queue push"
	rtDiscovery   = "plan discovery (active plans)"
)

// rttCounter is a go-redis hook that counts round trips — one per command
// sent alone, one per pipeline or MULTI/EXEC block — and sorts them by what
// they do, from the commands and their keys. It counts as the tests'
// redistest.Counter does (connection handshakes are not counted:
// redistest.Handshake), and adds the classification.
//
// Round trips made with a context from Tagged are also counted apart, so
// that an operation's own round trips can be told from what runs in the
// background meanwhile (plan polls, heartbeats, event feeds).
type rttCounter struct {
	total  atomic.Int64
	tagged atomic.Int64
	mu     sync.Mutex
	kinds  map[string]int64
	tkinds map[string]int64
	// shares are the round trips of task writes split among the writes
	// they carried (the store sends concurrent writes in one pipeline): a
	// round trip with k writes adds 1/k to the kind of each.
	shares map[string]float64
}

func newRTTCounter() *rttCounter {
	return &rttCounter{kinds: map[string]int64{}, tkinds: map[string]int64{}, shares: map[string]float64{}}
}

// tag is the context key of Tagged.
type tag struct{}

// Tagged returns ctx marked so that the round trips made with it are
// counted apart (CountTagged).
func (c *rttCounter) Tagged(ctx context.Context) context.Context {
	return context.WithValue(ctx, tag{}, c)
}

// CountTagged runs f with a tagged context and returns the round trips made
// with it, in all and by kind.
func (c *rttCounter) CountTagged(ctx context.Context, f func(ctx context.Context)) (int64, map[string]int64) {
	c.mu.Lock()
	before, kinds := c.tagged.Load(), maps.Clone(c.tkinds)
	c.mu.Unlock()
	f(c.Tagged(ctx))
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tagged.Load() - before, diff(kinds, c.tkinds)
}

// DialHook implements redis.Hook.
func (c *rttCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *rttCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(ctx, []redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *rttCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.count(ctx, cmds)
		return next(ctx, cmds)
	}
}

func (c *rttCounter) count(ctx context.Context, cmds []redis.Cmder) {
	kind := classify(cmds)
	if kind == "" {
		return // handshake only
	}
	writes := writeKinds(cmds)
	tagged := ctx.Value(tag{}) == c
	c.mu.Lock()
	c.total.Add(1)
	c.kinds[kind]++
	for _, w := range writes {
		c.shares[w] += 1 / float64(len(writes))
	}
	if tagged {
		c.tagged.Add(1)
		c.tkinds[kind]++
	}
	c.mu.Unlock()
}

// Total returns the round trips counted so far.
func (c *rttCounter) Total() int64 { return c.total.Load() }

// Snapshot returns the round trips counted so far by kind.
func (c *rttCounter) Snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.kinds)
}

// Shares returns the round trips of task writes counted so far, split among
// the writes they carried, by kind of write.
func (c *rttCounter) Shares() map[string]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.shares)
}

// diff returns b - a by kind.
func diff(a, b map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range b {
		if d := v - a[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// diffShares returns b - a by kind.
func diffShares(a, b map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range b {
		if d := v - a[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// scriptCall is a script call's keys and arguments.
type scriptCall struct {
	keys []string
	argv []any
}

// asScript returns the keys and arguments of an EVAL or EVALSHA.
func asScript(cmd redis.Cmder) (scriptCall, bool) {
	switch cmd.Name() {
	case "evalsha", "eval", "evalsha_ro", "eval_ro":
	default:
		return scriptCall{}, false
	}
	args := cmd.Args()
	if len(args) < 3 {
		return scriptCall{}, false
	}
	nk := 0
	switch v := args[2].(type) {
	case int:
		nk = v
	case int64:
		nk = int(v)
	case string:
		nk, _ = strconv.Atoi(v)
	}
	if nk < 0 || len(args) < 3+nk {
		return scriptCall{}, false
	}
	keys := make([]string, nk)
	for i := range keys {
		keys[i] = argStr(args[3+i])
	}
	return scriptCall{keys: keys, argv: args[3+nk:]}, true
}

func argStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case *string: // the store passes some arguments by pointer
		return *x
	case *int64:
		return strconv.FormatInt(*x, 10)
	case fmt.Stringer:
		return x.String()
	}
	return fmt.Sprint(v)
}

// Scripts told apart by their keys (repository/scripts, tenantlock/redislock/scripts,
// redsync's release and extend).
const (
	scWriteTask  = "write_task"
	scMoveCounts = "move_plan_counts"
	scAcquire    = "acquire_lock"
	scRelease    = "release_lock"
	scExtend     = "extend_lock"
	scBeat       = "beat_task"
	scCreate     = "create_plan"
	scFeed       = "append_events"
	scClaim      = "claim_plan_task"
	scRenew      = "renew_permits"
	scOther      = "other script"
)

// scriptKind names a script call from its keys and the number of its
// arguments.
func scriptKind(sc scriptCall) string {
	k, n := sc.keys, len(sc.argv)
	has := func(i int, part string) bool { return i < len(k) && strings.Contains(k[i], part) }
	suffix := func(i int, s string) bool { return i < len(k) && strings.HasSuffix(k[i], s) }
	switch {
	case len(k) == 1 && suffix(0, "events"):
		return scFeed // the feed's batch append (one stream entry per batch)
	case len(k) >= 3 && has(0, "plan:{") && suffix(1, ":queue") && suffix(2, ":permits"):
		return scClaim // a plan's shared work queue: an entry and a permit
	case len(k) == 1 && suffix(0, ":permits"):
		return scRenew
	case len(k) >= 2 && has(0, "task:{") && has(1, "ckpt:{"):
		return scWriteTask // by its first keys, whatever their count (a start taking the lock adds the fence)
	case len(k) == 3 && strings.HasSuffix(k[0], ":counts") && n >= 10 && (n-10)%7 == 0:
		return scMoveCounts // one move (10 arguments) or several (7 more each)
	case len(k) == 2 && has(0, "lock:tenant:{") && has(1, "fence:tenant:{") && n == 3:
		return scAcquire
	case len(k) == 1 && has(0, "lock:tenant:{") && n == 1:
		return scRelease // redsync's compare-and-delete
	case len(k) == 1 && has(0, "lock:tenant:{"):
		return scExtend // redsync's compare-and-pexpire
	case len(k) == 2 && has(0, "task:{") && has(1, "lock:tenant:{"):
		return scBeat
	case len(k) == 2 && strings.HasSuffix(k[1], ":counts") && !strings.HasSuffix(k[0], ":tasks"):
		return scCreate // create_plan.lua
	case len(k) == 2 && strings.HasSuffix(k[0], ":tasks") && n > 4:
		return scCreate // push_plan_tasks.lua (list_plan_tasks.lua has 4 arguments)
	}
	return scOther
}

// writeKinds returns the kind of each task write (write_task.lua) a round
// trip carries: a finish when it writes a final status, a start when it
// expects seq 0 (the benchmark's tasks are new), a stage transition
// otherwise.
func writeKinds(cmds []redis.Cmder) []string {
	var out []string
	for _, cmd := range cmds {
		sc, ok := asScript(cmd)
		if !ok || scriptKind(sc) != scWriteTask || len(sc.argv) < 11 {
			continue
		}
		status := ""
		for i := 11; i+1 < len(sc.argv); i += 2 { // the record's fields (write_task.lua: ARGV[12] on)
			if argStr(sc.argv[i]) == "status" {
				status = argStr(sc.argv[i+1])
				break
			}
		}
		switch {
		case status == "COMPLETED" || status == "FAILED" || status == "CANCELLED":
			out = append(out, rtTaskFinish)
		case argStr(sc.argv[2]) == "0":
			out = append(out, rtTaskStart)
		default:
			out = append(out, rtStage)
		}
	}
	return out
}

// classify names what a round trip does ("" for a handshake).
func classify(cmds []redis.Cmder) string {
	var names []string
	seen := map[string]bool{}
	moveStatus := ""
	for _, cmd := range cmds {
		if redistest.Handshake(cmd) {
			continue
		}
		name := cmd.Name()
		names = append(names, name)
		if sc, ok := asScript(cmd); ok {
			kind := scriptKind(sc)
			seen[kind] = true
			if kind == scMoveCounts {
				moveStatus = argStr(sc.argv[1])
			}
			continue
		}
		key := ""
		if args := cmd.Args(); len(args) > 1 {
			key = argStr(args[1])
		}
		switch {
		case name == "script":
			seen[rtScriptLoad] = true
		case name == "xadd":
			seen[rtEventFeed] = true
		case name == "hgetall" && strings.Contains(key, "plan:"):
			seen["plan hash"] = true
		case name == "hmget" && strings.HasSuffix(key, ":counts"):
			seen["counts"] = true
		case name == "zrevrange" && strings.HasSuffix(key, ":history"):
			seen[rtTenantIndex] = true
		case name == "hgetall" && strings.Contains(key, "task:{"):
			seen[rtTaskRecord] = true
		case name == "hset" && strings.Contains(key, "task:{"):
			seen[scCreate] = true // a batch of plan creation
		case (name == "rpush" || name == "lpush") && strings.HasSuffix(key, ":queue"):
			seen[rtQueuePush] = true
		case name == "zrem" && strings.HasSuffix(key, ":permits"):
			seen[rtPermitFree] = true
		case strings.HasSuffix(key, "plans:active") || (name == "llen" && strings.HasSuffix(key, ":queue")) ||
			(name == "zcard" && strings.HasSuffix(key, ":permits")):
			seen[rtDiscovery] = true
		}
	}
	switch {
	case len(names) == 0:
		return ""
	case seen[scWriteTask] && moveStatus == "RUNNING":
		return rtTaskStart
	case seen[scWriteTask] && moveStatus != "":
		return rtTaskFinish
	case seen[scWriteTask]:
		return rtStage
	case seen[scAcquire]:
		return rtLockAcquire
	case seen[scRelease]:
		return rtLockRelease
	case seen[scExtend]:
		return rtLockExtend
	case seen[scBeat]:
		return rtHeartbeat
	case seen[scCreate]:
		return rtPlanCreate
	case seen[scClaim]:
		return rtClaim
	case seen[scRenew]:
		return rtPermitRenew
	case seen[scFeed]:
		return rtEventFeed
	case seen[rtScriptLoad]:
		return rtScriptLoad
	case seen[rtEventFeed]:
		return rtEventFeed
	case seen[rtQueuePush]:
		return rtQueuePush
	case seen[rtPermitFree]:
		return rtPermitFree
	case seen[rtDiscovery]:
		return rtDiscovery
	case seen["plan hash"] && seen["counts"]:
		return rtPlanStatus
	case seen[rtTenantIndex] && len(names) == 1:
		return rtTenantIndex
	case seen[rtTaskRecord]:
		return rtTaskRecord
	}
	slices.Sort(names)
	return "other: " + strings.Join(slices.Compact(names), "+")
}

// rttResult holds the round trips of each measured operation.
type rttResult struct {
	tasks, stages int
	// single and multi are the round trips by kind of a plan of tasks × 1
	// stage and of tasks × stages stages, create + run.
	single, multi map[string]int64
	// singleW and multiW are the write round trips of the two runs split
	// among the writes they carried (rttCounter.Shares).
	singleW, multiW map[string]float64
	// create is the round trips of creating a plan of tasks tenants,
	// createKinds the same by kind.
	create      int64
	createKinds map[string]int64
	// query is the round trips of one tenant query through the facade,
	// queryHTTP through the HTTP API (averages).
	query, queryHTTP float64
	// status is the round trips of one plan status query.
	status float64
	// many is the round trips of one POST /v1/tenants:status of
	// manyTenants tenants, manyFound of which have a task.
	many                   float64
	manyTenants, manyFound int
}

// measureRoundTrips runs small plans on a client with the classifying hook
// and counts the round trips of every operation.
func (e *env) measureRoundTrips(ctx context.Context, tasks, stages int) (rttResult, error) {
	res := rttResult{tasks: tasks, stages: stages}
	client := e.newClient()
	defer client.Close()
	counter := newRTTCounter()
	client.AddHook(counter)
	prefix := newPrefix("rtt")
	defer func() { _ = e.reset(context.Background(), prefix) }()
	in, err := e.newInstance(client, prefix)
	if err != nil {
		return res, err
	}
	defer in.shutdown()

	// Warm up: scripts loaded, connections open. Each plan has tenants of
	// its own, so no task finds its tenant locked.
	if _, err := runOn(ctx, in, 100*tasks, 10, 1, e.cfg.Concurrency, nil); err != nil {
		return res, err
	}

	// Count from CreatePlan until idle; the checks afterwards are not counted.
	before, beforeW := counter.Snapshot(), counter.Shares()
	if _, err := runOn(ctx, in, 0, tasks, 1, e.cfg.Concurrency, func() {
		res.single, res.singleW = diff(before, counter.Snapshot()), diffShares(beforeW, counter.Shares())
	}); err != nil {
		return res, err
	}
	before, beforeW = counter.Snapshot(), counter.Shares()
	if _, err := runOn(ctx, in, tasks, tasks, stages, e.cfg.Concurrency, func() {
		res.multi, res.multiW = diff(before, counter.Snapshot()), diffShares(beforeW, counter.Shares())
	}); err != nil {
		return res, err
	}

	var pv facade.PlanView
	var err1 error
	res.create, res.createKinds = counter.CountTagged(ctx, func(ctx context.Context) {
		pv, err1 = in.coord.CreatePlan(ctx, planSpec(2*tasks, tasks, 1, e.cfg.Concurrency, false), facade.Actor{Name: "bench"})
	})
	if err1 != nil {
		return res, err1
	}

	const queries = 200
	n, _ := counter.CountTagged(ctx, func(ctx context.Context) {
		for i := range queries {
			if _, err := in.coord.TaskByTenant(ctx, tenantID(i%tasks)); err != nil {
				err1 = err
				return
			}
		}
	})
	if err1 != nil {
		return res, err1
	}
	res.query = float64(n) / queries

	h := httpapi.New(in.coord, httpapi.Config{})
	n, _ = counter.CountTagged(ctx, func(ctx context.Context) {
		for i := range queries {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/v1/tenants/"+tenantID(i%tasks)+"/task", nil).WithContext(ctx)
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				err1 = fmt.Errorf("GET tenant task: %d %s", rec.Code, rec.Body)
				return
			}
		}
	})
	if err1 != nil {
		return res, err1
	}
	res.queryHTTP = float64(n) / queries

	if err := measureStatusMany(ctx, counter, h, &res); err != nil {
		return res, err
	}

	n, _ = counter.CountTagged(ctx, func(ctx context.Context) {
		for range queries {
			if _, err := in.coord.Plan(ctx, pv.ID); err != nil {
				err1 = err
				return
			}
		}
	})
	res.status = float64(n) / queries
	return res, err1
}

// runOn runs a plan of n tenants (ids from first on) × stages noop stages
// on in, waits until in is idle, calls idle (if not nil) and checks the
// plan; it returns the plan id.
func runOn(ctx context.Context, in *instance, first, n, stages, concurrency int, idle func()) (string, error) {
	pv, err := in.coord.CreatePlan(ctx, planSpec(first, n, stages, concurrency, true), facade.Actor{Name: "bench"})
	if err != nil {
		return "", fmt.Errorf("create plan: %w", err)
	}
	if err := in.coord.Idle(ctx); err != nil {
		return "", fmt.Errorf("wait for plan %s: %w", pv.ID, err)
	}
	if idle != nil {
		idle()
	}
	return pv.ID, verifyCompleted(ctx, in, pv.ID, first, n, stages)
}

// statusManyTenants is how many tenants one POST /v1/tenants:status asks
// for in the round-trip count: the most the endpoint accepts.
const statusManyTenants = 1000

// measureStatusMany sends POST /v1/tenants:status for statusManyTenants
// tenants (the tenants of the section's plans first, then tenants without a
// task) through h ten times and keeps the most round trips one request took.
// Each answer must name every tenant, with a task for those that have one.
func measureStatusMany(ctx context.Context, counter *rttCounter, h http.Handler, res *rttResult) error {
	ids := make([]string, statusManyTenants)
	for i := range ids {
		ids[i] = tenantID(i)
	}
	body, err := json.Marshal(map[string][]string{"tenantIds": ids})
	if err != nil {
		return err
	}
	res.manyTenants = len(ids)
	for q := range 10 {
		var err1 error
		n, _ := counter.CountTagged(ctx, func(ctx context.Context) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/v1/tenants:status", bytes.NewReader(body)).WithContext(ctx)
			req.Header.Set("Content-Type", "application/json")
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				err1 = fmt.Errorf("POST /v1/tenants:status: %d %s", rec.Code, rec.Body)
				return
			}
			var doc struct {
				Tasks map[string]*json.RawMessage `json:"tasks"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
				err1 = fmt.Errorf("POST /v1/tenants:status: %w", err)
				return
			}
			found := 0
			for _, v := range doc.Tasks {
				if v != nil && string(*v) != "null" {
					found++
				}
			}
			if q > 0 && found != res.manyFound {
				err1 = fmt.Errorf("POST /v1/tenants:status: %d tenants with a task, %d the first time", found, res.manyFound)
				return
			}
			res.manyFound = found
		})
		if err1 != nil {
			return err1
		}
		res.many = max(res.many, float64(n))
	}
	want := min(3*res.tasks, statusManyTenants)
	if res.manyFound != want {
		return fmt.Errorf("POST /v1/tenants:status: %d of %d tenants with a task, want %d", res.manyFound, len(ids), want)
	}
	return nil
}
