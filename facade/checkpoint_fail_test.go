package facade_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

var _ redis.Error = redistest.ReplyError("")

// failCheckpoint answers the first task write carrying a checkpoint whose
// last completed stage is stage with an error reply, without sending it.
// Every other command goes to Redis.
type failCheckpoint struct {
	stage string
	err   error
	hits  atomic.Int32
}

func (h *failCheckpoint) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failCheckpoint) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.hit(cmd) {
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *failCheckpoint) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		rest := make([]redis.Cmder, 0, len(cmds))
		var injected error
		for _, c := range cmds {
			if h.hit(c) {
				injected = c.Err()
				continue
			}
			rest = append(rest, c)
		}
		if injected == nil {
			return next(ctx, cmds)
		}
		if len(rest) > 0 {
			if err := next(ctx, rest); err != nil {
				return err
			}
		}
		return injected // as go-redis does: the first error of the pipeline
	}
}

// hit reports whether cmd is the write to fail, and if so sets its error.
func (h *failCheckpoint) hit(cmd redis.Cmder) bool {
	name := cmd.Name()
	if name != "evalsha" && name != "eval" {
		return false
	}
	for _, a := range cmd.Args() {
		s := asString(a)
		if !strings.HasPrefix(s, `{"lastCompletedStageIndex":`) {
			continue
		}
		var ck checkpoint.Checkpoint
		if json.Unmarshal([]byte(s), &ck) != nil || len(ck.CompletedStages) == 0 ||
			ck.CompletedStages[len(ck.CompletedStages)-1] != h.stage {
			return false
		}
		if h.hits.Add(1) != 1 {
			return false
		}
		cmd.SetErr(h.err)
		return true
	}
	return false
}

// TestCheckpointWriteFailureFailsTask: a checkpoint that cannot be written
// fails the task (seed §11.1). The write of the checkpoint after stage two
// of three gets an error reply that is neither "unavailable" nor a refusal;
// the task ends FAILED with a reason naming the failed checkpoint write,
// stage three never runs, the stored checkpoint is the last one written
// (after stage one) and the tenant lock is released with the final write.
func TestCheckpointWriteFailureFailsTask(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		hook := &failCheckpoint{stage: "two", err: redistest.ReplyError("ERR injected checkpoint write failure")}
		hooked := withHook(be, hook)
		b := setup(t, hooked)
		stages := []task.StageSpec{b.httpStage("one", task.RetryPolicy{}), b.httpStage("two", task.RetryPolicy{}), b.httpStage("three", task.RetryPolicy{})}
		v := b.create(spec(stages, "t-1"))
		pv := b.waitPlan(b.coord, v.ID, plan.StatusCompleted, plan.StatusFailed)
		tv := b.waitTask(b.coord, "t-1", task.StatusFailed)
		b.idle(b.coord)

		if n := hook.hits.Load(); n != 1 {
			t.Fatalf("the checkpoint write after stage two was not failed exactly once (hook hits %d)", n)
		}
		if !strings.Contains(tv.LastError, "checkpoint write failed") || !strings.Contains(tv.LastError, "ERR injected checkpoint write failure") {
			t.Errorf("lastError = %q, want it to name the failed checkpoint write and its error", tv.LastError)
		}
		if tv.StageIndex != 1 || tv.StageName != "two" {
			t.Errorf("failed task at stage %d %q, want 1 \"two\" (the stage whose checkpoint failed; three never started)", tv.StageIndex, tv.StageName)
		}
		if tv.FinishedAt.IsZero() || tv.Orphaned {
			t.Errorf("failed task: finishedAt %v, orphaned %v", tv.FinishedAt, tv.Orphaned)
		}
		for st, want := range map[string]int{"one": 1, "two": 1, "three": 0} {
			if n := b.target.count("t-1", st); n != want {
				t.Errorf("target saw stage %s %d times, want %d", st, n, want)
			}
		}
		// The checkpoint of stage two was not stored and the final write
		// carries none: the stored one is still stage one's, so a retry
		// from the checkpoint runs stage two again.
		if ck := tv.Checkpoint; ck == nil || ck.LastCompletedStageIndex != 0 || !slices.Equal(ck.CompletedStages, []string{"one"}) {
			t.Errorf("stored checkpoint = %+v, want stage one's", tv.Checkpoint)
		}
		if pv.Counts[task.StatusFailed] != 1 || pv.Counts.Total() != 1 {
			t.Errorf("plan counts = %v, want the task failed", pv.Counts)
		}

		tl, err := b.coord.Timeline(context.Background(), "t-1", 0)
		if err != nil {
			t.Fatal(err)
		}
		evs := tl.Events
		if len(evs) == 0 {
			t.Fatal("empty timeline")
		}
		last := evs[len(evs)-1]
		if last.Type != task.EventFailed || !strings.Contains(last.Reason, "checkpoint write failed") {
			t.Errorf("last timeline entry = %+v, want %s naming the checkpoint write", last, task.EventFailed)
		}
		for _, e := range evs {
			if e.Stage == "three" {
				t.Errorf("timeline has an entry about stage three: %+v (types %v)", e, eventTypes(evs))
			}
		}

		info, err := b.coord.Lock(context.Background(), "t-1")
		if err != nil || info.Held {
			t.Errorf("lock after the failure: %+v %v, want released", info, err)
		}
	})
}
