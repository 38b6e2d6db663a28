package facade

import (
	"context"
	"sort"
	"time"

	"github.com/deploycoord/deploycoord/task"
)

// background runs the instance's housekeeping until stop: it registers the
// instance with a heartbeat, refreshes the set of live instances (to tell
// orphaned tasks) and watches the Redis server's run id (a restart or
// failover makes every lease suspect for one lease).
func (c *Coordinator) background() {
	defer close(c.bgDone)
	beat := time.NewTicker(c.cfg.Heartbeat)
	defer beat.Stop()
	var watch <-chan time.Time
	if c.cfg.ServerRunID != nil {
		t := time.NewTicker(c.cfg.RestartPoll)
		defer t.Stop()
		watch = t.C
		c.checkRunID()
	}
	c.heartbeatInstance()
	for {
		select {
		case <-c.bgStop:
			return
		case <-beat.C:
			c.heartbeatInstance()
		case <-watch:
			c.checkRunID()
		}
	}
}

// heartbeatInstance records this instance's heartbeat and reads who else is alive.
func (c *Coordinator) heartbeatInstance() {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Heartbeat)
	defer cancel()
	if err := c.store.RegisterInstance(ctx, c.self(), c.cfg.Lease); err != nil {
		c.log.Debug().Err(err).Msg("instance heartbeat failed")
		return
	}
	insts, err := c.store.Instances(ctx)
	if err != nil {
		c.log.Debug().Err(err).Msg("list instances")
		return
	}
	live := make(map[string]time.Time, len(insts))
	for _, in := range insts {
		if !in.Gone { // a deregistered or expired instance is not alive
			live[in.ID] = in.LastSeen
		}
	}
	c.mu.Lock()
	c.live, c.liveAt = live, c.now()
	c.mu.Unlock()
}

// self describes this instance for the registry.
func (c *Coordinator) self() task.Instance {
	return task.Instance{ID: c.cfg.Instance, Addr: c.cfg.Addr, Version: c.cfg.Version, StartedAt: c.started,
		LastSeen: c.now().UTC(), TasksRunning: c.Running(), SingleInstance: c.cfg.SingleInstance}
}

// ownerAlive says whether instance id heartbeated within the lease, as far
// as this instance knows; known is false when it has no recent view.
func (c *Coordinator) ownerAlive(id string) (alive, known bool) {
	if id == c.cfg.Instance {
		return !c.closing.Load(), true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live == nil || c.now().Sub(c.liveAt) > c.cfg.Lease {
		return false, false
	}
	seen, ok := c.live[id]
	return ok && c.now().Sub(seen) <= c.cfg.Lease, true
}

// liveOwners returns the ids of the instances alive as far as this instance
// knows (nil when it has no recent view).
func (c *Coordinator) liveOwners() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live == nil || c.now().Sub(c.liveAt) > c.cfg.Lease {
		return nil
	}
	ids := []string{c.cfg.Instance}
	for id, seen := range c.live {
		if id != c.cfg.Instance && c.now().Sub(seen) <= c.cfg.Lease {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// checkRunID detects a Redis restart or failover: the server's run id
// changed. Every lease is then suspect — another instance may have taken a
// tenant whose lock the restart lost — so no stage starts for one lease.
func (c *Coordinator) checkRunID() {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RestartPoll)
	defer cancel()
	id, err := c.cfg.ServerRunID(ctx)
	if err != nil {
		return
	}
	c.ObserveRunID(id)
}

// ObserveRunID takes id as the Redis server's run id, seen now: a change
// from the one seen last is a restart or failover, and no stage starts for
// one lease, as when the periodic check (Config.ServerRunID) finds it. The
// server wiring calls it on every new Redis connection, before the
// connection carries a command: after a failover every connection is new,
// so the change is seen before the first write reaches the new server,
// where the once-a-second check alone leaves up to a second in which a
// stage can start. "" (a server that does not tell) is ignored.
func (c *Coordinator) ObserveRunID(id string) {
	if id == "" {
		return
	}
	c.mu.Lock()
	prev := c.runID
	c.runID = id
	c.mu.Unlock()
	if prev != "" && prev != id {
		until := c.now().Add(c.cfg.Lease)
		c.suspectUntil.Store(until.UnixNano())
		c.log.Warn().Str("previous_run_id", prev).Str("run_id", id).Time("suspect_until", until).
			Msg("redis restarted or failed over; leases are suspect, no stage starts for one lease")
	}
}

// waitSuspect blocks while leases are suspect after a Redis restart (or
// until the instance stops).
func (c *Coordinator) waitSuspect() {
	for {
		until := time.Unix(0, c.suspectUntil.Load())
		left := until.Sub(c.now())
		if left <= 0 || c.hardStop.Err() != nil {
			return
		}
		c.sleep(min(left, 100*time.Millisecond))
	}
}

// sleep waits d or until the hard stop; it returns false on the hard stop.
func (c *Coordinator) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.hardStop.Done():
		return false
	}
}

// InstanceView is a coordinator instance as listed by Instances.
type InstanceView struct {
	task.Instance
	Alive bool
	// Degraded: Redis was unreachable and the list came from memory, which
	// knows this instance only.
	Degraded bool
}

// Instances lists the coordinator instances seen recently, newest first,
// and whether each is alive (heartbeat within one lease).
func (c *Coordinator) Instances(ctx context.Context) ([]InstanceView, error) {
	ctx, cancel := c.queryCtx(ctx)
	defer cancel()
	insts, err := c.store.Instances(ctx)
	if err != nil {
		return nil, translate(err, "instances")
	}
	out := make([]InstanceView, 0, len(insts)+1)
	self := false
	for _, in := range insts {
		if in.ID == c.cfg.Instance && !c.closing.Load() {
			// This instance's own entry shows its live fields whatever the
			// registry's record holds: between two heartbeats of a slow
			// machine the record may have lapsed, leaving the index's
			// last-seen time only.
			me := c.self()
			me.LastSeen, me.StorageLayout = in.LastSeen, in.StorageLayout
			self = true
			out = append(out, InstanceView{Instance: me, Alive: true})
			continue
		}
		out = append(out, InstanceView{Instance: in, Alive: in.Alive(c.now(), c.cfg.Lease)})
	}
	if !self && !c.closing.Load() {
		// This instance is alive whether or not its first heartbeat has
		// reached the registry yet.
		out = append([]InstanceView{{Instance: c.self(), Alive: true}}, out...)
	}
	if c.degradedOf(ctx) {
		for i := range out {
			out[i].Degraded = true
		}
	}
	return out, nil
}
