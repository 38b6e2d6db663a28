package repository

import (
	"errors"
	"fmt"
	"regexp"
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

// Plan returns {p}plan:{planId}, the plan record (HASH).
func (k Keys) Plan(planID string) (string, error) {
	if err := checkPlanID(planID); err != nil {
		return "", err
	}
	return k.plan(planID), nil
}

// PlanTasks returns {p}plan:{planId}:tasks, the plan's task ids in plan order (LIST).
func (k Keys) PlanTasks(planID string) (string, error) {
	if err := checkPlanID(planID); err != nil {
		return "", err
	}
	return k.plan(planID) + ":tasks", nil
}

// PlanCounts returns {p}plan:{planId}:counts, the plan's counts per task
// status, running tasks per owner and the per-task ledger (HASH).
func (k Keys) PlanCounts(planID string) (string, error) {
	if err := checkPlanID(planID); err != nil {
		return "", err
	}
	return k.plan(planID) + ":counts", nil
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
	return k.task(tenantID, taskID), nil
}

// Timeline returns {p}task:{tenantId}:<taskId>:timeline, the task's bounded
// timeline of JSON task.Event entries (LIST).
func (k Keys) Timeline(tenantID, taskID string) (string, error) {
	if err := checkTenantTask(tenantID, taskID); err != nil {
		return "", err
	}
	return k.task(tenantID, taskID) + ":timeline", nil
}

// Checkpoint returns {p}ckpt:{tenantId}:<taskId>, the task's checkpoint JSON (STRING).
func (k Keys) Checkpoint(tenantID, taskID string) (string, error) {
	if err := checkTenantTask(tenantID, taskID); err != nil {
		return "", err
	}
	return k.prefix + "ckpt:{" + tenantID + "}:" + taskID, nil
}

// TaskRef returns {p}taskref:{taskId}, the tenant id of a task (STRING), to
// find a task by id alone.
func (k Keys) TaskRef(taskID string) (string, error) {
	if err := checkTaskID(taskID); err != nil {
		return "", err
	}
	return k.prefix + "taskref:{" + taskID + "}", nil
}

// Index returns {p}index:tenant:{tenantId}, the id of the newest task created
// for the tenant (STRING).
func (k Keys) Index(tenantID string) (string, error) {
	if err := task.CheckTenantID(tenantID); err != nil {
		return "", err
	}
	return k.index(tenantID), nil
}

// History returns {p}index:tenant:{tenantId}:history, the tenant's task ids
// scored by creation time in Unix milliseconds (ZSET).
func (k Keys) History(tenantID string) (string, error) {
	if err := task.CheckTenantID(tenantID); err != nil {
		return "", err
	}
	return k.index(tenantID) + ":history", nil
}

// Lock returns {p}lock:tenant:{tenantId}, the tenant lock (STRING, written by
// package tenantlock, with the lease as TTL).
func (k Keys) Lock(tenantID string) (string, error) {
	if err := task.CheckTenantID(tenantID); err != nil {
		return "", err
	}
	return k.prefix + "lock:tenant:{" + tenantID + "}", nil
}

// Fence returns {p}fence:tenant:{tenantId}, the tenant's fencing counter
// (STRING, INCR by package tenantlock, no TTL).
func (k Keys) Fence(tenantID string) (string, error) {
	if err := task.CheckTenantID(tenantID); err != nil {
		return "", err
	}
	return k.prefix + "fence:tenant:{" + tenantID + "}", nil
}

// Events returns {p}events, the bounded event feed (STREAM, trimmed to about
// Config.EventsMax entries).
func (k Keys) Events() string { return k.prefix + "events" }

// Instances returns {p}instances, every coordinator instance id scored by its
// last heartbeat in Unix milliseconds (ZSET, no TTL; entries not seen for
// InstancePruneAfter are pruned when an instance registers).
func (k Keys) Instances() string { return k.prefix + "instances" }

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

func (k Keys) plan(planID string) string { return k.prefix + "plan:{" + planID + "}" }

func (k Keys) task(tenantID, taskID string) string {
	return k.prefix + "task:{" + tenantID + "}:" + taskID
}

func (k Keys) index(tenantID string) string { return k.prefix + "index:tenant:{" + tenantID + "}" }

// planKeys are the keys of one plan, all in the plan's slot.
type planKeys struct {
	plan, tasks, counts string
}

func (k Keys) planKeys(planID string) (planKeys, error) {
	if err := checkPlanID(planID); err != nil {
		return planKeys{}, err
	}
	// One allocation: "<plan>:tasks<plan>:counts", the keys are slices of it.
	n := len(k.prefix) + len("plan:{}") + len(planID)
	b := make([]byte, 0, 2*n+len(":tasks:counts"))
	for _, suffix := range []string{":tasks", ":counts"} {
		b = append(append(append(append(b, k.prefix...), "plan:{"...), planID...), '}')
		b = append(b, suffix...)
	}
	s := unsafe.String(unsafe.SliceData(b), len(b))
	tasksEnd := n + len(":tasks")
	return planKeys{plan: s[:n], tasks: s[:tasksEnd], counts: s[tasksEnd:]}, nil
}

// taskKeys are the keys of one task in its tenant's slot, and its taskref.
type taskKeys struct {
	id                                         string
	task, timeline, ckpt, lock, index, history string
	ref                                        string
}

func (k Keys) taskKeys(tenantID, taskID string) (taskKeys, error) {
	if err := checkTenantTask(tenantID, taskID); err != nil {
		return taskKeys{}, err
	}
	// One allocation holds every key; each is a slice of it:
	// <task>:timeline <ckpt> <lock> <index>:history <ref>.
	p := k.prefix
	b := make([]byte, 0, 5*len(p)+4*len(tenantID)+3*len(taskID)+
		len("task:{}::timeline")+len("ckpt:{}:")+len("lock:tenant:{}")+len("index:tenant:{}:history")+len("taskref:{}"))
	var tk taskKeys
	var cuts [6]int
	b = append(append(append(append(append(b, p...), "task:{"...), tenantID...), "}:"...), taskID...)
	cuts[0] = len(b)
	b = append(b, ":timeline"...)
	cuts[1] = len(b)
	b = append(append(append(append(append(b, p...), "ckpt:{"...), tenantID...), "}:"...), taskID...)
	cuts[2] = len(b)
	b = append(append(append(append(b, p...), "lock:tenant:{"...), tenantID...), '}')
	cuts[3] = len(b)
	b = append(append(append(append(b, p...), "index:tenant:{"...), tenantID...), '}')
	cuts[4] = len(b)
	b = append(b, ":history"...)
	cuts[5] = len(b)
	b = append(append(append(append(b, p...), "taskref:{"...), taskID...), '}')
	s := unsafe.String(unsafe.SliceData(b), len(b))
	tk.id = taskID
	tk.task, tk.timeline = s[:cuts[0]], s[:cuts[1]]
	tk.ckpt = s[cuts[1]:cuts[2]]
	tk.lock = s[cuts[2]:cuts[3]]
	tk.index, tk.history = s[cuts[3]:cuts[4]], s[cuts[3]:cuts[5]]
	tk.ref = s[cuts[5]:]
	return tk, nil
}
