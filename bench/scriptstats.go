package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/repository"
)

// slowLogOn makes the throwaway redis-server log every command from now on
// (SLOWLOG with a threshold of 0), for scriptStats: Redis' time per script,
// which INFO commandstats counts under one EVALSHA.
func (e *env) slowLogOn(ctx context.Context) error {
	if e.own == nil {
		return errors.New("-scriptstats changes the server's slow log: it needs the throwaway redis-server (no -redis)")
	}
	pp := e.client.Pipeline()
	pp.ConfigSet(ctx, "slowlog-max-len", "10000000")
	pp.ConfigSet(ctx, "slowlog-log-slower-than", "0")
	pp.Do(ctx, "slowlog", "reset")
	_, err := pp.Exec(ctx)
	return err
}

// scriptStats reads the slow log since slowLogOn, turns it off again, and
// returns the time Redis spent in each script and in each command a client
// sent, per task of n, largest first.
func (e *env) scriptStats(ctx context.Context, n int) ([]string, error) {
	logs, err := e.client.SlowLogGet(ctx, -1).Result()
	pp := e.client.Pipeline()
	pp.ConfigSet(ctx, "slowlog-log-slower-than", "10000")
	pp.ConfigSet(ctx, "slowlog-max-len", "128")
	pp.Do(ctx, "slowlog", "reset")
	if _, rerr := pp.Exec(ctx); err == nil {
		err = rerr
	}
	if err != nil {
		return nil, err
	}
	return slowLogShares(logs, repository.ScriptNames(), n), nil
}

// slowLogShares sums a slow log by script (EVALSHA by the SHA's name in
// names) and by command. The commands a script calls are logged too, from
// client "?:0", and are part of their script's time: they are left out, as
// are the benchmark's own housekeeping commands.
func slowLogShares(logs []redis.SlowLog, names map[string]string, n int) []string {
	type stat struct {
		name  string
		calls int
		d     time.Duration
	}
	by := map[string]*stat{}
	var total time.Duration
	for _, l := range logs {
		if l.ClientAddr == "?:0" || len(l.Args) == 0 {
			continue
		}
		name := strings.ToLower(l.Args[0])
		switch name {
		case "slowlog", "config", "info", "hello", "client", "flushall":
			continue
		case "evalsha":
			if len(l.Args) > 1 {
				name = "evalsha " + cmp.Or(names[l.Args[1]], l.Args[1][:min(8, len(l.Args[1]))])
			}
		}
		st := by[name]
		if st == nil {
			st = &stat{name: name}
			by[name] = st
		}
		st.calls++
		st.d += l.Duration
		total += l.Duration
	}
	stats := make([]*stat, 0, len(by))
	for _, st := range by {
		stats = append(stats, st)
	}
	slices.SortFunc(stats, func(a, b *stat) int { return cmp.Or(cmp.Compare(b.d, a.d), cmp.Compare(a.name, b.name)) })
	out := []string{fmt.Sprintf("Redis time by call (slow log of every command; the logging slows Redis: read the shares), %d tasks:", n)}
	for _, st := range stats {
		if total == 0 || st.d*1000 < total {
			break // under 0.1 %
		}
		out = append(out, fmt.Sprintf("  %-40s %6.2f calls a task  %8.1f µs a call  %5.1f %%", st.name,
			float64(st.calls)/float64(n), float64(st.d.Microseconds())/float64(st.calls), 100*float64(st.d)/float64(total)))
	}
	return out
}
