package repository

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// writeArgs records the record fields of every write_task.lua call (with
// either prefix: a start that takes the lock too).
type writeArgs struct {
	mu    sync.Mutex
	calls [][]string
}

// note keeps the field names of a write_task.lua call (args: evalsha, sha,
// 6, 6 keys, 11 fixed arguments, n, then n field/value pairs).
func (h *writeArgs) note(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 20 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
		return
	}
	if sha, _ := derefArg(args[1]).(string); sha != writeTaskScript.sha && sha != startTaskScript.sha && !strings.Contains(sha, "write_task.lua") {
		return
	}
	// evalsha sha numkeys KEYS... ARGV...: ARGV[11] is the field count.
	at := 3 + int(replyInt(derefArg(args[2]))) + 10
	if at >= len(args) {
		return
	}
	n := int(replyInt(derefArg(args[at])))
	var fields []string
	for i := 0; i < n && at+1+2*i < len(args); i++ {
		f, _ := derefArg(args[at+1+2*i]).(string)
		fields = append(fields, f)
	}
	h.mu.Lock()
	h.calls = append(h.calls, fields)
	h.mu.Unlock()
}

func derefArg(v any) any {
	switch p := v.(type) {
	case int:
		return int64(p)
	case *int64:
		return *p
	case *string:
		return *p
	}
	return v
}

func (h *writeArgs) last() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.calls) == 0 {
		return nil
	}
	return h.calls[len(h.calls)-1]
}

func (h *writeArgs) reset() {
	h.mu.Lock()
	h.calls = nil
	h.mu.Unlock()
}

func has(fields []string, f string) bool {
	for _, x := range fields {
		if x == f {
			return true
		}
	}
	return false
}

