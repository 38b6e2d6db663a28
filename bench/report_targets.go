package main

import (
	"fmt"
	"strings"
	"time"
)

// The targets of issue 12 (and the scale-out costs of issue 9) that the
// Targets table checks.
const (
	// targetVsAsynq: the N × 1 noop plan, create + run, against asynq's
	// enqueue + process.
	targetVsAsynq = 1.25
	// targetCmdsPerTask: Redis commands per task of that plan.
	targetCmdsPerTask = 20
	// targetNoWorse: two instances on one plan, and a 3-master cluster,
	// against one instance on one Redis.
	targetNoWorse = 0.90
	// targetQueryVsBare: the tenant query against the bare handler.
	targetQueryVsBare = 1.5
	// targetQueryP99: the tenant query's p99 latency.
	targetQueryP99 = 5 * time.Millisecond
	// targetStatusManyRTT: round trips of POST /v1/tenants:status of 1000
	// tenants.
	targetStatusManyRTT = 3
)

func planCmds(runs []planRun) []cmdCounts {
	out := make([]cmdCounts, len(runs))
	for i, r := range runs {
		out[i] = r.cmds
	}
	return out
}

func asynqCmds(runs []asynqRun) []cmdCounts {
	out := make([]cmdCounts, len(runs))
	for i, r := range runs {
		out[i] = r.cmds
	}
	return out
}

func sharedRuns(runs []sharedRun) []planRun {
	out := make([]planRun, len(runs))
	for i, r := range runs {
		out[i] = r.planRun
	}
	return out
}

// cmdsPerUnit returns the median over runs of the commands per unit (n
// units a run).
func cmdsPerUnit(runs []cmdCounts, n int) float64 {
	xs := make([]float64, len(runs))
	for i, c := range runs {
		xs[i] = float64(c.total()) / float64(n)
	}
	return median(xs)
}

// cmdRow shows the median Redis commands per unit of work (INFO
// commandstats deltas: script calls and the commands they run), the script
// calls among them and, for the run with the median total, every command.
func cmdRow(n int, unit string, runs []cmdCounts) row {
	if len(runs) == 0 {
		return row{"  Redis commands per " + unit, "not measured", "", ""}
	}
	m := medianCounts(runs)
	scripts := make([]float64, len(runs))
	for i, c := range runs {
		scripts[i] = float64(c.scripts()) / float64(n)
	}
	return row{"  Redis commands per " + unit + " (INFO commandstats; script calls and the commands they run)",
		fmt.Sprintf("%.1f, of which %.2f script calls; %s", cmdsPerUnit(runs, n), median(scripts), m.breakdown(n)), "", ""}
}

// tasksPerSec returns each run's tasks per second (n tasks a run).
func tasksPerSec(runs []planRun, n int) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = float64(n) / r.total.Seconds()
	}
	return out
}

// redisPerUnit returns the median Redis CPU time per unit (n units a run).
func redisPerUnit(cs []cpuUse, n int) time.Duration {
	ds := make([]time.Duration, len(cs))
	for i, c := range cs {
		ds[i] = c.redis / time.Duration(n)
	}
	return medianDur(ds)
}

// totalPerUnit is the median over rounds of the CPU of the Go process and
// of Redis together per unit.
func totalPerUnit(cs []cpuUse, n int) time.Duration {
	ds := make([]time.Duration, len(cs))
	for i, c := range cs {
		ds[i] = (c.proc + c.redis) / time.Duration(n)
	}
	return medianDur(ds)
}

func planCPU(runs []planRun) []cpuUse {
	out := make([]cpuUse, len(runs))
	for i, r := range runs {
		out[i] = r.cpu
	}
	return out
}

// ratios returns a[i]/b[i] for the rounds both have, and their median.
func ratios(a, b []float64) ([]float64, float64) {
	out := make([]float64, 0, min(len(a), len(b)))
	for i := range min(len(a), len(b)) {
		out = append(out, a[i]/b[i])
	}
	return out, median(out)
}

func ratioText(rs []float64, m float64) string {
	parts := make([]string, len(rs))
	for i, x := range rs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return fmt.Sprintf("%.2f× (rounds: %s)", m, strings.Join(parts, ", "))
}

