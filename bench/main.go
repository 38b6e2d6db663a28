// Command deploybench measures deploycoord against what a user would pick
// instead (asynq) and against what Redis allows, side by side in one run,
// and prints a table (docs/benchmarks.md explains every figure).
//
//	cd bench && go run .                      # everything, throwaway redis-server
//	go run . -sections throughput -rounds 5   # one section
//	go run . -redis redis://127.0.0.1:6379/0  # an existing Redis (only its own keys are deleted)
//	go run . -sections throughput -cpuprofile cpu.out -blockprofile block.out
//	go run . -sections plan -topology cluster # the N × 1 plan on one Redis and on a 3-master cluster
//	go run . -sections floor                  # the N × 1 plan beside the floor design (floor.go) and asynq
//
// It is a module of its own so that asynq stays out of the product's module.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

// sectionNames lists the sections in the order they run.
// "plan" is the throughput section without asynq (for profiling
// deploycoord alone); "all" does not include it.
var sectionNames = []string{"rtt", "create", "throughput", "scaleout", "query", "memory", "scripts"}

var extraSections = []string{"plan", "shared", "floor"}

// config holds the command's flags.
type config struct {
	RedisURL       string
	N              int
	Stages         int
	StageTenants   int
	Concurrency    int
	Rounds         int
	AsynqDB        int
	AsynqEnqueuers int
	RTTTasks       int
	Big            int
	QueryClients   int
	QueryDuration  time.Duration
	MemSample      time.Duration
	Sections       []string
	LogLevel       string
	Format         string
	CPUProfile     string
	BlockProfile   string
	BlockRate      int
	MutexProfile   string
	Timeout        time.Duration
	CommandStats   bool
	ScriptStats    bool
	Callgrind      bool
	PoolSize       int
	MemProfile     string
	// Topology "cluster" also runs the N × 1 plan on a Redis Cluster of
	// three masters the command starts (throughput and plan sections).
	Topology string
	// SharedPlans runs the coordinators with facade.Config.SharedPlans (a
	// plan's work shared by every live instance through its queue in
	// Redis), as cmd/deploycoord does by default; false: the plan is run by
	// the instance that starts it.
	SharedPlans bool
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	var sections string
	fs := flag.NewFlagSet("deploybench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.RedisURL, "redis", "", "Redis URL; empty starts a throwaway redis-server on a random port (no persistence) and stops it at the end")
	fs.IntVar(&c.N, "n", 20_000, "tenants of the N × 1 plan and asynq tasks (throughput), tasks held in Redis (query)")
	fs.IntVar(&c.Stages, "stages", 10, "noop stages of the multi-stage plan")
	fs.IntVar(&c.StageTenants, "stage-tenants", 0, "tenants of the multi-stage plan (default -n)")
	fs.IntVar(&c.Concurrency, "concurrency", 64, "plan maxConcurrency and asynq server concurrency")
	fs.IntVar(&c.Rounds, "rounds", 3, "rounds of throughput and query load (medians are reported; the order alternates)")
	fs.IntVar(&c.AsynqDB, "asynq-db", 1, "Redis database asynq uses (deploycoord uses the URL's)")
	fs.IntVar(&c.AsynqEnqueuers, "asynq-enqueuers", 64, "goroutines enqueueing the asynq tasks")
	fs.IntVar(&c.RTTTasks, "rtt-tasks", 1000, "tasks of the plans whose round trips are counted")
	fs.IntVar(&c.Big, "big", 100_000, "tenants of the big plan (creation, plan status, memory, and the scale-out section's plan started by three instances)")
	fs.IntVar(&c.QueryClients, "query-clients", 64, "concurrent HTTP clients of the query load")
	fs.DurationVar(&c.QueryDuration, "query-duration", 4*time.Second, "length of one query load run")
	fs.DurationVar(&c.MemSample, "mem-sample", time.Second, "heap sampling period during the big plan")
	fs.StringVar(&sections, "sections", "all", "comma-separated sections to run: "+strings.Join(sectionNames, ", ")+
		" (all of them: all), or plan (throughput without asynq, to profile deploycoord alone), or shared (one plan's work on 1 and 2 instances, and the -big plan on 3), or floor (the N × 1 plan beside the least a task with the same guarantees could cost Redis, and asynq: floor.go)")
	fs.StringVar(&c.LogLevel, "log-level", "disabled", "coordinator log level (logs go to io.Discard): disabled, info, ...")
	fs.StringVar(&c.Format, "format", "text", "table format: text or markdown")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the sections run to this file")
	fs.StringVar(&c.BlockProfile, "blockprofile", "", "write a blocking profile to this file")
	fs.IntVar(&c.BlockRate, "blockprofilerate", 10_000, "runtime.SetBlockProfileRate with -blockprofile (ns)")
	fs.StringVar(&c.MutexProfile, "mutexprofile", "", "write a mutex contention profile to this file")
	fs.DurationVar(&c.Timeout, "timeout", 30*time.Minute, "give up after this long")
	fs.StringVar(&c.MemProfile, "memprofile", "", "memory section: write heap profiles to this file (after the big plan), FILE.during (at the largest sample) and FILE.running (at the largest once created)")
	fs.IntVar(&c.PoolSize, "pool-size", 0, "go-redis pool size of the coordinator's client (0: go-redis' default, 10 × GOMAXPROCS; cmd/deploycoord adds one connection per long poll it may hold, which no section makes)")
	fs.StringVar(&c.Topology, "topology", "single", "single: every section on one Redis; cluster: the throughput and plan sections also run the N × 1 plan "+
		"on a Redis Cluster of three masters (redis-server and redis-cli; started and stopped by the command), alternating with the runs on one Redis")
	fs.BoolVar(&c.SharedPlans, "shared-plans", true, "run plans as shared work (every instance claims tasks from the plan's queue in Redis), as cmd/deploycoord does by default "+
		"(DEPLOYCOORD_SHARED_PLANS); false: the instance that starts a plan runs it (the storage-only run follows)")
	fs.BoolVar(&c.CommandStats, "commandstats", false, "print Redis' per-command CPU time (INFO commandstats) after every throughput run")
	fs.BoolVar(&c.Callgrind, "callgrind", false, "run the throwaway redis-server under valgrind's callgrind and report the instructions Redis executes per task (floor section; a figure that does not move with the machine's load; Redis runs some 50 times slower: use a small -n)")
	fs.BoolVar(&c.ScriptStats, "scriptstats", false, "print Redis' time per script and per command (its slow log, every command logged: slower, read the shares) after every N × 1 plan run of the throughput and plan sections; needs the throwaway redis-server")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.StageTenants <= 0 {
		c.StageTenants = c.N
	}
	for _, s := range strings.Split(sections, ",") {
		switch s = strings.TrimSpace(s); {
		case s == "all":
			c.Sections = append(c.Sections, sectionNames...)
		case slices.Contains(sectionNames, s) || slices.Contains(extraSections, s):
			c.Sections = append(c.Sections, s)
		case s != "":
			return c, fmt.Errorf("-sections: unknown section %q (have %s)", s, strings.Join(sectionNames, ", "))
		}
	}
	switch {
	case c.N < 10 || c.Big < 10 || c.RTTTasks < 10 || c.StageTenants < 10:
		return c, errors.New("-n, -big, -rtt-tasks and -stage-tenants must be at least 10")
	case c.Stages < 2:
		return c, errors.New("-stages must be at least 2")
	case c.Concurrency < 1 || c.Rounds < 1 || c.QueryClients < 1 || c.AsynqEnqueuers < 1:
		return c, errors.New("-concurrency, -rounds, -query-clients and -asynq-enqueuers must be positive")
	case c.Format != "text" && c.Format != "markdown":
		return c, errors.New("-format must be text or markdown")
	case c.Topology != "single" && c.Topology != "cluster":
		return c, errors.New("-topology must be single or cluster")
	}
	return c, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploybench:", err)
		os.Exit(2)
	}
	if err := run(cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "deploybench:", err)
		os.Exit(1)
	}
}

