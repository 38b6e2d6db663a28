package repository

import (
	"errors"
	"fmt"
	"regexp"

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
	p := k.plan(planID)
	return planKeys{plan: p, tasks: p + ":tasks", counts: p + ":counts"}, nil
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
	t := k.task(tenantID, taskID)
	idx := k.index(tenantID)
	return taskKeys{
		id:   taskID,
		task: t, timeline: t + ":timeline",
		ckpt:    k.prefix + "ckpt:{" + tenantID + "}:" + taskID,
		lock:    k.prefix + "lock:tenant:{" + tenantID + "}",
		index:   idx,
		history: idx + ":history",
		ref:     k.prefix + "taskref:{" + taskID + "}",
	}, nil
}
