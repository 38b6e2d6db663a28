package facade

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Limits of the event publisher.
const (
	// publishBatch is the most events sent in one round trip.
	publishBatch = 256
	// publishEvery is how long events wait to be batched.
	publishEvery = 20 * time.Millisecond
	// publishBuffer bounds the events kept while Redis is unreachable; the
	// oldest are dropped beyond it (the task timelines keep them).
	publishBuffer = 50_000
)

// publisher sends feed events to the store in batches from one goroutine,
// so a task write never waits for the feed (the feed is an at-least-once
// notification; the task timeline, written with the transition, is the
// record).
type publisher struct {
	store Store
	log   zerolog.Logger

	mu      sync.Mutex
	buf     []task.FeedEvent
	dropped int
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

func newPublisher(store Store, log zerolog.Logger) *publisher {
	p := &publisher{store: store, log: log, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p
}

// publish queues events; it never blocks.
func (p *publisher) publish(evs ...task.FeedEvent) {
	if len(evs) == 0 {
		return
	}
	p.mu.Lock()
	p.buf = append(p.buf, evs...)
	if over := len(p.buf) - publishBuffer; over > 0 {
		p.buf = append(p.buf[:0:0], p.buf[over:]...)
		p.dropped += over
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *publisher) loop() {
	defer close(p.done)
	delay := publishEvery
	for {
		select {
		case <-p.wake:
		case <-p.stop:
			p.flush(true)
			return
		}
		time.Sleep(publishEvery) // let a burst gather into one batch
		for p.flush(false) {
			// Redis refused or is unreachable: keep the events, try again.
			select {
			case <-time.After(delay):
				delay = min(delay*2, 2*time.Second)
			case <-p.stop:
				p.flush(true)
				return
			}
		}
		delay = publishEvery
	}
}

// flush sends everything buffered; it returns true when a send failed and
// events are left. final makes it try once, within a short deadline.
func (p *publisher) flush(final bool) (failed bool) {
	for {
		p.mu.Lock()
		n := min(len(p.buf), publishBatch)
		batch := p.buf[:n:n]
		dropped := p.dropped
		p.dropped = 0
		p.mu.Unlock()
		if dropped > 0 {
			p.log.Warn().Int("dropped", dropped).Msg("event feed buffer full while redis was unreachable; oldest events dropped")
		}
		if n == 0 {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := p.store.PublishEvents(ctx, batch)
		cancel()
		if err != nil {
			if final {
				p.log.Warn().Err(err).Int("events", n).Msg("event feed not flushed at shutdown")
				return true
			}
			return true
		}
		p.mu.Lock()
		p.buf = p.buf[n:]
		p.mu.Unlock()
	}
}

func (p *publisher) close() {
	close(p.stop)
	<-p.done
}

// feedEvent turns a timeline entry of t into a feed event.
func feedEvent(t *task.Task, ev task.Event) task.FeedEvent {
	// The data (task.EventData) is written by the store from the event
	// itself, without a map per event.
	return task.FeedEvent{Type: string(ev.Type), At: ev.At, PlanID: t.PlanID, TaskID: t.ID, TenantID: t.TenantID, Of: &ev, OfStatus: t.Status}
}

// publishWrite publishes the timeline entries of a successful task write.
func (c *Coordinator) publishWrite(t *task.Task, prev task.Status, evs []task.Event) {
	if len(evs) == 0 {
		return
	}
	out := make([]task.FeedEvent, len(evs))
	for i, ev := range evs {
		out[i] = feedEvent(t, ev)
	}
	c.pub.publish(out...)
}

// publishTask publishes one event about a task that is not in its timeline
// (a lease lost: the instance can no longer write the task).
func (c *Coordinator) publishTask(t *task.Task, ev task.Event) {
	ev.Attempt = t.Attempt
	c.pub.publish(feedEvent(t, ev))
}

// publishPlan publishes a plan event (plan.created, plan.paused, ...).
func (c *Coordinator) publishPlan(p *plan.Plan, typ string, a *Actor, reason string, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["status"] = string(p.Status)
	data["instance"] = c.cfg.Instance
	if reason != "" {
		data["reason"] = reason
	}
	if a != nil {
		name := a.Name
		if name == "" {
			name = "anonymous"
		}
		data["actor"], data["role"], data["requestId"], data["clientAddr"] = name, a.Role, a.RequestID, a.Addr
	}
	c.pub.publish(task.FeedEvent{Type: typ, At: c.now().UTC(), PlanID: p.ID, Data: data})
}

// EventOperatorRefused is the feed type of an operator action that was
// refused or failed (see RecordRefusal).
const EventOperatorRefused = "operator.refused"

// Refusal is an operator action the API did not carry out: who asked (an
// authenticated caller), what (method and route), on what, why, and how it
// ended.
type Refusal struct {
	Actor    Actor
	Action   string
	PlanID   string
	TenantID string
	Reason   string
	Status   int
	Code     string
}

// RecordRefusal publishes an operator.refused feed event: the audit trail of
// an operator action that was refused or failed. Actions carried out are
// recorded by the action itself (task timeline and feed); a refused one
// changed nothing, so only the feed (and the server's audit log) has it.
func (c *Coordinator) RecordRefusal(r Refusal) {
	data := map[string]any{"actor": actorName(r.Actor), "role": r.Actor.Role, "requestId": r.Actor.RequestID,
		"clientAddr": r.Actor.Addr, "action": r.Action, "status": r.Status, "instance": c.cfg.Instance}
	if r.Reason != "" {
		data["reason"] = r.Reason
	}
	if r.Code != "" {
		data["code"] = r.Code
	}
	c.pub.publish(task.FeedEvent{Type: EventOperatorRefused, At: c.now().UTC(), PlanID: r.PlanID, TenantID: r.TenantID, Data: data})
}

// planStatusChanged publishes plan.completed / plan.failed /
// plan.reopened / plan.paused after a task write whose counts move changed
// the plan's status by its derivation (task.WriteResult.PlanStatusChanged):
// the plan finished, a re-run reopened it, or a failure past maxFailed
// paused it. The store reports each such change to one write only, so the
// event is published once across the instances; a status an operator set
// (pause, resume, cancel) is published by the action itself.
func (c *Coordinator) planStatusChanged(planID string, res task.WriteResult) {
	if !res.PlanStatusChanged {
		return
	}
	s := plan.Status(res.PlanStatus)
	typ := map[plan.Status]string{plan.StatusCompleted: "plan.completed", plan.StatusFailed: "plan.failed",
		plan.StatusRunning: "plan.reopened", plan.StatusPaused: "plan.paused"}[s]
	if typ == "" {
		return
	}
	c.pub.publish(task.FeedEvent{Type: typ, At: c.now().UTC(), PlanID: planID, Data: map[string]any{"status": string(s), "instance": c.cfg.Instance}})
}

// EventCountsCorrected is the feed type of a plan's counts corrected after
// a refused task write (see writeTask).
const EventCountsCorrected = "plan.counts_corrected"

// writeTask is the store's WriteTask, and publishes the counts correction a
// refused write may carry (task.WriteResult.CountsCorrected): the store
// undid that write's counts move, which was never published, so a follower
// of the feed learns the counts changed (plan.counts_corrected, with the
// counts and the plan's status), and a plan the correction finished (or
// left paused, reopened) is announced as a task write's change is. Every
// task write of the coordinator goes through here.
func (c *Coordinator) writeTask(ctx context.Context, w task.Write) (task.WriteResult, error) {
	res, err := c.store.WriteTask(ctx, w)
	if err != nil && res.CountsCorrected && w.Task != nil {
		counts := make(map[string]any, len(res.Counts))
		for s, n := range res.Counts {
			counts[string(s)] = n
		}
		c.pub.publish(task.FeedEvent{Type: EventCountsCorrected, At: c.now().UTC(), PlanID: w.Task.PlanID,
			TaskID: w.Task.ID, TenantID: w.Task.TenantID,
			Data: map[string]any{"status": res.PlanStatus, "instance": c.cfg.Instance, "counts": counts}})
		c.planStatusChanged(w.Task.PlanID, res)
	}
	return res, err
}