// A write of a RUNNING task sends only what changed since its last write
// (and heartbeatAt), relative to that write's id; the record reads the same
// as after whole writes. A re-run or takeover sends everything; a start,
// the task's first write, everything but the fields still at their zero.
func TestDeltaWrites(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		h := &writeArgs{}
		e.client.AddHook(redistest.Each(h.note))
		fx := createPlan(t, e, 3, 0)
		r := start(t, e, fx.tasks[0], 1)
		// The start is the task's first write: every mutable field that is
		// not at its zero (a new record lacks those), and no base.
		vals := mutableValues(r.tk)
		f := h.last()
		if has(f, checkPrevWrite) {
			t.Fatalf("the start sent %v, want no ?prevWrite", f)
		}
		for i, name := range mutableFields {
			if at0 := vals[i] == zeroOf(name); has(f, name) == at0 {
				t.Errorf("the start sent %v: %s (%q) sent = %v, want %v", f, name, vals[i], has(f, name), !at0)
			}
		}
		for _, name := range []string{fStageIndex, fLastError, fReason, fFinishedAt} {
			if has(f, name) {
				t.Errorf("the start sent %s, at its zero", name)
			}
		}
		checkStored(t, e, r.tk)
		for i := 1; i < 3; i++ {
			e.clock.Add(time.Second)
			r.tk.EnterStage(i, stageNames[i], e.clock.Now())
			r.mustWrite(task.StatusRunning, task.Write{Events: []task.Event{task.Event{At: e.clock.Now(), Type: task.EventStageStarted}.AtStage(i, stageNames[i])}})
			f := h.last()
			if !has(f, checkPrevWrite) || !has(f, fHeartbeatAt) || has(f, fOwner) || has(f, fStatus) || len(f) >= len(mutableFields) {
				t.Fatalf("stage write %d sent %v, want the changed fields, heartbeatAt and ?prevWrite", i, f)
			}
			checkStored(t, e, r.tk)
		}
		e.clock.Add(time.Second)
		r.complete()
		if f := h.last(); !has(f, checkPrevWrite) || !has(f, fStatus) || !has(f, fFinishedAt) {
			t.Fatalf("the final write sent %v, want a delta with status and finishedAt", f)
		}
		checkStored(t, e, r.tk)
		if n := e.redis.last.len(); n != 0 {
			t.Fatalf("%d tasks remembered after the only running one finished", n)
		}

		// The record no longer carries the remembered write (another
		// writer's change): the delta is answered "send them" and the whole
		// write goes again — one more round trip, the record right.
		r2 := start(t, e, fx.tasks[1], 1)
		tk, _ := e.redis.keys.taskKeys(r2.tk.TenantID, r2.tk.ID)
		if err := e.client.HSet(ctxT(t), tk.task, fWriteID, "someone-else", fStageName, "tampered").Err(); err != nil {
			t.Fatal(err)
		}
		e.clock.Add(time.Second)
		r2.tk.EnterStage(1, stageNames[1], e.clock.Now())
		h.reset()
		if n := roundTrips(e, func() { r2.mustWrite(task.StatusRunning, task.Write{}) }); n != 2 {
			t.Fatalf("a stale delta took %d round trips, want 2 (delta refused, whole write)", n)
		}
		h.mu.Lock()
		calls := h.calls
		h.mu.Unlock()
		if len(calls) != 2 || !has(calls[0], checkPrevWrite) || has(calls[1], checkPrevWrite) || !has(calls[1], fStageName) {
			t.Fatalf("writes sent %v, want a delta then every field", calls)
		}
		checkStored(t, e, r2.tk)

		// A first write that is not a start (a PENDING task cancelled)
		// leaves out the fields at their zero as well; the record reads as
		// the task.
		pending := fx.tasks[2]
		e.clock.Add(time.Second)
		if err := pending.Cancel(e.clock.Now(), "not needed"); err != nil {
			t.Fatal(err)
		}
		res, err := e.store.WriteTask(ctxT(t), task.Write{Task: pending, PrevStatus: task.StatusPending, ExpectSeq: 0})
		if err != nil {
			t.Fatal(err)
		}
		pending.Seq = res.Seq
		if f := h.last(); !has(f, fReason) || !has(f, fFinishedAt) || has(f, fOwner) || has(f, fLastError) || has(f, fStageIndex) {
			t.Fatalf("the cancel of a pending task sent %v, want reason and finishedAt, not the fields at their zero", f)
		}
		checkStored(t, e, pending)

		// A refused write forgets the task: the next one is whole.
		stale := task.Write{Task: r2.tk, PrevStatus: task.StatusRunning, ExpectSeq: r2.tk.Seq - 1, Guard: r2.guard}
		if _, err := e.store.WriteTask(ctxT(t), stale); err == nil {
			t.Fatal("a write expecting an old seq was taken")
		}
		e.clock.Add(time.Second)
		r2.tk.EnterStage(2, stageNames[2], e.clock.Now())
		r2.mustWrite(task.StatusRunning, task.Write{})
		if f := h.last(); has(f, checkPrevWrite) {
			t.Fatalf("the write after a refusal sent %v, want every field", f)
		}
		checkStored(t, e, r2.tk)
	})
}

// With Config.FullWrites every write sends every field.
func TestFullWrites(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{FullWrites: true}, func(t *testing.T, e *env) {
		h := &writeArgs{}
		e.client.AddHook(redistest.Each(h.note))
		fx := createPlan(t, e, 1, 0)
		r := start(t, e, fx.tasks[0], 1)
		if f := h.last(); len(f) < len(mutableFields) {
			t.Fatalf("the start sent %v, want every field", f)
		}
		e.clock.Add(time.Second)
		r.tk.EnterStage(1, stageNames[1], e.clock.Now())
		r.mustWrite(task.StatusRunning, task.Write{})
		if f := h.last(); has(f, checkPrevWrite) || len(f) < len(mutableFields) {
			t.Fatalf("a stage write sent %v, want every field", f)
		}
		checkStored(t, e, r.tk)
	})
}

// checkStored compares the stored record's mutable fields with want's.
func checkStored(t *testing.T, e *env, want *task.Task) {
	t.Helper()
	got, _, err := e.store.Task(ctxT(t), want.ID)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := mutableValues(got), mutableValues(want); g != w {
		t.Fatalf("stored fields %q\nwant %q", g, w)
	}
	if got.Seq != want.Seq {
		t.Fatalf("stored seq %d, want %d", got.Seq, want.Seq)
	}
}
