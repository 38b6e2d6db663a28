package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestSlowLogShares(t *testing.T) {
	t.Parallel()
	log := func(addr string, d time.Duration, args ...string) redis.SlowLog {
		return redis.SlowLog{ClientAddr: addr, Duration: d, Args: args}
	}
	logs := []redis.SlowLog{
		log("127.0.0.1:5000", 60*time.Microsecond, "EVALSHA", "aaaa", "6", "k"),
		log("?:0", 10*time.Microsecond, "HSET", "k", "f", "v"), // inside the script: in its time already
		log("127.0.0.1:5000", 20*time.Microsecond, "EVALSHA", "bbbbbbbbbbbb", "1", "k"),
		log("127.0.0.1:5001", 20*time.Microsecond, "hset", "k", "f", "v"),
		log("127.0.0.1:5001", 9*time.Second, "FLUSHALL"), // the benchmark's housekeeping
		log("127.0.0.1:5001", time.Second, "slowlog", "get", "-1"),
	}
	got := strings.Join(slowLogShares(logs, map[string]string{"aaaa": "start_task"}, 2), "\n")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`evalsha start_task +0\.50 calls a task +60\.0 µs a call +60\.0 %`),
		regexp.MustCompile(`evalsha bbbbbbbb +0\.50 calls a task +20\.0 µs a call +20\.0 %`),
		regexp.MustCompile(`hset +0\.50 calls a task +20\.0 µs a call +20\.0 %`),
	} {
		if !want.MatchString(got) {
			t.Errorf("shares:\n%s\nwant a line matching %s", got, want)
		}
	}
	if strings.Contains(got, "flushall") || strings.Contains(got, "slowlog") || strings.Count(got, "hset") != 1 {
		t.Errorf("shares:\n%s\nwant neither housekeeping nor the script's own HSET", got)
	}
}

// The plan section's script calls all have names: a script whose source
// changed without its name reaching repository.ScriptNames would show as
// a bare SHA.
func TestScriptStatsNameEveryScript(t *testing.T) {
	ctx := context.Background()
	e := throwawayEnv(t, "-concurrency", "8", "-scriptstats")
	if err := e.slowLogOn(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.runPlan(ctx, 40, 1); err != nil {
		t.Fatal(err)
	}
	lines, err := e.scriptStats(ctx, 40)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(lines, "\n")
	for _, want := range []string{"evalsha start_task", "evalsha write_task", "evalsha move_plan_counts", "evalsha push_plan_tasks"} {
		if !strings.Contains(got, want) {
			t.Errorf("script stats:\n%s\nwant %q", got, want)
		}
	}
	if m := regexp.MustCompile(`evalsha [0-9a-f]{8} `).FindString(got); m != "" {
		t.Errorf("script stats:\n%s\nan unnamed script: %q", got, m)
	}
	if v, _ := e.client.ConfigGet(ctx, "slowlog-log-slower-than").Result(); v["slowlog-log-slower-than"] != "10000" {
		t.Errorf("slow log left at %v", v)
	}
}
