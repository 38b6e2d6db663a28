package repository

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Group commit of task writes.
//
// With many tasks running, many WriteTask calls are in flight at once. Each
// used to be a round trip of its own; now they share pipelines: a write
// that finds no pipeline of writes in flight is sent at once, from its own
// goroutine; writes arriving while one is in flight queue and go together
// in the next pipeline (up to Config.WriteBatchMax writes, no timer), sent
// by a goroutine that lives as long as writes keep queueing. Every write
// waits for exactly one exchange with Redis — a batch of k writes is one
// round trip for all k, so the budget of one round trip per stage
// transition holds for each — and Redis parses, runs and answers k writes
// for the price of one read and one write on each side. Only task writes
// are grouped: their scripts touch one tenant's (and one plan's) keys, and
// their order across tasks does not matter; writes of one task are never in
// flight together (each waits for its answer before the next).
//
// A caller whose context ends while it waits gets the context's error at
// once: if its write was not sent yet it is dropped, else its result is
// dropped and the write may still have happened — as after a timeout, the
// record's seq tells, and a retry with the same write id (Dual's replays)
// is not applied twice. A script Redis does not know (NOSCRIPT) is sent
// again with EVAL in one more pipeline for the writes that need it; the
// correction of a refused write's counts update runs on the caller's own
// round trips, as before.

// WriteBatchMaxDefault is the default of Config.WriteBatchMax.
const WriteBatchMaxDefault = 128

// writeReq is one task write on its way to Redis: write_task.lua, and
// move_plan_counts.lua with a PEXPIRE of the taskref when the counts move.
// The counts moves of the writes of one plan in a pipeline go in one call
// of move_plan_counts.lua (it takes several).
type writeReq struct {
	pending
	// script is write_task.lua with the prefix of the write's kind
	// (writeTaskScript, or startTaskScript for a start that takes the lock).
	script       *script
	wKeys, mKeys []string
	wArgs, mArgs []any
	ref          string
	// The answers, set before done is closed: wt to write_task.lua, mv
	// (status, applied) or mvErr to the counts move; pending.err a
	// transport error.
	wt    *evalCmd
	mv    []any
	mvErr error
}

// pending is what a batcher keeps of a request: its caller's context, its
// transport error, and its state.
type pending struct {
	ctx  context.Context
	err  error
	done chan struct{}
	// state: reqQueued → reqTaken (by a sender) or reqDropped (by its caller).
	state atomic.Int32
}

func (p *pending) pend() *pending { return p }

const (
	reqQueued int32 = iota
	reqTaken
	reqDropped
)

// batcher groups concurrent requests into shared pipelines, one pipeline in
// flight at a time: a request that finds none in flight is sent at once from
// its caller's goroutine; requests arriving meanwhile queue and go together
// in the next pipeline (up to max of them, no timer). One in flight keeps
// the batches large; two measured the same (Redis is busy with the other
// round trips of the tasks meanwhile). sendNow sends a batch in one pipeline
// and sets every request's answers (or err). Task writes and tenant reads
// each have one.
type batcher[R interface{ pend() *pending }] struct {
	max     int
	sendNow func(ctx context.Context, reqs []R)

	mu      sync.Mutex
	sending bool
	queue   []R
}

// writeBatcher queues the writes that arrive while a pipeline of writes is
// in flight.
type writeBatcher = batcher[*writeReq]

// send sends req and waits for its answer, in a pipeline of its own or
// shared with concurrent writes. It returns a transport error (or the
// caller's context error); the scripts' answers are in req.wt and req.mv.
func (r *Redis) send(req *writeReq) error {
	if r.batcher == nil {
		r.sendNow(req.ctx, []*writeReq{req})
		return req.err
	}
	return r.batcher.do(req)
}

func (b *batcher[R]) do(req R) error {
	p := req.pend()
	b.mu.Lock()
	if !b.sending {
		// Nothing in flight: send at once, from this goroutine.
		b.sending = true
		b.mu.Unlock()
		p.state.Store(reqTaken)
		b.sendNow(p.ctx, []R{req})
		b.handOff()
		return p.err
	}
	p.done = make(chan struct{})
	b.queue = append(b.queue, req)
	b.mu.Unlock()
	select {
	case <-p.done:
		return p.err
	case <-p.ctx.Done():
		if !p.state.CompareAndSwap(reqQueued, reqDropped) {
			// Taken: the request may land; its answer is dropped.
			select {
			case <-p.done:
				return p.err
			default:
			}
		}
		return p.ctx.Err()
	}
}

// handOff ends a send: the requests queued meanwhile go in the next
// pipeline, sent by a goroutine of their own so that the caller returns.
func (b *batcher[R]) handOff() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.sending = false
		return
	}
	go b.loop()
}

// loop sends the queue, a batch at a time, until it is empty.
func (b *batcher[R]) loop() {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.sending = false
			b.mu.Unlock()
			return
		}
		n := min(len(b.queue), b.max)
		batch := make([]R, 0, n)
		for _, req := range b.queue[:n] {
			if req.pend().state.CompareAndSwap(reqQueued, reqTaken) {
				batch = append(batch, req)
			}
		}
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()
		if len(batch) > 0 {
			ctx, cancel := batchContext(batch)
			b.sendNow(ctx, batch)
			cancel()
			for _, req := range batch {
				close(req.pend().done)
			}
		}
	}
}

