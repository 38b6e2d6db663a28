package repository

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unsafe"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// PrefixDefault is the key prefix used when Config.Prefix is empty.
const PrefixDefault = "executor:"

// ErrConfig is wrapped by every error about an invalid store configuration.
var ErrConfig = errors.New("repository: invalid config")

var prefixRe = regexp.MustCompile(`^[A-Za-z0-9._:-]{0,64}$`)

// Keys builds every Redis key of deploycoord under one prefix. It is the only
// place that knows the key layout (see doc.go). The braces in the keys are
// literal Redis Cluster hash tags: everything about a tenant shares the
// tenant's slot, everything about a plan the plan's slot.
//
// Every id is checked against its allowlist before it reaches a key: a bad
// id is an error wrapping task.ErrInvalid or plan.ErrInvalid.
type Keys struct {
	prefix string
}

// NewKeys returns the key builder for prefix, which must match
// ^[A-Za-z0-9._:-]{0,64}$ (no braces, glob characters or spaces).
func NewKeys(prefix string) (Keys, error) {
	if !prefixRe.MatchString(prefix) {
		return Keys{}, fmt.Errorf("%w: key prefix %s must match %s", ErrConfig, task.Quote(prefix), prefixRe)
	}
	return Keys{prefix: prefix}, nil
}

// Prefix returns the prefix every key starts with.
func (k Keys) Prefix() string { return k.prefix }

func checkPlanID(id string) error {
	if !plan.ValidID(id) {
		return fmt.Errorf("%w: plan id %s is not an id made by plan.NewID", plan.ErrInvalid, task.Quote(id))
	}
	return nil
}

func checkTaskID(id string) error {
	if !task.ValidID(id) {
		return fmt.Errorf("%w: task id %s is not an id made by task.NewID", task.ErrInvalid, task.Quote(id))
	}
	return nil
}

func checkTenantTask(tenantID, taskID string) error {
	if err := task.CheckTenantID(tenantID); err != nil {
		return err
	}
	return checkTaskID(taskID)
}

// The layout, one builder per kind of key: every key is built by these
// appenders, the single keys below and the grouped keys of a plan or task
// (planKeys, taskKeys) alike. They do not check the ids.

func (k Keys) appendPlan(b []byte, planID string) []byte {
	return append(append(append(append(b, k.prefix...), "plan:{"...), planID...), '}')
}

func (k Keys) appendTask(b []byte, tenantID, taskID string) []byte {
	return append(append(append(append(append(b, k.prefix...), "task:{"...), tenantID...), "}:"...), taskID...)
}

func (k Keys) appendCheckpoint(b []byte, tenantID, taskID string) []byte {
	return append(append(append(append(append(b, k.prefix...), "ckpt:{"...), tenantID...), "}:"...), taskID...)
}

// appendTaskRef appends the taskref bucket of a task id (made by
// task.NewID): {p}taskrefs:{<hour>.<shard>}, the hour (Unix ms / 3 600 000)
// its ULID was made in and one of 16 shards by its last digit (random), so
// that a bucket stays small enough to expire at once without a stall and
// a big plan's buckets spread over a cluster's masters.
func (k Keys) appendTaskRef(b []byte, taskID string) []byte {
	ulid := taskID[len(taskIDPrefix):]
	b = append(append(b, k.prefix...), "taskrefs:{"...)
	b = strconv.AppendInt(b, task.ULIDMillis(ulid)/3_600_000, 10)
	const hex = "0123456789abcdef"
	last := strings.IndexByte(crockford, ulid[len(ulid)-1]) & 15
	return append(b, '.', hex[last], '}')
}

// appendTaskRefString appends the taskref STRING {p}taskref:{taskId} that
// versions before the buckets wrote (read as a fallback until they expire).
func (k Keys) appendTaskRefString(b []byte, taskID string) []byte {
	return append(append(append(append(b, k.prefix...), "taskref:{"...), taskID...), '}')
}

const (
	taskIDPrefix = "task-"
	crockford    = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
)

func (k Keys) appendTenant(b []byte, kind, tenantID string) []byte {
	return append(append(append(append(append(b, k.prefix...), kind...), ":tenant:{"...), tenantID...), '}')
}

const (
	suffixTasks    = ":tasks"
	suffixCounts   = ":counts"
	suffixTimeline = ":timeline"
	suffixHistory  = ":history"
)

// plan and history are the unchecked single keys, for ids read from Redis.
func (k Keys) plan(planID string) string { return string(k.appendPlan(nil, planID)) }
func (k Keys) history(tenantID string) string {
	return string(append(k.appendTenant(nil, "index", tenantID), suffixHistory...))
}

