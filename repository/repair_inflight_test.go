package repository

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// blockAfterPipeline blocks, once armed, after the first pipeline it sees,
// until released.
type blockAfterPipeline struct {
	armed    chan struct{}
	blocked  chan struct{}
	released chan struct{}
}

func (*blockAfterPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*blockAfterPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *blockAfterPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		n := 0
		for _, c := range cmds {
			if c.Name() == "evalsha" || c.Name() == "eval" {
				n++
			}
		}
		if n < 2 { // not a write with its counts move
			return err
		}
		select {
		case <-h.armed:
			h.armed = make(chan struct{}) // once
			close(h.blocked)
			<-h.released
		default:
		}
		return err
	}
}

// TestRedisRepairKeepsWriteInFlight: a write whose counts move applied
// before the repair read the ledger but whose task record write landed only
// after the recount (write_task answered {2,'fixed'}: the record has no
// digest, the write is sent again whole after the move; on a Cluster the
// record's node may just be slower) must be counted (a review: the recount,
// behind, won).
func TestRedisRepairKeepsWriteInFlight(t *testing.T) {
	srv := redistest.StartServer(t)
	hook := &afterPipeline{name: "hmget", skip: "lrange"}
	hooked := srv.Client()
	hooked.AddHook(hook)
	e := newRedisEnv(t, hooked, "x:", Config{})
	wc := srv.Client()
	wb := &blockAfterPipeline{armed: make(chan struct{}), blocked: make(chan struct{}), released: make(chan struct{})}
	wc.AddHook(wb)
	other := newRedisEnv(t, wc, "x:", Config{})
	ctx := ctxT(t)
	fx := createPlan(t, e, 3, 0)
	r := start(t, newRedisEnv(t, srv.Client(), "x:", Config{}), fx.tasks[0], 1)
	r.e = other // the run's next write from a store that remembers no write of it: a whole write, with ?fixedSum
	k, _ := e.redis.Keys().Task(fx.tasks[0].TenantID, fx.tasks[0].ID)
	srv.Client().HDel(ctx, k, fFixedSum) // a record without a digest (written by an older version)

	if err := r.tk.Complete(other.clock.Now()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	close(wb.armed)
	go func() {
		_, err := r.write(task.StatusRunning, task.Write{ReleaseLock: true})
		done <- err
	}()
	<-wb.blocked // write_task answered {2}, the move applied
	pk, _ := e.redis.keys.planKeys(fx.plan.ID)
	t.Logf("at block: ledger %q record %v", srv.Client().HGet(ctx, pk.counts, "t:"+fx.tasks[0].ID).Val(), srv.Client().HMGet(ctx, k, "status", "seq").Val())
	var werr error
	hook.then = func() { close(wb.released); werr = <-done } // the whole write lands after the recount
	hook.armed.Store(true)
	if _, _, err := e.store.RepairCounts(ctx, fx.plan.ID); err != nil {
		t.Fatal(err)
	}
	if werr != nil {
		t.Fatalf("write: %v", werr)
	}
	tk, _, err := e.store.Task(ctx, fx.tasks[0].ID)
	if err != nil || tk.Status != task.StatusCompleted {
		t.Fatalf("task %v %v", tk, err)
	}
	checkCounts(t, e, fx.plan.ID)
}