// queued returns how many requests wait for the next pipeline (tests).
func (b *batcher[R]) queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// busy reports whether a pipeline is in flight (tests).
func (b *batcher[R]) busy() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sending
}

// batchContext returns the context a shared pipeline is sent with: no
// cancellation (one caller giving up must not fail the others) and the
// latest of the callers' deadlines, none if one has none.
func batchContext[R interface{ pend() *pending }](reqs []R) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, req := range reqs {
		d, ok := req.pend().ctx.Deadline()
		if !ok {
			return context.WithoutCancel(reqs[0].pend().ctx), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(reqs[0].pend().ctx), latest)
}

// moveCall is one call of move_plan_counts.lua carrying the counts moves
// of the writes reqs, all of one plan.
type moveCall struct {
	reqs []*writeReq
	keys []string
	args []any
	cmd  *evalCmd
}

// moveCallArgs are the arguments of one move in a call of several: the
// first move's 11, then 7 for each further move.
const moveCallArgs = 7

// sendNow sends the writes in one pipeline (pipe.exec: scripts Redis did
// not know go again as EVAL); it sets each write's answers, or its
// transport error.
func (r *Redis) sendNow(ctx context.Context, reqs []*writeReq) {
	fail := func(reqs []*writeReq, err error) {
		for _, req := range reqs {
			req.err = err
		}
	}
	var moves []*moveCall
	for _, req := range reqs {
		if req.mKeys == nil {
			continue
		}
		var mc *moveCall
		for _, m := range moves {
			if m.keys[0] == req.mKeys[0] {
				mc = m
				break
			}
		}
		if mc == nil {
			mc = &moveCall{keys: req.mKeys, args: req.mArgs}
			moves = append(moves, mc)
		} else {
			if len(mc.reqs) == 1 {
				mc.args = append(make([]any, 0, len(mc.args)+moveCallArgs*len(reqs)), mc.args...)
			}
			mc.args = append(mc.args, req.mArgs[:moveCallArgs]...)
		}
		mc.reqs = append(mc.reqs, req)
	}
	// A NOSCRIPT answer sends the script again with EVAL (pipe.exec); if
	// that second round trip fails, every write of the batch gets the error
	// — those whose scripts ran will find out when they are sent again
	// (the replay is recognised by its write id).
	pp := r.pipeline()
	for _, req := range reqs {
		req.wt = pp.eval(ctx, req.script, req.wKeys, req.wArgs...)
	}
	for _, mc := range moves {
		mc.cmd = pp.eval(ctx, movePlanCountsScript, mc.keys, mc.args...)
		r.indexMoves(ctx, pp, mc)
	}
	for _, req := range reqs {
		if req.ref != "" {
			pp.p.PExpire(ctx, req.ref, r.cfg.TTL)
		}
	}
	if err := pp.exec(ctx); err != nil {
		fail(reqs, err)
		return
	}
	var gone []string
	for _, mc := range moves {
		v, err := mc.cmd.cmd.Slice()
		if err == nil && len(v) < 2*len(mc.reqs) {
			err = fmt.Errorf("move plan counts: %d answers for %d moves", len(v)/2, len(mc.reqs))
		}
		for i, req := range mc.reqs {
			if err != nil {
				req.mvErr = err
			} else {
				req.mv = v[2*i : 2*i+2]
			}
		}
		if err == nil && replyStr(v[0]) == "" {
			gone = append(gone, planOfKey(mc.keys[1]))
		}
	}
	r.unindexGone(ctx, gone)
}

// Group commit of tenant reads.
//
// The reads of a tenant query — the index, the task record and the
// checkpoint (TaskByTenant, Task) — share pipelines with the reads of
// concurrent queries the same way: a query that finds no pipeline of reads
// in flight sends at once; those arriving meanwhile go together in the
// next one. Each query still waits for one exchange with Redis per step of
// its own (the budget of at most two round trips per tenant query holds for
// each), and under load Redis and the server read, parse and answer k
// queries for the price of one read and one write on each side, as with
// writes. Reads carry no order with writes (they never did: each goes on a
// connection of its own).

// readReq is the reads of one step of one query, sent together.
type readReq struct {
	pending
	cmds []redis.Cmder
}

type readBatcher = batcher[*readReq]

// readBatchMax is the most queries' reads one shared pipeline carries.
const readBatchMax = 128

// readPipe sends cmds in one pipeline — shared with the reads of
// concurrent queries unless Config.NoReadBatching — and returns a
// transport error (or the caller's context error); each command holds its
// answer.
func (r *Redis) readPipe(ctx context.Context, cmds ...redis.Cmder) error {
	if r.reads == nil {
		req := &readReq{pending: pending{ctx: ctx}, cmds: cmds}
		r.sendReads(ctx, []*readReq{req})
		return req.err
	}
	return r.reads.do(&readReq{pending: pending{ctx: ctx}, cmds: cmds})
}

// sendReads sends the reads of reqs in one pipeline and sets each one's
// transport error.
func (r *Redis) sendReads(ctx context.Context, reqs []*readReq) {
	p := r.c.Pipeline()
	for _, req := range reqs {
		for _, c := range req.cmds {
			_ = p.Process(ctx, c)
		}
	}
	_, err := p.Exec(ctx)
	for _, req := range reqs {
		req.err = transportErr(req.cmds, err)
	}
}