// spread formats the tasks each instance completed and its share.
func spread(per []int64) string {
	var sum int64
	for _, v := range per {
		sum += v
	}
	nums, shares := make([]string, len(per)), make([]string, len(per))
	for i, v := range per {
		nums[i] = fmt.Sprint(v)
		shares[i] = fmt.Sprintf("%.0f%%", 100*float64(v)/float64(max(sum, 1)))
	}
	return strings.Join(nums, " / ") + " (" + strings.Join(shares, " / ") + ")"
}

// scaleTable is the scale-out section: one instance against two on one
// plan, and the big plan started by three.
func (r *report) scaleTable(x *scaleResult) table {
	n := r.cfg.N
	mode := "plans shared (every instance claims from the plan's queue)"
	if len(x.one) > 0 && !x.one[0].shared {
		mode = "plans owned (-shared-plans=false: the creator runs the plan)"
	}
	t := table{title: fmt.Sprintf("Scale-out: %s; instances in one process, each with a Redis client of its own, heartbeat %s; the first creates the plan; median of %d rounds, order alternating", mode, scaleHeartbeat, len(x.one))}
	one, two := sharedRuns(x.one), sharedRuns(x.two)
	oneR, twoR := tasksPerSec(one, n), tasksPerSec(two, n)
	t.rows = append(t.rows,
		row{fmt.Sprintf("one instance: plan of %d tenants × 1 noop, create + run (status read every %s)", n, planPoll), rates(oneR, "tasks/s"), "", ""},
		cpuRow(n, "task", cpus(one, func(p planRun) (cpuUse, time.Duration) { return p.cpu, p.total })),
		cmdRow(n, "task", planCmds(one)),
		row{"two instances on the same plan", rates(twoR, "tasks/s"), "", ""},
		cpuRow(n, "task", cpus(two, func(p planRun) (cpuUse, time.Duration) { return p.cpu, p.total })),
		cmdRow(n, "task", planCmds(two)),
	)
	var spreads []string
	for _, s := range x.two {
		spreads = append(spreads, spread(s.perInstance))
	}
	t.rows = append(t.rows, row{"  tasks completed per instance (each round)", strings.Join(spreads, "; "), "every instance > 0", verdict(allShared(x.two))})
	rs, m := ratios(twoR, oneR)
	t.rows = append(t.rows, row{"ratio two instances / one (median of the rounds' ratios)", ratioText(rs, m),
		fmt.Sprintf("≥ %.2f×", targetNoWorse), verdict(m >= targetNoWorse)})
	if len(x.owned) > 0 {
		owned := sharedRuns(x.owned)
		ownedR := tasksPerSec(owned, n)
		rs, m := ratios(oneR, ownedR)
		t.rows = append(t.rows,
			row{"one instance, the plan owned (shared plans off: no queue, no permits)", rates(ownedR, "tasks/s"), "", ""},
			cpuRow(n, "task", cpus(owned, func(p planRun) (cpuUse, time.Duration) { return p.cpu, p.total })),
			cmdRow(n, "task", planCmds(owned)),
			row{"  ratio one instance shared / owned (the cost of sharing)", ratioText(rs, m), "", ""},
		)
	}
	if b := x.big; b != nil {
		t.rows = append(t.rows,
			row{fmt.Sprintf("plan of %d tenants × 1 noop started by three instances: create + run", b.perInstanceTotal()),
				fmt.Sprintf("%s (CreatePlan %s, run %s), %.0f tasks/s", ms(b.total), ms(b.create), ms(b.run), float64(b.perInstanceTotal())/b.total.Seconds()), "", ""},
			cpuRow(int(b.perInstanceTotal()), "task", cpus([]planRun{b.planRun}, func(p planRun) (cpuUse, time.Duration) { return p.cpu, p.total })),
			cmdRow(int(b.perInstanceTotal()), "task", []cmdCounts{b.cmds}),
			row{"  tasks completed per instance", spread(b.perInstance), "every instance > 0", verdict(allShared([]sharedRun{*b}))},
		)
	}
	return t
}

