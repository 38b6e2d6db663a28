package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report gathers the sections' results and prints them as one table.
type report struct {
	cfg       config
	env       *env
	started   time.Time
	loadStart string

	// ceiling is the PING round trips per second one client makes.
	ceiling float64
	rtt     *rttResult
	create  []creation
	plan1   []planRun
	// planCluster is the N × 1 plan on the Redis Cluster (-topology cluster).
	planCluster []planRun
	store       []planRun
	planS       []planRun
	asynq       []asynqRun
	query       *queryResult
	mem         *memResult
	scripts     []scriptCost
	scale       *scaleResult
	// floor, floorOurs and floorAsynq are the floor section's runs.
	floor, floorOurs []planRun
	floorAsynq       []asynqRun
}

// row is one line of the table.
type row struct {
	figure, value, target, verdict string
}

type table struct {
	title string
	rows  []row
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianDur(ds []time.Duration) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return time.Duration(median(xs))
}

// rates formats the median and every round's value.
func rates(xs []float64, unit string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.0f %s (rounds: %s)", median(xs), unit, strings.Join(parts, ", "))
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

func perOp(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

func (r *report) tables() []table {
	var out []table
	cfg := r.cfg

	if len(r.plan1) > 0 {
		t := table{title: fmt.Sprintf("Throughput (median of %d rounds, order alternating)", len(r.plan1))}
		ours := make([]float64, len(r.plan1))
		var creates, runs []time.Duration
		for i, p := range r.plan1 {
			ours[i] = float64(cfg.N) / p.total.Seconds()
			creates, runs = append(creates, p.create), append(runs, p.run)
		}
		if r.ceiling > 0 {
			t.rows = append(t.rows, row{fmt.Sprintf("Redis ceiling: PING round trips/s from %d goroutines (go-redis)", cfg.Concurrency),
				fmt.Sprintf("%.0f/s → at most %.0f tasks/s at 3 round trips a task", r.ceiling, r.ceiling/3), "", ""})
		}
		t.rows = append(t.rows,
			row{fmt.Sprintf("deploycoord: plan of %d tenants × 1 noop, create + run to COMPLETED", cfg.N), rates(ours, "tasks/s"), "", ""},
			row{"  CreatePlan / run (median)", ms(medianDur(creates)) + " / " + ms(medianDur(runs)), "", ""},
			cpuRow(cfg.N, "task", cpus(r.plan1, func(p planRun) (cpuUse, time.Duration) { return p.cpu, p.total })),
			cmdRow(cfg.N, "task", planCmds(r.plan1)),
		)
		if len(r.planCluster) > 0 {
			cl := make([]float64, len(r.planCluster))
			var creates, runs []time.Duration
			for i, p := range r.planCluster {
				cl[i] = float64(cfg.N) / p.total.Seconds()
				creates, runs = append(creates, p.create), append(runs, p.run)
			}
			ratios := make([]float64, 0, len(cl))
			for i := range min(len(ours), len(cl)) {
				ratios = append(ratios, cl[i]/ours[i])
			}
			parts := make([]string, len(ratios))
			for i, x := range ratios {
				parts[i] = fmt.Sprintf("%.2f", x)
			}
			t.rows = append(t.rows,
				row{fmt.Sprintf("deploycoord on a Redis Cluster of %d masters (same machine): the same plan of %d tenants × 1 noop", len(r.env.cluster.Nodes), cfg.N), rates(cl, "tasks/s"), "", ""},
				row{"  CreatePlan / run (median)", ms(medianDur(creates)) + " / " + ms(medianDur(runs)), "", ""},
				cpuRow(cfg.N, "task", cpus(r.planCluster, func(p planRun) (cpuUse, time.Duration) { return p.cpu, p.total })),
				cmdRow(cfg.N, "task (every master's)", planCmds(r.planCluster)),
				row{"  ratio cluster / one Redis (median of the rounds' ratios)", fmt.Sprintf("%.2f× (rounds: %s)", median(ratios), strings.Join(parts, ", ")), "", ""},
			)
		}
		if len(r.store) > 0 {
			st := make([]float64, len(r.store))
			for i, p := range r.store {
				st[i] = float64(cfg.N) / p.total.Seconds()
			}
			t.rows = append(t.rows,
				row{storeOnlyFigure(cfg), rates(st, "tasks/s"), "", ""},
				cpuRow(cfg.N, "task", cpus(r.store, func(p planRun) (cpuUse, time.Duration) { return p.cpu, p.total })),
				cmdRow(cfg.N, "task", planCmds(r.store)),
			)
		}
		if len(r.asynq) > 0 {
			theirs := make([]float64, len(r.asynq))
			var enq, proc []time.Duration
			for i, a := range r.asynq {
				theirs[i] = float64(cfg.N) / a.total.Seconds()
				enq, proc = append(enq, a.enqueue), append(proc, a.process)
			}
			t.rows = append(t.rows,
				row{fmt.Sprintf("asynq: %d no-op tasks, enqueue (%d goroutines) + process (concurrency %d)", cfg.N, cfg.AsynqEnqueuers, cfg.Concurrency), rates(theirs, "tasks/s"), "", ""},
				row{"  enqueue / process (median)", ms(medianDur(enq)) + " / " + ms(medianDur(proc)), "", ""},
				cpuRow(cfg.N, "task", cpus(r.asynq, func(a asynqRun) (cpuUse, time.Duration) { return a.cpu, a.total })),
				cmdRow(cfg.N, "task", asynqCmds(r.asynq)),
			)
			ratios := make([]float64, 0, len(theirs))
			for i := range min(len(ours), len(theirs)) {
				ratios = append(ratios, ours[i]/theirs[i])
			}
			parts := make([]string, len(ratios))
			for i, x := range ratios {
				parts[i] = fmt.Sprintf("%.2f", x)
			}
			m := median(ratios)
			t.rows = append(t.rows, row{"ratio deploycoord / asynq (median of the rounds' ratios)",
				fmt.Sprintf("%.2f× (rounds: %s)", m, strings.Join(parts, ", ")), fmt.Sprintf("≥ %.2f×", targetVsAsynq), verdict(m >= targetVsAsynq)})
		}
		trans := make([]float64, len(r.planS))
		tasks := make([]float64, len(r.planS))
		for i, p := range r.planS {
			trans[i] = float64(cfg.StageTenants*cfg.Stages) / p.total.Seconds()
			tasks[i] = float64(cfg.StageTenants) / p.total.Seconds()
		}
		t.rows = append(t.rows,
			row{fmt.Sprintf("deploycoord: plan of %d tenants × %d noop, create + run", cfg.StageTenants, cfg.Stages), rates(trans, "stage transitions/s"), "", ""},
			row{"  the same in tasks", rates(tasks, "tasks/s"), "", ""},
			cpuRow(cfg.StageTenants*cfg.Stages, "stage", cpus(r.planS, func(p planRun) (cpuUse, time.Duration) { return p.cpu, p.total })),
			cmdRow(cfg.StageTenants*cfg.Stages, "stage", planCmds(r.planS)),
		)
		out = append(out, t)
	}
	if len(r.floor) > 0 {
		out = append(out, r.floorTable())
	}
	if x := r.rtt; x != nil {
		t := table{title: fmt.Sprintf("Redis round trips (go-redis hook; plans of %d tasks × 1 and × %d noop stages)", x.tasks, x.stages)}
		n1, nS := float64(x.tasks), float64(x.tasks)
		trans := float64(x.tasks * (x.stages - 1))
		t.rows = append(t.rows,
			row{"per task start: claim of a queue entry and a permit (shared plan work)", perOp(float64(x.single[rtClaim]) / n1), "—", ""},
			row{"per task start: read of the claimed task (its record)", perOp(float64(x.single[rtTaskRecord]) / n1), "—", ""},
			row{"per task start: lock acquire (acquire_lock.lua; only when the start could not take the lock itself)", perOp(float64(x.single[rtLockAcquire]) / n1), "—", ""},
			row{"per task start: PENDING→RUNNING write that takes the lock (write_task + move_plan_counts, pipelined)", perOp(x.singleW[rtTaskStart] / n1), "≤ 1", verdict(x.singleW[rtTaskStart] <= n1+0.001)},
			row{"per task start in all (claim + read + lock + PENDING→RUNNING write)", perOp((float64(x.single[rtClaim]+x.single[rtTaskRecord]+x.single[rtLockAcquire]) + x.singleW[rtTaskStart]) / n1), "", ""},
			row{"per stage transition (checkpoint + record + timeline)", perOp(x.multiW[rtStage] / trans), "≤ 1", verdict(x.multiW[rtStage] <= trans+0.001)},
			row{"per task finish (final write, lock released in the same script)", perOp(x.singleW[rtTaskFinish] / n1), "≤ 1", verdict(x.singleW[rtTaskFinish] <= n1+0.001)},
			row{"  (concurrent writes share a pipeline: each waits for one round trip, a round trip of k writes counts 1/k for each)", "", "", ""},
			row{"per lock release / extend / heartbeat (separate round trips)", fmt.Sprintf("%d / %d / %d", x.single[rtLockRelease]+x.multi[rtLockRelease], x.single[rtLockExtend]+x.multi[rtLockExtend], x.single[rtHeartbeat]+x.multi[rtHeartbeat]), "0", verdict(x.single[rtLockRelease]+x.multi[rtLockRelease] == 0)},
			row{"all round trips per task, plan × 1 stage (create + run)", perOp(float64(sum(x.single)) / n1), "", ""},
			row{fmt.Sprintf("all round trips per task, plan × %d stages", x.stages), perOp(float64(sum(x.multi)) / nS), "", ""},
			row{"  other round trips during the two runs", otherKinds(x.single, x.multi), "", ""},
			row{"per tenant query (facade TaskByTenant)", perOp(x.query), "≤ 2", verdict(x.query <= 2)},
			row{"per tenant query (GET /v1/tenants/{id}/task)", perOp(x.queryHTTP), "≤ 2", verdict(x.queryHTTP <= 2)},
			row{fmt.Sprintf("per POST /v1/tenants:status of %d tenants (%d with a task)", x.manyTenants, x.manyFound), perOp(x.many), fmt.Sprintf("≤ %d", targetStatusManyRTT), verdict(x.many <= targetStatusManyRTT)},
			row{"per plan status (GET plan + counts)", perOp(x.status), "1", verdict(x.status == 1)},
			row{fmt.Sprintf("per %d-task plan creation", x.tasks), fmt.Sprint(x.create) + extraKinds(x.createKinds, rtPlanCreate), fmt.Sprintf("1 + ⌈%d/500⌉ = %d", x.tasks, 1+(x.tasks+499)/500), verdict(x.create == int64(1+(x.tasks+499)/500))},
		)
		out = append(out, t)
	}
	if len(r.create) > 0 {
		t := table{title: "Plan creation (not started) and plan status"}
		for _, c := range r.create {
			t.rows = append(t.rows, row{fmt.Sprintf("create a plan of %d tenants", c.tenants),
				fmt.Sprintf("%s, %d round trips%s (%.0f tasks/s)", ms(c.took), c.rtt, extraKinds(c.kinds, rtPlanCreate), float64(c.tenants)/c.took.Seconds()),
				fmt.Sprintf("1 + ⌈n/500⌉ = %d", 1+(c.tenants+499)/500), verdict(c.rtt == int64(1+(c.tenants+499)/500))})
		}
		for _, c := range r.create {
			t.rows = append(t.rows, row{fmt.Sprintf("plan status of a %d-task plan (mean of 2000)", c.tenants),
				fmt.Sprintf("%s, %s round trips", us(c.status), perOp(c.statusRTT)), "O(1): 1 round trip", verdict(c.statusRTT == 1)})
		}
		if len(r.create) > 1 {
			a, b := r.create[0], r.create[len(r.create)-1]
			ratio := float64(b.status) / float64(a.status)
			t.rows = append(t.rows, row{fmt.Sprintf("plan status latency, %d vs %d tasks", b.tenants, a.tenants),
				fmt.Sprintf("%.2f×", ratio), "≈ 1×", verdict(ratio < 1.5 && b.statusRTT == a.statusRTT)})
		}
		out = append(out, t)
	}
	if q := r.query; q != nil {
		t := table{title: fmt.Sprintf("Tenant query over HTTP: %d clients, keep-alive, random tenants of %d, %s a run, median of %d rounds",
			cfg.QueryClients, q.tenants, cfg.QueryDuration, len(q.real))}
		realR, bareR := make([]float64, len(q.real)), make([]float64, len(q.bare))
		var rp50, rp99, bp50, bp99 []time.Duration
		for i, x := range q.real {
			realR[i] = x.rps()
			rp50, rp99 = append(rp50, x.p50), append(rp99, x.p99)
		}
		for i, x := range q.bare {
			bareR[i] = x.rps()
			bp50, bp99 = append(bp50, x.p50), append(bp99, x.p99)
		}
		perReq := func(rs []loadResult) cpuTotals {
			var c cpuTotals
			for _, x := range rs {
				// Per request: scale the CPU time down to one request.
				c.use = append(c.use, cpuUse{proc: x.cpu.proc / time.Duration(x.requests), redis: x.cpu.redis / time.Duration(x.requests)})
				c.wall = append(c.wall, x.took/time.Duration(x.requests))
			}
			return c
		}
		t.rows = append(t.rows,
			row{"GET /v1/tenants/{id}/task (httpapi over the coordinator)", rates(realR, "req/s"), "", ""},
			row{"  p50 / p99", us(medianDur(rp50)) + " / " + us(medianDur(rp99)), fmt.Sprintf("p99 < %s", targetQueryP99), verdict(medianDur(rp99) < targetQueryP99)},
			cpuRow(1, "request (Go: server + load generator)", perReq(q.real)),
			row{"bare handler: GET index, pipelined HGETALL + GET, JSON", rates(bareR, "req/s"), "", ""},
			row{"  p50 / p99", us(medianDur(bp50)) + " / " + us(medianDur(bp99)), "", ""},
			cpuRow(1, "request (Go: server + load generator)", perReq(q.bare)),
		)
		ratios := make([]float64, 0, len(realR))
		for i := range min(len(realR), len(bareR)) {
			ratios = append(ratios, realR[i]/bareR[i])
		}
		m := median(ratios)
		t.rows = append(t.rows, row{"ratio real / bare (median of the rounds' ratios)", fmt.Sprintf("%.2f×", m), fmt.Sprintf("≥ %.2f×", targetQueryVsBare), verdict(m >= targetQueryVsBare)})
		out = append(out, t)
	}
	if m := r.mem; m != nil {
		t := table{title: fmt.Sprintf("Memory: Go heap in use after GC, plan of %d tenants × 1 noop", m.tenants)}
		t.rows = append(t.rows,
			row{"idle (coordinator warm, before the plan)", mib(m.idle) + fmt.Sprintf(", %d goroutines", m.goroutinesIdle), "", ""},
			row{fmt.Sprintf("during the plan (largest of %d samples, creation included)", m.samples), mib(m.during), "", ""},
			row{"  while its tasks run (largest sample once CreatePlan returned)", mib(m.running), "", ""},
			row{"after the plan finished", mib(m.after) + fmt.Sprintf(", %d goroutines", m.goroutinesAfter), "close to idle", verdict(heapBounded(m))},
			row{"  run time of the plan (GC forced every sample)", ms(m.took), "", ""},
		)
		out = append(out, t)
	}
	if len(r.scripts) > 0 {
		t := table{title: "Redis CPU per call, in pipelines of 100 (the cost model of a task's scripts)"}
		for _, c := range r.scripts {
			t.rows = append(t.rows, row{c.what, fmt.Sprintf("%.1f µs", float64(c.per)/float64(time.Microsecond)), "", ""})
		}
		out = append(out, t)
	}
	if x := r.scale; x != nil {
		out = append(out, r.scaleTable(x))
	}
	return append(out, r.targetsTable())
}

// cpuTotals is the CPU time and wall time of the rounds of one run kind.
type cpuTotals struct {
	use  []cpuUse
	wall []time.Duration
}

func cpus[T any](runs []T, f func(T) (cpuUse, time.Duration)) cpuTotals {
	var c cpuTotals
	for _, r := range runs {
		u, w := f(r)
		c.use, c.wall = append(c.use, u), append(c.wall, w)
	}
	return c
}

// cpuRow shows the median CPU time per unit of work of this process and of
// Redis, and how busy Redis was (its CPU time over the wall time).
func cpuRow(n int, unit string, c cpuTotals) row {
	var proc, red []time.Duration
	var busy []float64
	for i, u := range c.use {
		proc = append(proc, u.proc/time.Duration(n))
		red = append(red, u.redis/time.Duration(n))
		busy = append(busy, u.redis.Seconds()/c.wall[i].Seconds())
	}
	return row{"  CPU per " + unit + ": Go process / Redis; Redis busy",
		fmt.Sprintf("%.0f µs / %.0f µs; %.0f%% of a core", float64(medianDur(proc))/1e3, float64(medianDur(red))/1e3, 100*median(busy)), "", ""}
}

// extraKinds names the round trips of other kinds than want, "" if none.
func extraKinds(m map[string]int64, want string) string {
	var parts []string
	for k, v := range m {
		if k != want {
			parts = append(parts, fmt.Sprintf("%s: %d", k, v))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	slices.Sort(parts)
	return " (of which " + strings.Join(parts, "; ") + ")"
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// otherKinds lists the round trips of the runs that are not per-task work.
func otherKinds(a, b map[string]int64) string {
	all := map[string]int64{}
	for _, m := range []map[string]int64{a, b} {
		for k, v := range m {
			switch k {
			case rtLockAcquire, rtTaskStart, rtStage, rtTaskFinish, rtClaim, rtTaskRecord:
				continue
			}
			all[k] += v
		}
	}
	if len(all) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, all[k])
	}
	return strings.Join(parts, "; ")
}

func (r *report) header() []string {
	cfg := r.cfg
	where := "throwaway redis-server (--save \"\" --appendonly no)"
	if r.env.own == nil {
		where = "Redis at " + r.env.opts.Addr
	}
	return []string{
		fmt.Sprintf("deploybench, %s, %s; load average at start %s, at end %s (other processes share the CPUs)",
			r.started.Format("2006-01-02 15:04 MST"), time.Since(r.started).Round(time.Second), r.loadStart, loadAvg()),
		fmt.Sprintf("%s/%s, %d CPUs, GOMAXPROCS %d, %s; Redis %s, %s, on the same machine",
			runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), r.env.version, where),
		fmt.Sprintf("settings: -n %d -stages %d -stage-tenants %d -concurrency %d -rounds %d -big %d -rtt-tasks %d -query-clients %d -query-duration %s -asynq-enqueuers %d -log-level %s -topology %s -shared-plans=%t",
			cfg.N, cfg.Stages, cfg.StageTenants, cfg.Concurrency, cfg.Rounds, cfg.Big, cfg.RTTTasks, cfg.QueryClients, cfg.QueryDuration, cfg.AsynqEnqueuers, cfg.LogLevel, cfg.Topology, cfg.SharedPlans),
	}
}

// loadAvg returns the 1-minute load average ("?" where /proc is missing).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func (r *report) print(w io.Writer) {
	if r.cfg.Format == "markdown" {
		for _, h := range r.header() {
			fmt.Fprintf(w, "%s  \n", h)
		}
		for _, t := range r.tables() {
			fmt.Fprintf(w, "\n**%s**\n\n| figure | value | target | |\n|---|---|---|---|\n", t.title)
			for _, x := range t.rows {
				fmt.Fprintf(w, "| %s | %s | %s | %s |\n", strings.ReplaceAll(x.figure, "|", `\|`), x.value, x.target, x.verdict)
			}
		}
		return
	}
	for _, h := range r.header() {
		fmt.Fprintln(w, h)
	}
	for _, t := range r.tables() {
		fmt.Fprintf(w, "\n%s\n", t.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, x := range t.rows {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", x.figure, x.value, x.target, x.verdict)
		}
		_ = tw.Flush()
	}
}

// heapBounded reports whether the heap after the big plan is close to the
// idle heap: at most half as much again, plus 4 MiB.
func heapBounded(m *memResult) bool { return m.after < m.idle+m.idle/2+(4<<20) }

// storeOnlyFigure names the storage-only run of cfg.
func storeOnlyFigure(cfg config) string {
	if cfg.SharedPlans {
		return fmt.Sprintf("storage calls alone: the same %d tasks' CreatePlan and queue push, then claim + permit, task read, start (taking the lock) and final writes from %d goroutines, no coordinator", cfg.N, cfg.Concurrency)
	}
	return fmt.Sprintf("storage calls alone: the same %d tasks' CreatePlan, start (taking the lock) and final writes from %d goroutines, no coordinator", cfg.N, cfg.Concurrency)
}

// floorTable compares deploycoord's N × 1 plan with the floor design and
// asynq, run alternately in the floor section.
func (r *report) floorTable() table {
	n := r.cfg.N
	t := table{title: fmt.Sprintf("The floor of a task's Redis cost (median of %d rounds, order alternating)", len(r.floor))}
	// side is one of the three compared: its runs' figures.
	type side struct {
		figure string
		rates  []float64
		cpu    cpuTotals
		cmds   []cmdCounts
		instr  []float64 // Redis instructions a task (-callgrind), else 0
	}
	ofPlans := func(figure string, runs []planRun) side {
		s := side{figure: figure, cpu: cpus(runs, func(p planRun) (cpuUse, time.Duration) { return p.cpu, p.total }), cmds: planCmds(runs)}
		for _, p := range runs {
			s.rates, s.instr = append(s.rates, float64(n)/p.total.Seconds()), append(s.instr, float64(p.instr)/float64(n))
		}
		return s
	}
	theirs := side{figure: fmt.Sprintf("asynq: %d no-op tasks, enqueue + process", n),
		cpu: cpus(r.floorAsynq, func(a asynqRun) (cpuUse, time.Duration) { return a.cpu, a.total }), cmds: asynqCmds(r.floorAsynq)}
	for _, a := range r.floorAsynq {
		theirs.rates, theirs.instr = append(theirs.rates, float64(n)/a.total.Seconds()), append(theirs.instr, float64(a.instr)/float64(n))
	}
	sides := []side{
		ofPlans(fmt.Sprintf("deploycoord: plan of %d tenants × 1 noop, create + run", n), r.floorOurs),
		ofPlans(fmt.Sprintf("floor design (bench/floor.go): %d tasks, the same guarantees and nothing else, on go-redis alone", n), r.floor),
		theirs,
	}
	var redis, instr [3]float64
	for i, s := range sides {
		t.rows = append(t.rows, row{s.figure, rates(s.rates, "tasks/s"), "", ""}, cpuRow(n, "task", s.cpu), cmdRow(n, "task", s.cmds))
		var per []float64
		for _, u := range s.cpu.use {
			per = append(per, float64(u.redis)/float64(n))
		}
		redis[i], instr[i] = median(per), median(s.instr)
	}
	if f := redis[1]; f > 0 && redis[2] > 0 {
		t.rows = append(t.rows, row{"Redis CPU per task: deploycoord / floor / asynq, as multiples of the floor",
			fmt.Sprintf("%.2f× / 1× / %.2f×", redis[0]/f, redis[2]/f), "", ""})
	}
	if f := instr[1]; f > 0 {
		t.rows = append(t.rows, row{"Redis instructions per task (callgrind): deploycoord / floor / asynq",
			fmt.Sprintf("%.0f / %.0f / %.0f (%.2f× / 1× / %.2f×)", instr[0], f, instr[2], instr[0]/f, instr[2]/f), "", ""})
	}
	return t
}
