package repository

import (
	"cmp"
	"fmt"
	"time"

	"github.com/deploycoord/deploycoord/task"
)

// Defaults of Config.
const (
	// TTLDefault is how long records live after their last write.
	TTLDefault = 7 * 24 * time.Hour
	// BatchDefault is how many tasks one plan-creation pipeline carries.
	BatchDefault = 500
	// ScanMax is the most list entries one filtered listing call examines
	// (PlanTasks with a status filter, Plans with a status filter).
	ScanMax = 10_000
	// EventsMaxDefault is how many events the event feed keeps.
	EventsMaxDefault = 100_000
	// InstancePruneAfter is how long an instance stays listed after its
	// last heartbeat.
	InstancePruneAfter = 24 * time.Hour
	// LockLeaseDefault is the tenant lock's lease when Config.LockLease is
	// zero: DEPLOYCOORD_LOCK_LEASE's default.
	LockLeaseDefault = 60 * time.Second
)

// Config configures the Redis store. Zero fields mean the default.
type Config struct {
	// Prefix starts every key (default PrefixDefault, "executor:"); it must
	// match ^[A-Za-z0-9._:-]{0,64}$.
	Prefix string
	// TTL is the lifetime of every key except the plans index, the fencing
	// counters and the locks (default TTLDefault, 7 days). Writes refresh it
	// once a key has lost more than min(TTL/100, 30s) of it (see doc.go).
	TTL time.Duration
	// TimelineMax is how many entries a task's timeline keeps (default
	// task.MaxTimeline).
	TimelineMax int
	// Batch is how many tasks one plan-creation pipeline carries (default
	// BatchDefault).
	Batch int
	// EventsMax is how many events the event feed keeps (default
	// EventsMaxDefault): every publication trims whole entries (batches of
	// up to 100 events) whose events are all older than the newest
	// EventsMax, so Redis keeps at least EventsMax events and at most 99
	// more.
	EventsMax int
	// Clock gives the time written by the store itself (plan status times,
	// pruning of the plans and instances indexes, feed events without a
	// time); default time.Now.
	Clock func() time.Time
	// NoWriteBatching sends every WriteTask in a pipeline of its own from
	// the calling goroutine. By default, writes made while another is in
	// flight share the next pipeline (group commit, see groupcommit.go).
	NoWriteBatching bool
	// NoReadBatching sends the reads of every TaskByTenant and Task in
	// pipelines of their own. By default, the reads of concurrent queries
	// share pipelines (see groupcommit.go).
	NoReadBatching bool
	// FullWrites sends every mutable record field on every task write. By
	// default a write of a RUNNING task sends only the fields that changed
	// since its last write this store saw acknowledged (see delta.go), and
	// a task's first write (seq 0) leaves out the fields still at their zero.
	FullWrites bool
	// WriteBatchMax is the most task writes one shared pipeline carries
	// (default WriteBatchMaxDefault).
	WriteBatchMax int
	// TenantHints is how many tenants' current task ids TaskByTenant and
	// TasksByTenant remember, to read the record in the same round trip as
	// the index (default TenantHintsDefault, about 100 bytes each, filled by
	// queries only; negative: none, every query takes two round trips). One
	// in four of them (25 000 by default) also keeps the record and
	// checkpoint of a task that is not RUNNING, checked against the task's
	// version at every query (see readcache.go).
	TenantHints int
	// LockLease is the tenant lock's lease (DEPLOYCOORD_LOCK_LEASE; default
	// LockLeaseDefault). A run's last write deletes the lock with GETDEL
	// before it compares the value, and puts a lock held by another value
	// back with this TTL — which that holder's renewals give it anyway.
	LockLease time.Duration
	// LegacyKeys says when plan creations also write the keys instances of
	// storage layout 1 read, for rolling upgrades (see legacy.go; default
	// LegacyKeysOff, "" too; cmd/deploycoord's default is LegacyKeysAuto).
	LegacyKeys LegacyKeys
	// OnLegacyBackfill, when set, is told of every backfill of those keys
	// the store runs by itself (when they are turned on: see legacy.go),
	// from the goroutine that ran it.
	OnLegacyBackfill func(LegacyBackfill, error)
}

func (c Config) withDefaults() (Config, error) {
	c.Prefix = cmp.Or(c.Prefix, PrefixDefault)
	c.TTL = cmp.Or(c.TTL, TTLDefault)
	c.TimelineMax = cmp.Or(c.TimelineMax, task.MaxTimeline)
	c.Batch = cmp.Or(c.Batch, BatchDefault)
	c.EventsMax = cmp.Or(c.EventsMax, EventsMaxDefault)
	c.WriteBatchMax = cmp.Or(c.WriteBatchMax, WriteBatchMaxDefault)
	c.TenantHints = cmp.Or(c.TenantHints, TenantHintsDefault)
	c.LockLease = cmp.Or(c.LockLease, LockLeaseDefault)
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.LegacyKeys == "" {
		c.LegacyKeys = LegacyKeysOff
	} else if _, err := ParseLegacyKeys(string(c.LegacyKeys)); err != nil {
		return c, err
	}
	switch {
	case c.TTL < time.Millisecond:
		return c, fmt.Errorf("%w: TTL %s must be at least 1ms", ErrConfig, c.TTL)
	case c.TimelineMax < 1:
		return c, fmt.Errorf("%w: TimelineMax %d must be positive", ErrConfig, c.TimelineMax)
	case c.Batch < 1:
		return c, fmt.Errorf("%w: Batch %d must be positive", ErrConfig, c.Batch)
	case c.EventsMax < 1:
		return c, fmt.Errorf("%w: EventsMax %d must be positive", ErrConfig, c.EventsMax)
	case c.LockLease < time.Millisecond:
		return c, fmt.Errorf("%w: LockLease %s must be at least 1ms", ErrConfig, c.LockLease)
	case c.WriteBatchMax < 1:
		return c, fmt.Errorf("%w: WriteBatchMax %d must be positive", ErrConfig, c.WriteBatchMax)
	}
	return c, nil
}
