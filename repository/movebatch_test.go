package repository

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestMovePlanCountsBatchEqualsOneByOne: move_plan_counts.lua applies the
// moves of one call to a copy of the counts hash and writes it back at the
// end (one HMGET, one HSET and a ZREM/ZADD per status index, however many
// moves). Random move sequences — stale seqs and fences, takeovers, owner
// counters reaching 0, the same task twice in a call, failures over the
// threshold, a plan finishing and reopening — applied one call per move to
// one plan and in calls of 1 to 9 moves to a twin plan leave the same
// counts hash, ledger, status indexes and plan status, and answer the same.
func TestMovePlanCountsBatchEqualsOneByOne(t *testing.T) {
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		statuses := append([]string{}, "PENDING", "RUNNING", "PAUSED", "COMPLETED", "FAILED", "CANCELLED")
		owners := []string{"", "coord-a", "coord-b"}
		for seed := range uint64(12) {
			rng := rand.New(rand.NewPCG(seed, 7))
			const n = 6
			a, b := createPlan(t, e, n, 2), createPlan(t, e, n, 2)
			type move struct {
				task          int
				status, owner string
				seq, fence    int
				writeID       string
			}
			seqs := make([]int, n)
			var moves []move
			for range 60 {
				j := rng.IntN(n)
				seq := seqs[j] + rng.IntN(3) // 0: stale (or a tie), 1, 2
				if seq > seqs[j] {
					seqs[j] = seq
				}
				moves = append(moves, move{task: j, status: statuses[rng.IntN(len(statuses))], owner: owners[rng.IntN(len(owners))],
					seq: seq, fence: rng.IntN(4), writeID: fmt.Sprintf("w%d", rng.IntN(1000))})
			}
			call := func(f fixture, ms []move) []any {
				pk, _ := e.redis.keys.planKeys(f.plan.ID)
				sk := e.redis.keys.statusKeys(f.plan.ID)
				keys := []string{pk.counts, pk.plan, pk.tasks, sk[0], sk[1], sk[2], sk[3], sk[4], sk[5]}
				var args []any
				for i, m := range ms {
					args = append(args, f.tasks[m.task].ID, m.status, m.seq, m.fence, m.writeID, m.owner, f.tasks[m.task].TenantID)
					if i == 0 {
						args = append(args, formatTime(t0), 60000, plan.ReasonFailureThreshold, micros(t0))
					}
				}
				v, err := e.redis.run(ctx, movePlanCountsScript, keys, args...)
				if err != nil {
					t.Fatalf("seed %d: move_plan_counts: %v", seed, err)
				}
				return v.([]any)
			}
			var outA, outB []any
			for _, m := range moves {
				outA = append(outA, call(a, []move{m})...)
			}
			for i := 0; i < len(moves); {
				k := min(1+rng.IntN(9), len(moves)-i)
				outB = append(outB, call(b, moves[i:i+k])...)
				i += k
			}
			if fmt.Sprint(outA) != fmt.Sprint(outB) {
				t.Fatalf("seed %d: answers differ:\none by one %v\nbatched    %v", seed, outA, outB)
			}
			if sa, sb := storedPlanState(t, e, a), storedPlanState(t, e, b); sa != sb {
				t.Fatalf("seed %d: state differs:\none by one %s\nbatched    %s", seed, sa, sb)
			}
		}
	})
}

// storedPlanState renders a plan's counts hash, status indexes and status with
// its task ids replaced by their index in the fixture.
func storedPlanState(t *testing.T, e *env, f fixture) string {
	t.Helper()
	ctx := ctxT(t)
	name := func(s string) string {
		for i, tk := range f.tasks {
			s = strings.ReplaceAll(s, tk.ID, fmt.Sprintf("task%d", i))
		}
		return s
	}
	pk, _ := e.redis.keys.planKeys(f.plan.ID)
	var lines []string
	for k, v := range e.client.HGetAll(ctx, pk.counts).Val() {
		if v == "0" && !strings.HasPrefix(k, "t:") && !strings.Contains(k, "@") {
			continue // a status counter at 0 and one never set read the same
		}
		lines = append(lines, name(k)+"="+v)
	}
	slices.Sort(lines)
	for i, k := range e.redis.keys.statusKeys(f.plan.ID) {
		zs := e.client.ZRangeWithScores(ctx, k, 0, -1).Val()
		var ms []string
		for _, z := range zs {
			ms = append(ms, fmt.Sprintf("%s@%.0f", name(fmt.Sprint(z.Member)), z.Score))
		}
		slices.Sort(ms)
		lines = append(lines, fmt.Sprintf("%s:%v", task.Statuses[i], ms))
	}
	p := e.client.HMGet(ctx, pk.plan, "status", "reason", "finishedAt").Val()
	lines = append(lines, fmt.Sprint("plan ", p))
	return strings.Join(lines, " ")
}