// Plan returns {p}plan:{planId}, the plan record (HASH).
func (k Keys) Plan(planID string) (string, error) {
	pk, err := k.planKeys(planID)
	return pk.plan, err
}

// PlanTasks returns {p}plan:{planId}:tasks, the plan's task ids in plan order (LIST).
func (k Keys) PlanTasks(planID string) (string, error) {
	pk, err := k.planKeys(planID)
	return pk.tasks, err
}

// PlanCounts returns {p}plan:{planId}:counts, the plan's counts per task
// status, running tasks per owner and the per-task ledger (HASH).
func (k Keys) PlanCounts(planID string) (string, error) {
	pk, err := k.planKeys(planID)
	return pk.counts, err
}

// Plans returns {p}plans, every plan id scored by creation time in Unix
// milliseconds (ZSET, no TTL; entries older than the TTL are pruned when a
// plan is created).
func (k Keys) Plans() string { return k.prefix + "plans" }

// Task returns {p}task:{tenantId}:<taskId>, the task record (HASH).
func (k Keys) Task(tenantID, taskID string) (string, error) {
	if err := checkTenantTask(tenantID, taskID); err != nil {
		return "", err
	}
	return string(k.appendTask(nil, tenantID, taskID)), nil
}

// Timeline returns {p}task:{tenantId}:<taskId>:timeline, the task's bounded
// timeline of JSON task.Event entries (LIST).
func (k Keys) Timeline(tenantID, taskID string) (string, error) {
	if err := checkTenantTask(tenantID, taskID); err != nil {
		return "", err
	}
	return string(append(k.appendTask(nil, tenantID, taskID), suffixTimeline...)), nil
}

// Checkpoint returns {p}ckpt:{tenantId}:<taskId>, the task's checkpoint JSON (STRING).
func (k Keys) Checkpoint(tenantID, taskID string) (string, error) {
	if err := checkTenantTask(tenantID, taskID); err != nil {
		return "", err
	}
	return string(k.appendCheckpoint(nil, tenantID, taskID)), nil
}

// TaskRef returns {p}taskrefs:{<hour>.<shard>}, the bucket (HASH, task id ->
// tenant id) that holds a task's tenant, to find a task by id alone: the
// hour the task id was made in and one of 16 shards by its last digit.
func (k Keys) TaskRef(taskID string) (string, error) {
	if err := checkTaskID(taskID); err != nil {
		return "", err
	}
	return string(k.appendTaskRef(nil, taskID)), nil
}

// TaskRefString returns {p}taskref:{taskId}, where versions before the
// buckets kept a task's tenant (STRING); read when the bucket has no entry,
// until those keys expire.
func (k Keys) TaskRefString(taskID string) (string, error) {
	if err := checkTaskID(taskID); err != nil {
		return "", err
	}
	return string(k.appendTaskRefString(nil, taskID)), nil
}

// History returns {p}index:tenant:{tenantId}:history, the tenant's task ids
// scored by creation time in Unix milliseconds (ZSET). It is the tenant's
// index too: its newest entry (highest score; among ties the greatest id,
// the one made last) is the tenant's current task.
func (k Keys) History(tenantID string) (string, error) {
	if err := task.CheckTenantID(tenantID); err != nil {
		return "", err
	}
	return k.history(tenantID), nil
}

// Lock returns {p}lock:tenant:{tenantId}, the tenant lock (STRING, written by
// package tenantlock, with the lease as TTL).
func (k Keys) Lock(tenantID string) (string, error) {
	if err := task.CheckTenantID(tenantID); err != nil {
		return "", err
	}
	return string(k.appendTenant(nil, "lock", tenantID)), nil
}

// Fence returns {p}fence:tenant:{tenantId}, the tenant's fencing counter
// (STRING, INCR by package tenantlock, no TTL).
func (k Keys) Fence(tenantID string) (string, error) {
	if err := task.CheckTenantID(tenantID); err != nil {
		return "", err
	}
	return string(k.appendTenant(nil, "fence", tenantID)), nil
}

// scopeRe is the alphabet of an idempotency scope (an API token name).
var scopeRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Idempotency returns {p}idem:<scope>:{<hex sha256(key)>}, where the first
// answer to requests sent with an idempotency key is kept (STRING). The
// scope (the client's token name) must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$;
// the key, chosen by the client, reaches Redis only as its SHA-256, so any
// byte string of 1..IdempotencyKeyMax bytes is safe. The hash tag is the
// key's hash, not the scope: no script touches two of these keys, and one
// busy client's keys spread over the cluster's slots.
func (k Keys) Idempotency(scope, key string) (string, error) {
	if !scopeRe.MatchString(scope) {
		return "", fmt.Errorf("%w: scope %s must match %s", ErrIdempotencyInvalid, task.Quote(scope), scopeRe)
	}
	if key == "" || len(key) > IdempotencyKeyMax {
		return "", fmt.Errorf("%w: key of %d bytes, want 1..%d", ErrIdempotencyInvalid, len(key), IdempotencyKeyMax)
	}
	sum := sha256.Sum256([]byte(key))
	return k.prefix + "idem:" + scope + ":{" + hex.EncodeToString(sum[:]) + "}", nil
}