func run(cfg config, stdout, stderr io.Writer) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	e, err := newEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	progress := func(format string, args ...any) {
		fmt.Fprintf(stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	where := "throwaway redis-server " + e.opts.Addr
	if e.own == nil {
		where = "Redis at " + e.opts.Addr
	}
	progress("%s (Redis %s), GOMAXPROCS %d", where, e.version, runtime.GOMAXPROCS(0))
	if e.cluster != nil {
		progress("Redis Cluster of %d masters %s (throughput and plan sections, N × 1 plan)", len(e.cluster.Nodes), strings.Join(e.cluster.Addrs(), ","))
	}

	stopProfiles, err := startProfiles(cfg)
	if err != nil {
		return err
	}
	r := &report{cfg: cfg, env: e, started: time.Now(), loadStart: loadAvg()}
	for _, s := range cfg.Sections {
		progress("section %s", s)
		if err := e.runSection(ctx, s, r, progress); err != nil {
			_ = stopProfiles()
			return fmt.Errorf("section %s: %w", s, err)
		}
	}
	if err := stopProfiles(); err != nil {
		return err
	}
	r.print(stdout)
	return nil
}

func (e *env) runSection(ctx context.Context, name string, r *report, progress func(string, ...any)) error {
	cfg := e.cfg
	switch name {
	case "rtt":
		res, err := e.measureRoundTrips(ctx, cfg.RTTTasks, cfg.Stages)
		if err != nil {
			return err
		}
		r.rtt = &res
	case "create":
		res, err := e.measureCreate(ctx, 1000, cfg.Big)
		if err != nil {
			return err
		}
		r.create = res
	case "throughput", "plan":
		for round := range cfg.Rounds {
			stats := func() { e.afterRun(ctx, progress) }
			e.resetStats(ctx)
			if round == 0 && name == "throughput" {
				c, err := e.pingCeiling(ctx, cfg.Concurrency, 2*time.Second)
				if err != nil {
					return err
				}
				progress("  Redis ceiling: %.0f PING round trips/s from %d goroutines", c, cfg.Concurrency)
				r.ceiling = c
			}
			ours := func() error {
				if cfg.ScriptStats {
					if err := e.slowLogOn(ctx); err != nil {
						return err
					}
				}
				pr, err := e.runPlan(ctx, cfg.N, 1)
				if err != nil {
					return err
				}
				progress("  round %d: deploycoord %d × 1 noop: %s (create %s, run %s)", round+1, cfg.N, pr.total.Round(time.Millisecond), pr.create.Round(time.Millisecond), pr.run.Round(time.Millisecond))
				r.plan1 = append(r.plan1, pr)
				if cfg.ScriptStats {
					lines, err := e.scriptStats(ctx, cfg.N)
					if err != nil {
						return err
					}
					for _, l := range lines {
						progress("    %s", l)
					}
				}
				stats()
				return nil
			}
			onCluster := func() error {
				pr, err := e.runPlanOnCluster(ctx, cfg.N)
				if err != nil {
					return err
				}
				progress("  round %d: deploycoord %d × 1 noop on the %d-master cluster: %s (create %s, run %s)", round+1, cfg.N, len(e.cluster.Nodes),
					pr.total.Round(time.Millisecond), pr.create.Round(time.Millisecond), pr.run.Round(time.Millisecond))
				r.planCluster = append(r.planCluster, pr)
				return nil
			}
			storeOnly := func() error {
				run := e.runStoreOnly
				if cfg.SharedPlans {
					run = e.runStoreShared
				}
				pr, err := run(ctx, cfg.N)
				if err != nil {
					return err
				}
				progress("  round %d: storage calls alone, %d tasks: %s", round+1, cfg.N, pr.total.Round(time.Millisecond))
				r.store = append(r.store, pr)
				stats()
				return nil
			}
			theirs := func() error { return e.asynqRound(ctx, round, &r.asynq, progress) }
			order := []func() error{ours, storeOnly, theirs}
			switch {
			case name == "plan":
				order = order[:1]
			case round%2 == 1:
				order = []func() error{theirs, storeOnly, ours}
			}
			if e.cluster != nil {
				// Alternate which topology goes first, as the other runs do.
				if round%2 == 0 {
					order = append(order, onCluster)
				} else {
					order = append([]func() error{onCluster}, order...)
				}
			}
			for _, f := range order {
				if err := f(); err != nil {
					return err
				}
			}
			pr, err := e.runPlan(ctx, cfg.StageTenants, cfg.Stages)
			if err != nil {
				return err
			}
			progress("  round %d: deploycoord %d × %d noop: %s", round+1, cfg.StageTenants, cfg.Stages, pr.total.Round(time.Millisecond))
			r.planS = append(r.planS, pr)
			stats()
		}
	case "floor":
		for round := range cfg.Rounds {
			e.resetStats(ctx)
			stats := func() { e.afterRun(ctx, progress) }
			floor := func() error {
				fr, err := e.runFloor(ctx, cfg.N)
				if err != nil {
					return err
				}
				progress("  round %d: floor design, %d tasks: %s", round+1, cfg.N, fr.total.Round(time.Millisecond))
				r.floor = append(r.floor, fr)
				stats()
				return nil
			}
			ours := func() error {
				pr, err := e.runPlan(ctx, cfg.N, 1)
				if err != nil {
					return err
				}
				progress("  round %d: deploycoord %d × 1 noop: %s", round+1, cfg.N, pr.total.Round(time.Millisecond))
				r.floorOurs = append(r.floorOurs, pr)
				stats()
				return nil
			}
			theirs := func() error { return e.asynqRound(ctx, round, &r.floorAsynq, progress) }
			order := []func() error{ours, floor, theirs}
			if round%2 == 1 {
				order = []func() error{theirs, floor, ours}
			}
			for _, f := range order {
				if err := f(); err != nil {
					return err
				}
			}
		}
	case "scaleout", "shared": // "shared": the section's earlier name
		res, err := e.measureScaleOut(ctx, cfg.N, cfg.Big, progress)
		if err != nil {
			return err
		}
		r.scale = &res
	case "query":
		res, err := e.measureQuery(ctx, cfg.N)
		if err != nil {
			return err
		}
		r.query = &res
	case "memory":
		res, err := e.measureMemory(ctx, cfg.Big)
		if err != nil {
			return err
		}
		r.mem = &res
	case "scripts":
		res, err := e.measureScripts(ctx, 200)
		if err != nil {
			return err
		}
		r.scripts = res
	}
	return nil
}

// asynqRound is one round's asynq run (-n tasks): reported, appended to
// into, followed by afterRun.
func (e *env) asynqRound(ctx context.Context, round int, into *[]asynqRun, progress func(string, ...any)) error {
	ar, err := e.runAsynq(ctx, e.cfg.N)
	if err != nil {
		return err
	}
	progress("  round %d: asynq %d no-op tasks: %s (enqueue %s, process %s)", round+1, e.cfg.N,
		ar.total.Round(time.Millisecond), ar.enqueue.Round(time.Millisecond), ar.process.Round(time.Millisecond))
	*into = append(*into, ar)
	e.afterRun(ctx, progress)
	return nil
}

// afterRun prints Redis' per-command time when -commandstats asks for it
// and resets the server's statistics for the next run.
func (e *env) afterRun(ctx context.Context, progress func(string, ...any)) {
	if e.cfg.CommandStats {
		for _, l := range e.commandStats(ctx) {
			progress("    %s", l)
		}
	}
	e.resetStats(ctx)
}

// startProfiles starts the profiles asked for; the function it returns
// stops them and writes them out.
func startProfiles(cfg config) (func() error, error) {
	var stops []func() error
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return nil, fmt.Errorf("-cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("-cpuprofile: %w", err)
		}
		stops = append(stops, func() error { pprof.StopCPUProfile(); return f.Close() })
	}
	if cfg.BlockProfile != "" {
		runtime.SetBlockProfileRate(cfg.BlockRate)
		stops = append(stops, func() error { return writeProfile("block", cfg.BlockProfile) })
	}
	if cfg.MutexProfile != "" {
		runtime.SetMutexProfileFraction(5)
		stops = append(stops, func() error { return writeProfile("mutex", cfg.MutexProfile) })
	}
	return func() error {
		var errs []error
		for _, s := range stops {
			errs = append(errs, s())
		}
		return errors.Join(errs...)
	}, nil
}

func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("%s profile: %w", name, err)
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("%s profile: %w", name, err)
	}
	return f.Close()
}
