package facade_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// loseAnswer lets the first command that match selects reach Redis and
// replaces its answer (and its pipeline's) with a transport error: the
// write landed, the writer does not know.
type loseAnswer struct {
	match func(c redis.Cmder) bool
	hits  atomic.Int32
}

// loseFinalAnswer loses the answer of the first task write (write_task.lua
// under a lock taken before) to COMPLETED.
func loseFinalAnswer() *loseAnswer {
	return &loseAnswer{match: func(c redis.Cmder) bool {
		return taskWrite(c, false) && writesStatus(c, task.StatusCompleted)
	}}
}

// taskWrite reports whether c is a task write (write_task.lua: its first
// keys are the record and the checkpoint) that takes the tenant lock
// (start_lock.lua: the fence counter among its keys) or not, by its keys
// rather than their count, which the key layout changes.
func taskWrite(c redis.Cmder, takesLock bool) bool {
	args := c.Args()
	if (c.Name() != "evalsha" && c.Name() != "eval") || len(args) < 5 {
		return false
	}
	n, err := strconv.Atoi(fmt.Sprint(args[2]))
	if err != nil || n < 2 || len(args) < 3+n {
		return false
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = asString(args[3+i])
	}
	if !strings.Contains(keys[0], "task:{") || !strings.Contains(keys[1], "ckpt:{") {
		return false
	}
	return strings.Contains(keys[n-1], "fence:tenant:{") == takesLock
}

func writesStatus(c redis.Cmder, st task.Status) bool {
	for _, a := range c.Args()[3:] {
		if asString(a) == string(st) {
			return true
		}
	}
	return false
}

func (h *loseAnswer) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loseAnswer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := next(ctx, cmd); err != nil {
			return err
		}
		return h.lose([]redis.Cmder{cmd})
	}
}

func (h *loseAnswer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := next(ctx, cmds); err != nil {
			return err
		}
		return h.lose(cmds)
	}
}

// lose sets a transport error on every command of cmds when one of them is
// the first that match selects.
func (h *loseAnswer) lose(cmds []redis.Cmder) error {
	hit := false
	for _, c := range cmds {
		if h.match(c) {
			hit = true
		}
	}
	if !hit || h.hits.Add(1) != 1 {
		return nil
	}
	err := errors.New("read tcp 127.0.0.1:6379: i/o timeout (injected: the answer was lost)")
	for _, c := range cmds {
		c.SetErr(err)
	}
	return err
}

// TestLostAnswerOfLandedWrite: the task's final write lands but its answer
// is lost. The runner sends it again with the same write id and is answered
// as written with the stored result: the task is COMPLETED once (one
// task.completed entry, counts moved once), and the plan's completion —
// known only from the write's result — reaches the feed.
func TestLostAnswerOfLandedWrite(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		hook := loseFinalAnswer()
		hooked := withHook(be, hook)
		b := setup(t, hooked)
		v := b.create(spec([]task.StageSpec{noopStage("one")}, "t-lost"))
		pv := b.waitPlan(b.coord, v.ID, plan.StatusCompleted, plan.StatusFailed)
		b.idle(b.coord)
		if n := hook.hits.Load(); n < 1 {
			t.Fatal("the final write's answer was never lost (hook not hit)")
		}
		tv := b.waitTask(b.coord, "t-lost", task.StatusCompleted)
		if pv.Status != plan.StatusCompleted || pv.Counts[task.StatusCompleted] != 1 || pv.Counts.Total() != 1 {
			t.Errorf("plan %s counts %v, want COMPLETED with 1 task completed", pv.Status, pv.Counts)
		}
		if n, types := timelineCount(t, b.coord, "t-lost", task.EventCompleted); n != 1 {
			t.Errorf("%d task.completed entries, want 1: %v", n, types)
		}
		eventually(t, 5*time.Second, func() error {
			evs, _, err := b.coord.Events(context.Background(), task.FeedFilter{PlanID: v.ID, Type: "plan.completed", Limit: 10}, 0)
			if err != nil {
				return err
			}
			if len(evs) != 1 {
				return fmt.Errorf("%d plan.completed events in the feed, want 1 (task %s)", len(evs), tv.Status)
			}
			return nil
		})
	})
}

// failFirstStart answers the first write_task call storing status RUNNING
// (a task's start) with an error reply, without sending it.
type failFirstStart struct{ hits atomic.Int32 }

func (h *failFirstStart) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failFirstStart) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.hit(cmd) {
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *failFirstStart) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if h.hit(c) {
				// The whole pipeline fails with the reply (nothing is sent).
				for _, o := range cmds {
					o.SetErr(c.Err())
				}
				return c.Err()
			}
		}
		return next(ctx, cmds)
	}
}

func (h *failFirstStart) hit(c redis.Cmder) bool {
	if !(taskWrite(c, false) || taskWrite(c, true)) || !writesStatus(c, task.StatusRunning) || h.hits.Add(1) != 1 {
		return false
	}
	c.SetErr(redistest.ReplyError("ERR injected start write failure"))
	return true
}

// TestStartWriteFailureStartsAgain: a task whose start write fails (an
// error reply: not unavailable, not refused) is still PENDING; the plan
// run reads it again from the store before it ends and starts it: the plan
// completes, the task ran once, with attempt 1.
func TestStartWriteFailureStartsAgain(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		hook := &failFirstStart{}
		hooked := withHook(be, hook)
		b := setup(t, hooked)
		v := b.create(spec([]task.StageSpec{b.httpStage("one", task.RetryPolicy{})}, "t-start"))
		pv := b.waitPlan(b.coord, v.ID, plan.StatusCompleted, plan.StatusFailed, plan.StatusPaused)
		b.idle(b.coord)
		if n := hook.hits.Load(); n < 1 {
			t.Fatal("the start write was never failed (hook not hit)")
		}
		tv := b.waitTask(b.coord, "t-start", task.StatusCompleted)
		if pv.Status != plan.StatusCompleted || tv.Attempt != 1 || b.target.count("t-start", "one") != 1 {
			t.Errorf("plan %s, task attempt %d, stage called %d times; want COMPLETED, 1, 1", pv.Status, tv.Attempt, b.target.count("t-start", "one"))
		}
	})
}