// Events returns {p}events, the bounded event feed (STREAM, an entry per batch
// of events, trimmed to the newest Config.EventsMax events).
func (k Keys) Events() string { return k.prefix + "events" }

// Instances returns {p}instances, every coordinator instance id scored by its
// last heartbeat in Unix milliseconds (ZSET, no TTL; entries not seen for
// InstancePruneAfter are pruned when an instance registers).
func (k Keys) Instances() string { return k.prefix + "instances" }

// LegacyBackfill returns {p}legacy:backfill, the marker (STRING, the start
// time, with a TTL) of the last backfill of the storage-layout-1 keys: an
// instance that finds it does not start another (legacy.go).
func (k Keys) LegacyBackfill() string { return k.prefix + "legacy:backfill" }

// Instance returns {p}instance:{<id>}, a live instance's record (HASH, with
// the registration's TTL).
func (k Keys) Instance(id string) (string, error) {
	if err := checkInstanceID(id); err != nil {
		return "", err
	}
	return k.prefix + "instance:{" + id + "}", nil
}

func checkInstanceID(id string) error {
	if !task.ValidInstanceID(id) {
		return fmt.Errorf("%w: instance id %s must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", task.ErrInvalid, task.Quote(id))
	}
	return nil
}

// planKeys are the keys of one plan, all in the plan's slot.
type planKeys struct {
	plan, tasks, counts string
}

func (k Keys) planKeys(planID string) (planKeys, error) {
	if err := checkPlanID(planID); err != nil {
		return planKeys{}, err
	}
	// One allocation: "<plan>:tasks<plan>:counts", the keys are slices of it.
	b := make([]byte, 0, 2*(len(k.prefix)+len("plan:{}")+len(planID))+len(suffixTasks+suffixCounts))
	b = append(k.appendPlan(b, planID), suffixTasks...)
	n := len(b) - len(suffixTasks)
	b = append(k.appendPlan(b, planID), suffixCounts...)
	s := unsafe.String(unsafe.SliceData(b), len(b))
	tasksEnd := n + len(suffixTasks)
	return planKeys{plan: s[:n], tasks: s[:tasksEnd], counts: s[tasksEnd:]}, nil
}

// taskKeys are the keys of one task in its tenant's slot, and its taskref
// bucket.
type taskKeys struct {
	id                                         string
	task, timeline, ckpt, lock, fence, history string
	ref                                        string
}

func (k Keys) taskKeys(tenantID, taskID string) (taskKeys, error) {
	if err := checkTenantTask(tenantID, taskID); err != nil {
		return taskKeys{}, err
	}
	// One allocation holds every key; each is a slice of it:
	// <task>:timeline <ckpt> <lock> <fence> <history> <ref>.
	p := k.prefix
	b := make([]byte, 0, 6*len(p)+5*len(tenantID)+2*len(taskID)+
		len("task:{}:"+suffixTimeline)+len("ckpt:{}:")+len("lock:tenant:{}")+len("fence:tenant:{}")+
		len("index:tenant:{}"+suffixHistory)+len("taskrefs:{00000000.0}"))
	var tk taskKeys
	var cuts [6]int
	b = k.appendTask(b, tenantID, taskID)
	cuts[0] = len(b)
	b = append(b, suffixTimeline...)
	cuts[1] = len(b)
	b = k.appendCheckpoint(b, tenantID, taskID)
	cuts[2] = len(b)
	b = k.appendTenant(b, "lock", tenantID)
	cuts[3] = len(b)
	b = k.appendTenant(b, "fence", tenantID)
	cuts[4] = len(b)
	b = append(k.appendTenant(b, "index", tenantID), suffixHistory...)
	cuts[5] = len(b)
	b = k.appendTaskRef(b, taskID)
	s := unsafe.String(unsafe.SliceData(b), len(b))
	tk.id = taskID
	tk.task, tk.timeline = s[:cuts[0]], s[:cuts[1]]
	tk.ckpt = s[cuts[1]:cuts[2]]
	tk.lock = s[cuts[2]:cuts[3]]
	tk.fence = s[cuts[3]:cuts[4]]
	tk.history = s[cuts[4]:cuts[5]]
	tk.ref = s[cuts[5]:]
	return tk, nil
}
