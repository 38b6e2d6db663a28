package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// cmdCounts is how many times Redis ran each command (INFO commandstats
// "calls"), scripts and the commands they call alike, by command name.
type cmdCounts map[string]int64

// housekeeping lists the commands the benchmark itself sends around a run
// (its statistics reads, resets and clean-ups): they are not a task's cost.
var housekeeping = map[string]bool{
	"info": true, "config": true, "config|resetstat": true, "config|set": true, "config|get": true,
	"flushall": true, "flushdb": true, "unlink": true, "scan": true, "ping": true,
	"cluster": true, "cluster|nodes": true, "cluster|slots": true, "cluster|shards": true, "cluster|info": true,
	"cluster|myid": true, "client": true, "client|setinfo": true, "client|setname": true, "hello": true,
	"select": true, "command": true, "command|docs": true, "command|info": true,
	"readonly": true, "auth": true,
}

// commandCounts reads INFO commandstats of every Redis behind c (every
// master of a cluster, summed) and returns the calls of each command.
func commandCounts(ctx context.Context, c redis.UniversalClient) (cmdCounts, error) {
	out := cmdCounts{}
	var mu sync.Mutex
	read := func(ctx context.Context, c *redis.Client) error {
		s, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return fmt.Errorf("INFO commandstats: %w", err)
		}
		m := parseCommandStats(s)
		mu.Lock()
		defer mu.Unlock()
		for k, v := range m {
			out[k] += v
		}
		return nil
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, read)
	case *redis.Client:
		err = read(ctx, c)
	default:
		err = fmt.Errorf("commandstats: unsupported client %T", c)
	}
	return out, err
}

// parseCommandStats parses the text of INFO commandstats
// ("cmdstat_get:calls=3,usec=12,..." per line) into calls per command.
// Lines it does not understand are skipped.
func parseCommandStats(s string) cmdCounts {
	out := cmdCounts{}
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			if k != "calls" {
				continue
			}
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
				out[name] += n
			}
		}
	}
	return out
}

// sub returns the calls made between snapshot a and snapshot c, without the
// benchmark's housekeeping. A counter that went down (statistics reset in
// between) counts from zero.
func (c cmdCounts) sub(a cmdCounts) cmdCounts {
	out := cmdCounts{}
	for k, v := range c {
		if housekeeping[k] {
			continue
		}
		d := v - a[k]
		if d < 0 {
			d = v
		}
		if d > 0 {
			out[k] = d
		}
	}
	return out
}

// total returns the calls of every command.
func (c cmdCounts) total() int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// scripts returns the calls of script commands (EVALSHA, EVAL, FCALL and
// their read-only forms): each carries the commands it calls, which
// commandstats counts apart.
func (c cmdCounts) scripts() int64 {
	var n int64
	for k, v := range c {
		switch k {
		case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro":
			n += v
		}
	}
	return n
}

// cmdStat is one command's calls per unit of work.
type cmdStat struct {
	name string
	per  float64
}

// perUnit returns the calls per unit of work (n units) of each command,
// most called first.
func (c cmdCounts) perUnit(n int) []cmdStat {
	out := make([]cmdStat, 0, len(c))
	for k, v := range c {
		out = append(out, cmdStat{name: k, per: float64(v) / float64(n)})
	}
	slices.SortFunc(out, func(a, b cmdStat) int {
		if r := cmp.Compare(b.per, a.per); r != 0 {
			return r
		}
		return cmp.Compare(a.name, b.name)
	})
	return out
}

// breakdown formats the commands per unit, most called first, those below
// 0.05 a unit folded into "other".
func (c cmdCounts) breakdown(n int) string {
	var parts []string
	var other float64
	for _, s := range c.perUnit(n) {
		if s.per < 0.05 {
			other += s.per
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", strings.ToUpper(s.name), s.per))
	}
	if other > 0 {
		parts = append(parts, fmt.Sprintf("other %.2f", other))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// medianCounts returns the run whose total is the median of runs (the lower
// middle one for an even count), so that a breakdown shown is one real run's.
func medianCounts(runs []cmdCounts) cmdCounts {
	if len(runs) == 0 {
		return nil
	}
	s := slices.Clone(runs)
	slices.SortFunc(s, func(a, b cmdCounts) int { return cmp.Compare(a.total(), b.total()) })
	return s[(len(s)-1)/2]
}

// usage is what one run cost Redis and this process.
type usage struct {
	cpu  cpuUse
	cmds cmdCounts
	// instr is the instructions the server executed (-callgrind), else 0.
	instr int64
}

// meterRedis is meter on e.client that also counts the instructions the
// server executes when it runs under callgrind (-callgrind).
func (e *env) meterRedis(ctx context.Context) (func(context.Context) (usage, error), error) {
	if e.cg != nil {
		if err := e.cg.Zero(); err != nil {
			return nil, err
		}
	}
	stop, err := meter(ctx, e.client)
	if err != nil || e.cg == nil {
		return stop, err
	}
	return func(ctx context.Context) (usage, error) {
		u, err := stop(ctx)
		if err != nil {
			return u, err
		}
		u.instr, err = e.cg.Dump()
		return u, err
	}, nil
}

// meter starts measuring the CPU time of this process and of the Redis
// servers behind c, and the commands those servers run; the function it
// returns stops and returns the usage since.
func meter(ctx context.Context, c redis.UniversalClient) (func(context.Context) (usage, error), error) {
	cmds0, err := commandCounts(ctx, c)
	if err != nil {
		return nil, err
	}
	cpu0 := cpuOf(ctx, c)
	return func(ctx context.Context) (usage, error) {
		cpu := cpuOf(ctx, c).sub(cpu0)
		cmds, err := commandCounts(ctx, c)
		if err != nil {
			return usage{}, err
		}
		return usage{cpu: cpu, cmds: cmds.sub(cmds0)}, nil
	}, nil
}
