package redislock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// senderIdle is how long a batcher's sender goroutine waits for work before
// it exits (the next call starts another).
const senderIdle = time.Second

// evalSha runs a script and returns its reply. args is the whole EVALSHA
// command: "evalsha", the script's SHA1, the key count, the keys and the
// arguments. When Redis answers NOSCRIPT (its script cache was flushed, or
// the script was never sent), the call is made again with EVAL and src.
//
// With batching on, a call whose context has a deadline is sent at once
// from the caller's goroutine when fewer than batchLimit round trips are in
// flight and no call waits; otherwise it is queued for the batcher's sender
// and the caller waits for its answer or for its own context, whichever
// comes first. Calls without a deadline are always sent directly: one of
// them must not hold a pipeline of others on a hung connection.
func (l *Locker) evalSha(ctx context.Context, src string, args ...any) (any, error) {
	if _, ok := ctx.Deadline(); l.batch == nil || !ok {
		return l.evalShaNow(ctx, src, args)
	}
	if l.batch.direct() {
		defer l.batch.directDone()
		return l.evalShaNow(ctx, src, args)
	}
	c := &call{ctx: ctx, cmd: scriptCmd(ctx, args), src: src, done: make(chan struct{})}
	l.batch.enqueue(c)
	select {
	case <-c.done:
		return c.cmd.Result()
	case <-ctx.Done():
	}
	select {
	case <-c.done: // answered as the context ended: the answer counts
		return c.cmd.Result()
	default:
		// The call may still be sent (if it was taken for a pipeline just
		// before the context ended): the caller treats the outcome as
		// unknown, as after a timeout on a direct call.
		return nil, ctx.Err()
	}
}

// evalShaNow sends one EVALSHA from the caller's goroutine, and the script
// itself (EVAL) if Redis does not know it.
func (l *Locker) evalShaNow(ctx context.Context, src string, args []any) (any, error) {
	cmd := scriptCmd(ctx, args)
	_ = l.client.Process(ctx, cmd)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = scriptCmd(ctx, evalArgs(src, args))
		_ = l.client.Process(ctx, cmd)
	}
	return cmd.Result()
}

func scriptCmd(ctx context.Context, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3) // for a cluster client: route by the first key
	return cmd
}

// evalArgs turns EVALSHA's args into EVAL's.
func evalArgs(src string, args []any) []any {
	e := make([]any, len(args))
	copy(e, args)
	e[0], e[1] = "eval", src
	return e
}

// call is one script call handed to a batcher. The batcher sets cmd's
// answer (or replaces cmd by its EVAL form) and then closes done; the caller
// reads cmd only after done is closed.
type call struct {
	ctx  context.Context
	cmd  *redis.Cmd
	src  string
	done chan struct{}
}

// batcher sends a Locker's script calls with at most batchLimit round
// trips in flight: a call goes out at once from its caller's goroutine
// while there is room, and calls made while the limit is reached queue
// behind the round trips in flight; as soon as one returns, the sender
// goroutine sends every queued call in one pipeline (no timer delay). Under
// a burst (a plan run starting many tasks) k acquisitions then cost Redis
// and this process one round trip instead of k, and each caller still sees
// one round trip, plus the rest of one in flight. Two callers at a time go
// out as without batching.
//
// The sender starts with the first queued call and exits after senderIdle
// without one. Under load it is long-lived, so its stack has grown once for
// go-redis' deep call chain, whereas the goroutine redsync starts for every
// call grows (copies) its stack each time it runs a command itself.
//
// Deadlines: a queued call whose context ended is dropped, not sent. A
// pipeline of one call runs with that call's context, a pipeline of several
// with the latest of their deadlines (without the callers' cancellation,
// with the first call's values); every caller returns at its own context's
// end at the latest, with the context's error: the outcome is unknown then,
// as after a timeout on a direct call, and redsync sends its release.
type batcher struct {
	client redis.UniversalClient
	// limit is the most round trips in flight at once.
	limit int
	// wake tells a waiting sender that it may have work (capacity 1).
	wake chan struct{}

	mu       sync.Mutex
	queue    []*call
	inFlight int
	running  bool // a sender goroutine exists
}

// direct reports whether a call may go out at once from its caller's
// goroutine: fewer than limit round trips are in flight and no call waits.
// If so it counts the call in flight; directDone must follow.
func (b *batcher) direct() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inFlight < b.limit && len(b.queue) == 0 {
		b.inFlight++
		return true
	}
	return false
}

// directDone ends a direct call; the calls queued meanwhile go out next.
func (b *batcher) directDone() {
	b.mu.Lock()
	b.inFlight--
	kick := len(b.queue) > 0
	b.mu.Unlock()
	if kick {
		b.signal()
	}
}

func (b *batcher) signal() {
	select {
	case b.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// enqueue queues c and makes sure a sender will send it.
func (b *batcher) enqueue(c *call) {
	b.mu.Lock()
	b.queue = append(b.queue, c)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.loop()
		return
	}
	b.signal()
}

// loop is the sender: it sends what is queued whenever a round trip may
// start, then waits for more.
func (b *batcher) loop() {
	idle := time.NewTimer(senderIdle)
	defer idle.Stop()
	var batch []*call
	for {
		b.mu.Lock()
		if len(b.queue) > 0 && b.inFlight < b.limit {
			batch, b.queue = b.queue, batch[:0]
			b.inFlight++
			b.mu.Unlock()
			b.send(batch)
			clear(batch)
			b.mu.Lock()
			b.inFlight--
			b.mu.Unlock()
			continue
		}
		b.mu.Unlock()
		idle.Reset(senderIdle)
		select {
		case <-b.wake:
		case <-idle.C:
			b.mu.Lock()
			if len(b.queue) == 0 {
				b.running = false
				b.mu.Unlock()
				return
			}
			b.mu.Unlock()
		}
	}
}

// send sends batch in one pipeline (a second one for the calls answered
// NOSCRIPT, with EVAL) and hands every call its answer.
func (b *batcher) send(batch []*call) {
	live := batch[:0]
	var deadline time.Time
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd.SetErr(err)
			close(c.done)
			continue
		}
		if d, _ := c.ctx.Deadline(); d.After(deadline) {
			deadline = d
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	ctx := live[0].ctx
	if len(live) > 1 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel()
	}
	b.exec(ctx, live)
	var again []*call
	for _, c := range live {
		if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			c.cmd = scriptCmd(c.ctx, evalArgs(c.src, c.cmd.Args()))
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		b.exec(ctx, again)
	}
	for _, c := range live {
		close(c.done)
	}
}

// exec sends calls' commands in one round trip.
func (b *batcher) exec(ctx context.Context, calls []*call) {
	if len(calls) == 1 {
		_ = b.client.Process(ctx, calls[0].cmd)
		return
	}
	pipe := b.client.Pipeline()
	for _, c := range calls {
		_ = pipe.Process(ctx, c.cmd)
	}
	_, _ = pipe.Exec(ctx)
}
