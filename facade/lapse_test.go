package facade_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// pauseOnWrite pauses Redis (SIGSTOP) for a while just before the first
// task write of a tenant is sent, once armed.
type pauseOnWrite struct {
	srv    *redistest.Server
	tenant string
	pause  time.Duration
	armed  atomic.Bool
}

func (h *pauseOnWrite) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pauseOnWrite) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pauseOnWrite) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			args := c.Args()
			if len(args) > 4 && c.Name() == "evalsha" && strings.Contains(asString(args[4]), "ckpt:{"+h.tenant+"}") && h.armed.CompareAndSwap(true, false) {
				h.srv.Stop()
				time.AfterFunc(h.pause, h.srv.Cont)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// asString is a command argument as a string (the store passes keys and
// some values by pointer).
func asString(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case *string:
		return *s
	}
	return ""
}

// TestRetryFirstWriteOutlivesLease: the first write of a retry reaches
// Redis only after the new lock's key expired (Redis paused longer than the
// lease, shorter than the write's timeout), so it is refused for the lock.
// Nobody wrote the record or took the tenant meanwhile, so the run takes
// the lease back with the same fence and goes on — it is not answered
// "taken by someone else", and the task completes.
func TestRetryFirstWriteOutlivesLease(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	hook := &pauseOnWrite{srv: srv, tenant: "t-1", pause: 1600 * time.Millisecond}
	be := redistest.Backend{Name: "paused", New: func(t testing.TB) (redis.UniversalClient, string) {
		c := srv.Client()
		c.AddHook(hook)
		return c, "lapse:"
	}}
	b := setup(t, be, withConfig(func(c *facade.Config) { c.Lease = time.Second }))
	ctx := context.Background()
	b.failLast("t-1")
	b.target.script("t-1", "verify", 200)
	failed, err := b.coord.TaskByTenant(ctx, "t-1")
	if err != nil {
		t.Fatal(err)
	}
	hook.armed.Store(true)
	res, err := b.coord.Retry(ctx, "t-1", facade.RetryRequest{ExpectedAttempt: 1, Reason: "lease lapses during the first write"}, anyone)
	if err != nil {
		t.Fatalf("retry whose first write outlived the lease: %v, want it to take the lease back and run", err)
	}
	if hook.armed.Load() {
		t.Fatal("the pause never happened: the hook did not see the retry's write")
	}
	v := res.Task
	if v.Fence <= failed.Fence {
		t.Fatalf("retry fence %d, want above %d", v.Fence, failed.Fence)
	}
	done := b.waitTask(b.coord, "t-1", task.StatusCompleted)
	if done.Attempt != 2 || done.Fence != v.Fence || b.target.count("t-1", "verify") != 2 || b.target.count("t-1", "push") != 1 {
		t.Fatalf("attempt %d fence %d (retry's %d), verify calls %d, push calls %d", done.Attempt, done.Fence, v.Fence,
			b.target.count("t-1", "verify"), b.target.count("t-1", "push"))
	}
	tl, err := b.coord.Timeline(ctx, "t-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	regained := false
	for _, e := range tl.Events {
		regained = regained || e.Type == task.EventLeaseRegained
	}
	if !regained {
		t.Errorf("timeline lacks %s: the lease was taken back silently", task.EventLeaseRegained)
	}
}
