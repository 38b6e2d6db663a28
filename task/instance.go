package task

import "time"

// Instance describes a coordinator instance that runs tasks, as registered
// in storage with a heartbeat. A task whose Owner is not a live instance
// (and whose own heartbeat is older than the lease) is orphaned.
type Instance struct {
	ID      string
	Addr    string
	Version string
	// StartedAt is when the instance started; LastSeen its last heartbeat.
	StartedAt time.Time
	LastSeen  time.Time
	// TasksRunning is how many task runs it had at its last heartbeat.
	TasksRunning int
	// SingleInstance is true when it runs in single-instance mode.
	SingleInstance bool
	// StorageLayout is the layout of the Redis keys its version writes
	// (stamped by the store at registration, repository.StorageLayout): 1
	// for versions before the field; 0 when unknown (Gone).
	StorageLayout int
	// Gone is true when its live record is gone: it deregistered at a clean
	// shutdown, or its record expired. Only its id and last heartbeat are
	// known then.
	Gone bool
}

// Alive reports whether the instance heartbeated within ttl before now and
// has not deregistered.
func (i Instance) Alive(now time.Time, ttl time.Duration) bool {
	return !i.Gone && !i.LastSeen.IsZero() && now.Sub(i.LastSeen) <= ttl
}
