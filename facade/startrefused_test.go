package facade_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// refuseFirstStart makes the first task start that takes the tenant lock
// (start_lock.lua) expect seq 99: Redis refuses it ("seq") with the record
// PENDING — as if someone had written the task after this instance read it.
type refuseFirstStart struct{ hits atomic.Int32 }

func (h *refuseFirstStart) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *refuseFirstStart) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.stale(cmd)
		return next(ctx, cmd)
	}
}

func (h *refuseFirstStart) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.stale(c)
		}
		return next(ctx, cmds)
	}
}

func (h *refuseFirstStart) stale(c redis.Cmder) {
	if !taskWrite(c, true) || !writesStatus(c, task.StatusRunning) || h.hits.Add(1) != 1 {
		return
	}
	args := c.Args()
	n, _ := strconv.Atoi(fmt.Sprint(args[2]))
	args[3+n+2] = int64(99) // ARGV[3], the expected seq
}

// syncBuffer is a log sink safe for the coordinator's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// lines returns the JSON log lines whose message is msg.
func (s *syncBuffer) lines(t *testing.T, msg string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range bytes.Split(s.buf.Bytes(), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(l, &m) == nil && m["message"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// TestStartRefusedLogsWhy: a start refused because the record changed after
// it was read leaves the task PENDING; it is started again and completes —
// and the warning says why (cause "refused", the refusal, the stored
// status and seq, the start's expected seq and fence), so that an SRE can
// tell a concurrent writer from Redis trouble without reading the code.
// Before, it said "could not mark task RUNNING; it will be started again"
// and the error alone (an operator session: 274 such warnings after a bulk
// retry, cause unknown).
func TestStartRefusedLogsWhy(t *testing.T) {
	t.Parallel()
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		hook := &refuseFirstStart{}
		sink := &syncBuffer{}
		log := zerolog.New(sink).Level(zerolog.WarnLevel)
		b := setup(t, withHook(be, hook), withConfig(func(c *facade.Config) { c.Logger = &log }))
		v := b.create(spec([]task.StageSpec{noopStage("one")}, "t-refused"))
		tv := b.waitTask(b.coord, "t-refused", task.StatusCompleted)
		b.waitPlan(b.coord, v.ID, plan.StatusCompleted)
		if hook.hits.Load() < 1 {
			t.Fatal("no start was refused (hook not hit)")
		}
		if tv.Attempt != 1 {
			t.Errorf("attempt %d, want 1", tv.Attempt)
		}
		warns := sink.lines(t, "could not mark task RUNNING; it will be started again")
		if len(warns) != 1 {
			t.Fatalf("%d warnings, want 1", len(warns))
		}
		w := warns[0]
		for k, want := range map[string]any{"cause": "refused", "refusal": "seq", "stored_status": "PENDING", "stored_seq": 0.0, "expected_seq": 0.0} {
			if w[k] != want {
				t.Errorf("warning field %s = %v, want %v (warning %v)", k, w[k], want, w)
			}
		}
		if f, _ := w["fence"].(float64); f < 1 {
			t.Errorf("warning field fence = %v, want the start's fence (warning %v)", w["fence"], w)
		}
	})
}
