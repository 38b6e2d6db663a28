package repository

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// moveThenDown answers, in mode 1, the plan counts' move of a pipeline
// (move_plan_counts.lua: first key a plan's counts hash) with TRYAGAIN
// after the pipeline reached Redis — the write landed, its move is
// "unavailable" — and, in mode 2, every pipeline with LOADING without
// sending it: Redis still cannot serve.
type moveThenDown struct{ mode atomic.Int32 }

func (h *moveThenDown) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *moveThenDown) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *moveThenDown) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		switch h.mode.Load() {
		case 1:
			if err := next(ctx, cmds); err != nil {
				return err
			}
			for _, c := range cmds {
				if redistest.IsCountsMove(c) {
					c.SetErr(redistest.ReplyError("TRYAGAIN injected: the move could not be taken"))
				}
			}
			return nil
		case 2:
			err := redistest.ReplyError("LOADING injected: Redis cannot serve")
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// TestDualSingleLandedWriteSentAgain (from a review's proof): single-instance mode. A task's
// final write lands in Redis but its counts move is answered unavailable:
// the store answers the result (Seq > 0) with the unavailable error, and
// the run sends the same write again (same id, same expected seq: facade
// taskRun.commit, since 81fb74b) until Redis takes the move. Redis still
// cannot serve on that second sending: the write must wait (queued, or
// unavailable), as any write in an outage. It was refused (seq): the Dual
// had mirrored the landed write into memory, and the queued copy met the
// next seq there — the run stopped as refused ("fenced write refused")
// although the write was its own and had landed.
func TestDualSingleLandedWriteSentAgain(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		if b.Name == "cluster" {
			continue // single-instance mode: one Redis
		}
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			for _, tt := range []struct {
				name string
				make func(r *runner) (task.Status, error)
			}{
				{"start", func(r *runner) (task.Status, error) {
					return task.StatusPending, r.tk.Start(r.e.clock.Now(), "coord-a", 1)
				}},
				{"pause", func(r *runner) (task.Status, error) { return task.StatusRunning, r.tk.Pause(r.e.clock.Now(), "asked") }},
				{"complete", func(r *runner) (task.Status, error) { return task.StatusRunning, r.tk.Complete(r.e.clock.Now()) }},
			} {
				t.Run(tt.name, func(t *testing.T) {
					c, prefix := b.New(t)
					h := &moveThenDown{}
					c.AddHook(h)
					base := newRedisEnv(t, c, prefix, Config{})
					e, d, errs := newSingleDualEnv(t, base)
					fx := createPlan(t, e, 2, 0)
					r := &runner{t: t, e: e, tk: fx.tasks[0].Clone(), guard: task.Guard{Fence: 1}}
					if tt.name != "start" {
						r = startLocal(t, e, fx.tasks[0], 1)
					}
					prev, err := tt.make(r)
					if err != nil {
						t.Fatal(err)
					}
					w := task.Write{Task: r.tk, PrevStatus: prev, ExpectSeq: r.tk.Seq, Guard: r.guard,
						ReleaseLock: tt.name != "start", ID: task.NewWriteID()}
					h.mode.Store(1)
					res, err := e.store.WriteTask(ctxT(t), w)
					if res.Seq == 0 || !IsUnavailable(err) {
						t.Fatalf("first sending: %+v, %v; want the write's result with an unavailable error", res, err)
					}
					h.mode.Store(2)
					res, err = e.store.WriteTask(ctxT(t), w)
					var refused *task.RefusedError
					if errors.As(err, &refused) {
						t.Fatalf("the same write sent again with Redis away: refused %v (%+v); want it to wait (queued or unavailable)", err, res)
					}
					if err == nil && res.Seq != w.ExpectSeq+1 {
						t.Fatalf("the same write sent again, queued: %+v; want it answered as written (seq %d)", res, w.ExpectSeq+1)
					}
					// Redis back: the queued write is written back, answered
					// as written by its id, and its counts move applies.
					h.mode.Store(0)
					waitDrained(t, d)
					if es := errs.get(); len(es) > 0 {
						t.Fatalf("write-back errors: %v", es)
					}
					checkCounts(t, e, fx.plan.ID)
				})
			}
		})
	}
}