// allShared reports whether every instance completed tasks in every run:
// the plan's work was spread, not run by its creator alone.
func allShared(runs []sharedRun) bool {
	for _, r := range runs {
		for _, v := range r.perInstance {
			if v == 0 {
				return false
			}
		}
	}
	return len(runs) > 0
}

func (s sharedRun) perInstanceTotal() int64 {
	var n int64
	for _, v := range s.perInstance {
		n += v
	}
	return n
}

// totalCPURow compares the CPU a task costs the Go process and Redis
// together. On a machine whose cores the benchmark, the coordinator and
// Redis share, the throughput ratio follows the inverse of this one (see
// "What limits the figures" in docs/benchmarks.md): it says how much of a
// task's cost has to go for a throughput target.
func totalCPURow(ours, theirs []cpuUse, n int) row {
	o, a := totalPerUnit(ours, n), totalPerUnit(theirs, n)
	v := us(o) + " vs " + us(a)
	if o > 0 {
		v += fmt.Sprintf(" (asynq's / ours: %.2f×)", float64(a)/float64(o))
	}
	return row{"  CPU per task, Go process + Redis: deploycoord vs asynq", v, "—", ""}
}

// targetsTable checks each target of issue 12 against this run's figures;
// a target whose section did not run says so.
func (r *report) targetsTable() table {
	cfg := r.cfg
	t := table{title: "Targets (issue 12), from this run's figures"}
	notRun := func(figure, target, sections string) row {
		return row{figure, "not measured (run -sections " + sections + ")", target, ""}
	}
	// The N × 1 plan against asynq.
	if len(r.plan1) > 0 && len(r.asynq) > 0 {
		ours, theirs := tasksPerSec(r.plan1, cfg.N), make([]float64, len(r.asynq))
		var acpu []cpuUse
		for i, a := range r.asynq {
			theirs[i] = float64(cfg.N) / a.total.Seconds()
			acpu = append(acpu, a.cpu)
		}
		rs, m := ratios(ours, theirs)
		oc, ac := redisPerUnit(planCPU(r.plan1), cfg.N), redisPerUnit(acpu, cfg.N)
		t.rows = append(t.rows,
			row{fmt.Sprintf("N × 1 noop plan (N = %d), create + run, vs asynq enqueue + process", cfg.N), ratioText(rs, m),
				fmt.Sprintf("≥ %.2f×", targetVsAsynq), verdict(m >= targetVsAsynq)},
			row{"  Redis CPU per task: deploycoord vs asynq", us(oc) + " vs " + us(ac), "≤ asynq's", verdict(oc <= ac)},
			totalCPURow(planCPU(r.plan1), acpu, cfg.N),
		)
	} else {
		t.rows = append(t.rows, notRun("N × 1 noop plan vs asynq; Redis CPU per task", fmt.Sprintf("≥ %.2f×; ≤ asynq's", targetVsAsynq), "throughput"))
	}
	if len(r.plan1) > 0 {
		c := cmdsPerUnit(planCmds(r.plan1), cfg.N)
		v := fmt.Sprintf("%.1f", c)
		if len(r.asynq) > 0 {
			v += fmt.Sprintf(" (asynq %.1f)", cmdsPerUnit(asynqCmds(r.asynq), cfg.N))
		}
		t.rows = append(t.rows, row{"  Redis commands per task (INFO commandstats)", v, fmt.Sprintf("≤ %d", targetCmdsPerTask), verdict(c <= targetCmdsPerTask)})
	} else {
		t.rows = append(t.rows, notRun("  Redis commands per task", fmt.Sprintf("≤ %d", targetCmdsPerTask), "plan"))
	}
	// Two instances, and the cluster, against one instance on one Redis.
	noWorse := func(what string, other, base []planRun, n int) []row {
		rs, m := ratios(tasksPerSec(other, n), tasksPerSec(base, n))
		oc, bc := cmdsPerUnit(planCmds(other), n), cmdsPerUnit(planCmds(base), n)
		ocpu, bcpu := redisPerUnit(planCPU(other), n), redisPerUnit(planCPU(base), n)
		costOK := oc*targetNoWorse <= bc && float64(ocpu)*targetNoWorse <= float64(bcpu)
		return []row{
			{what + ": tasks/s vs one instance on one Redis", ratioText(rs, m), fmt.Sprintf("≥ %.2f×", targetNoWorse), verdict(m >= targetNoWorse)},
			{"  Redis commands / CPU per task", fmt.Sprintf("%.1f / %s vs %.1f / %s", oc, us(ocpu), bc, us(bcpu)),
				fmt.Sprintf("≤ one instance's / %.2f", targetNoWorse), verdict(costOK)},
		}
	}
	if x := r.scale; x != nil && len(x.two) > 0 {
		t.rows = append(t.rows, noWorse("two instances on one plan", sharedRuns(x.two), sharedRuns(x.one), cfg.N)...)
		var spreads []string
		for _, s := range x.two {
			spreads = append(spreads, spread(s.perInstance))
		}
		t.rows = append(t.rows, row{"  work spread: tasks completed per instance (issue 9)", strings.Join(spreads, "; "), "every instance > 0", verdict(allShared(x.two))})
	} else {
		t.rows = append(t.rows, notRun("two instances on one plan vs one", fmt.Sprintf("≥ %.2f×", targetNoWorse), "scaleout"))
	}
	if len(r.planCluster) > 0 {
		t.rows = append(t.rows, noWorse("3-master Redis Cluster", r.planCluster, r.plan1, cfg.N)...)
	} else {
		t.rows = append(t.rows, notRun("3-master Redis Cluster vs one Redis", fmt.Sprintf("≥ %.2f×", targetNoWorse), "throughput -topology cluster"))
	}
	// The tenant query.
	if q := r.query; q != nil && len(q.real) > 0 {
		realR, bareR := make([]float64, len(q.real)), make([]float64, len(q.bare))
		var p99 []time.Duration
		for i, x := range q.real {
			realR[i] = x.rps()
			p99 = append(p99, x.p99)
		}
		for i, x := range q.bare {
			bareR[i] = x.rps()
		}
		rs, m := ratios(realR, bareR)
		p := medianDur(p99)
		t.rows = append(t.rows,
			row{"tenant query (GET /v1/tenants/{id}/task) vs the bare two-round-trip handler", ratioText(rs, m), fmt.Sprintf("≥ %.2f×", targetQueryVsBare), verdict(m >= targetQueryVsBare)},
			row{fmt.Sprintf("  its p99 at %d clients", cfg.QueryClients), fmt.Sprintf("%.2f ms", float64(p)/1e6), fmt.Sprintf("< %s", targetQueryP99), verdict(p < targetQueryP99 && cfg.QueryClients >= 64)},
		)
	} else {
		t.rows = append(t.rows, notRun("tenant query vs the bare handler; p99", fmt.Sprintf("≥ %.2f×; < %s", targetQueryVsBare, targetQueryP99), "query"))
	}
	if x := r.rtt; x != nil {
		trans := float64(x.tasks * (x.stages - 1))
		t.rows = append(t.rows,
			row{fmt.Sprintf("POST /v1/tenants:status of %d tenants: round trips", x.manyTenants), perOp(x.many), fmt.Sprintf("≤ %d", targetStatusManyRTT), verdict(x.many <= targetStatusManyRTT)},
			row{"round trips per stage transition", perOp(x.multiW[rtStage] / trans), "≤ 1", verdict(x.multiW[rtStage] <= trans+0.001)},
		)
	} else {
		t.rows = append(t.rows, notRun("POST /v1/tenants:status round trips; round trips per stage transition", "≤ 3; ≤ 1", "rtt"))
	}
	if m := r.mem; m != nil {
		t.rows = append(t.rows, row{fmt.Sprintf("memory bounded: Go heap after a %d-tenant plan vs idle", m.tenants), mib(m.after) + " vs " + mib(m.idle),
			"close to idle", verdict(heapBounded(m))})
	} else {
		t.rows = append(t.rows, notRun("memory bounded", "close to idle", "memory"))
	}
	return t
}
