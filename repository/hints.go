package repository

import (
	"strings"
	"sync"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/task"
)

// TenantHintsDefault is the default of Config.TenantHints.
const TenantHintsDefault = 100_000

// tenantHints remembers, for the tenants recently queried, the id their
// index named: TaskByTenant then reads the index and that task's record and
// checkpoint in one pipeline, and is done in one round trip when the index
// still names it (it falls back to reading the task the index names, a
// second round trip, otherwise — a hint is never trusted, only checked).
// Only reads fill it; it holds at most max tenants, dropping arbitrary ones
// beyond, in shards so that concurrent queries rarely wait for each other.
type tenantHints struct {
	perShard int
	// perShardRecords bounds the entries of a shard that hold a record.
	perShardRecords int
	shards          [hintShards]hintShard
}

const hintShards = 32

// hintRecordShare: at most one remembered tenant in hintRecordShare keeps
// its task's record (Config.TenantHints / 4 records: 25 000 by default,
// some 20 MB for tasks with small params and checkpoints).
const hintRecordShare = 4

type hintShard struct {
	mu sync.Mutex
	m  map[string]hintEntry
	// records counts the entries of m holding a record.
	records int
}

// hintEntry is what is remembered for a tenant: the task id its index
// named and, for a task that was not RUNNING when read, the record and
// checkpoint read with the version they were read at (see readcache.go).
type hintEntry struct {
	id string
	// ver is nil unless t and c are kept.
	ver *taskVersion
	t   *task.Task
	c   *checkpoint.Checkpoint
}

func newTenantHints(n int) *tenantHints {
	per := max(1, n/hintShards)
	return &tenantHints{perShard: per, perShardRecords: max(1, per/hintRecordShare)}
}

func (h *tenantHints) shard(tenant string) *hintShard {
	x := uint32(2166136261)
	for i := 0; i < len(tenant); i++ {
		x = (x ^ uint32(tenant[i])) * 16777619
	}
	return &h.shards[x%hintShards]
}

// get returns the task id remembered for tenant, "" if none.
func (h *tenantHints) get(tenant string) string {
	if h == nil {
		return ""
	}
	s := h.shard(tenant)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[tenant].id
}

// entry returns what is remembered for tenant (zero if nothing).
func (h *tenantHints) entry(tenant string) hintEntry {
	if h == nil {
		return hintEntry{}
	}
	s := h.shard(tenant)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[tenant]
}

// put remembers that tenant's index named taskID.
func (h *tenantHints) put(tenant, taskID string) {
	h.keep(tenant, hintEntry{id: taskID}, false)
}

// keep remembers e for tenant. Without replace, an entry naming the same
// task is left as it is (it may hold the record). A record is kept only
// while the shard holds fewer than perShardRecords of them (the id is kept
// regardless), which bounds the memory of the records.
func (h *tenantHints) keep(tenant string, e hintEntry, replace bool) {
	if h == nil {
		return
	}
	s := h.shard(tenant)
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.m[tenant]
	if ok && !replace && old.id == e.id {
		return
	}
	if old.ver != nil {
		s.records--
	}
	if e.ver != nil {
		if s.records >= h.perShardRecords {
			e = hintEntry{id: e.id}
		} else {
			s.records++
		}
	}
	if ok {
		s.m[tenant] = e
		return
	}
	if s.m == nil {
		s.m = make(map[string]hintEntry)
	}
	for k, v := range s.m {
		if len(s.m) < h.perShard {
			break
		}
		if v.ver != nil {
			s.records--
		}
		delete(s.m, k)
	}
	// The tenant id may be a slice of a larger string (a request's path).
	s.m[strings.Clone(tenant)] = e
}

// forget drops what is remembered for tenant.
func (h *tenantHints) forget(tenant string) {
	if h == nil {
		return
	}
	s := h.shard(tenant)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[tenant].ver != nil {
		s.records--
	}
	delete(s.m, tenant)
}
