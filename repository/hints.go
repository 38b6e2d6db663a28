package repository

import (
	"strings"
	"sync"
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
	shards   [hintShards]hintShard
}

const hintShards = 32

type hintShard struct {
	mu sync.Mutex
	m  map[string]string
}

func newTenantHints(n int) *tenantHints {
	return &tenantHints{perShard: max(1, n/hintShards)}
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
	return s.m[tenant]
}

// put remembers that tenant's index named taskID.
func (h *tenantHints) put(tenant, taskID string) {
	if h == nil {
		return
	}
	s := h.shard(tenant)
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.m[tenant]; ok {
		if old != taskID {
			s.m[tenant] = taskID
		}
		return
	}
	if s.m == nil {
		s.m = make(map[string]string)
	}
	for k := range s.m {
		if len(s.m) < h.perShard {
			break
		}
		delete(s.m, k)
	}
	// The tenant id may be a slice of a larger string (a request's path).
	s.m[strings.Clone(tenant)] = taskID
}

// forget drops what is remembered for tenant.
func (h *tenantHints) forget(tenant string) {
	if h == nil {
		return
	}
	s := h.shard(tenant)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, tenant)
}
