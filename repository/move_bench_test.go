package repository

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// BenchmarkMovePlanCounts measures the Redis time of the plan counts move
// (move_plan_counts.lua) alone: every task of a 20 000-task plan moved
// PENDING -> RUNNING, then RUNNING -> COMPLETED, 20 moves a call (about
// what the write batches send), on a throwaway redis-server. redis-µs/move
// is INFO commandstats' EVALSHA time. Variants of the script (files *.lua in
// the directory DEPLOYCOORD_MOVE_VARIANTS, each in place of
// move_plan_counts.lua) run as sub-benchmarks beside it; -count alternates
// them:
//
//	DEPLOYCOORD_MOVE_VARIANTS=/tmp/variants go test ./repository/ -run '^$' -bench MovePlanCounts -count 5
func BenchmarkMovePlanCounts(b *testing.B) {
	variants := map[string]string{"current": movePlanCountsLua}
	if dir := os.Getenv("DEPLOYCOORD_MOVE_VARIANTS"); dir != "" {
		files, err := filepath.Glob(filepath.Join(dir, "*.lua"))
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				b.Fatal(err)
			}
			variants[strings.TrimSuffix(filepath.Base(f), ".lua")] = string(src)
		}
	}
	names := make([]string, 0, len(variants))
	for name := range variants {
		names = append(names, name)
	}
	sort.Strings(names)
	srv := redistest.StartServer(b)
	c := srv.Client()
	for _, name := range names {
		src := deriveLua + "\n" + variants[name]
		sum := sha1.Sum([]byte(src))
		sha := hex.EncodeToString(sum[:])
		if err := c.ScriptLoad(context.Background(), src).Err(); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		b.Run(name, func(b *testing.B) {
			var usec, moves int64
			for i := 0; b.Loop(); i++ {
				u, m := moveAll(b, c, sha, "mv"+strconv.Itoa(i)+name+":")
				usec, moves = usec+u, moves+m
			}
			b.ReportMetric(float64(usec)/float64(moves), "redis-µs/move")
		})
	}
}

// moveAll creates a plan of 20 000 tasks under prefix and moves each to
// RUNNING and then COMPLETED with the script sha; it returns the EVALSHA
// time and the number of moves.
func moveAll(b *testing.B, c redis.UniversalClient, sha, prefix string) (usec, moves int64) {
	b.Helper()
	const n, per = 20_000, 20
	b.StopTimer()
	e := newRedisEnv(b, c, prefix, Config{})
	fx := createPlan(b, e, n, 0)
	pk, _ := e.redis.keys.planKeys(fx.plan.ID)
	sk := e.redis.keys.statusKeys(fx.plan.ID)
	keys := []string{pk.counts, pk.plan, pk.tasks, sk[0], sk[1], sk[2], sk[3], sk[4], sk[5]}
	ctx := context.Background()
	now := time.Now()
	b.StartTimer()
	for seq, status := range []task.Status{task.StatusRunning, task.StatusCompleted} {
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		for i := 0; i < n; i += per {
			args := make([]any, 0, 11+7*(per-1))
			for j, tk := range fx.tasks[i : i+per] {
				args = append(args, tk.ID, string(status), seq+1, 1000+i+j, "w"+strconv.Itoa(seq)+tk.ID, "coord-a", tk.TenantID)
				if j == 0 {
					args = append(args, formatTime(now), TTLDefault.Milliseconds(), "threshold", micros(now))
				}
			}
			if err := c.EvalSha(ctx, sha, keys, args...).Err(); err != nil {
				b.Fatal(err)
			}
		}
		stats, err := redistest.CommandStats(ctx, c)
		if err != nil {
			b.Fatal(err)
		}
		usec += stats["evalsha"].Usec
	}
	b.StopTimer()
	counts, err := e.redis.PlanCounts(ctx, []string{fx.plan.ID})
	if err != nil || counts[fx.plan.ID][task.StatusCompleted] != n {
		b.Fatalf("counts after the moves: %v, %v; want %d COMPLETED", counts, err, n)
	}
	redistest.DeletePrefix(c, prefix)
	b.StartTimer()
	return usec, 2 * n
}
