package repository

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Field names of the task record (HASH {p}task:{tenantId}:<taskId>).
const (
	fID          = "id"
	fTenantID    = "tenantId"
	fPlanID      = "planId"
	fStatus      = "status"
	fParams      = "params"
	fPause       = "pauseRequested"
	fCancel      = "cancelRequested"
	fAttempt     = "attempt"
	fStageIndex  = "stageIndex"
	fStageName   = "stageName"
	fTotalStages = "totalStages"
	fLastError   = "lastError"
	fReason      = "reason"
	fOwner       = "owner"
	fHeartbeatAt = "heartbeatAt"
	fFence       = "fence"
	fSeq         = "seq"
	fWriteID     = "writeId"
	fCreatedAt   = "createdAt"
	fStartedAt   = "startedAt"
	fFinishedAt  = "finishedAt"
	fUpdatedAt   = "updatedAt"
)

// Field names of the plan record (HASH {p}plan:{planId}) beyond the shared ones.
const (
	fName           = "name"
	fPipeline       = "pipeline"
	fStages         = "stages"
	fMaxConcurrency = "maxConcurrency"
	fOnTenantLocked = "onTenantLocked"
	fLockWait       = "lockWait"
	fMaxFailed      = "maxFailed"
	fTotalTasks     = "totalTasks"
)

// ledgerPrefix starts the per-task ledger fields of the counts hash.
const ledgerPrefix = "t:"

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func formatBool(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func encodeParams(p map[string]any) (string, error) {
	if p == nil {
		return "", nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("encode params: %w", err)
	}
	return string(b), nil
}

// taskBody returns the field/value pairs of every task field a write sets:
// all but seq, fence, writeId and the requests, which the scripts own.
func taskBody(t *task.Task) ([]string, error) {
	params, err := encodeParams(t.Params)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", t.ID, err)
	}
	return []string{
		fID, t.ID, fTenantID, t.TenantID, fPlanID, t.PlanID, fStatus, string(t.Status),
		fParams, params,
		fAttempt, strconv.Itoa(t.Attempt),
		fStageIndex, strconv.Itoa(t.StageIndex), fStageName, t.StageName,
		fTotalStages, strconv.Itoa(t.TotalStages),
		fLastError, t.LastError, fReason, t.Reason, fOwner, t.Owner,
		fHeartbeatAt, formatTime(t.HeartbeatAt),
		fCreatedAt, formatTime(t.CreatedAt), fStartedAt, formatTime(t.StartedAt),
		fFinishedAt, formatTime(t.FinishedAt), fUpdatedAt, formatTime(t.UpdatedAt),
	}, nil
}

// taskRecord returns every field of a new task record (seq 0).
func taskRecord(t *task.Task) ([]string, error) {
	body, err := taskBody(t)
	if err != nil {
		return nil, err
	}
	return append(body,
		fPause, formatBool(t.PauseRequested), fCancel, formatBool(t.CancelRequested),
		fFence, strconv.FormatInt(t.Fence, 10), fSeq, "0", fWriteID, ""), nil
}

// fieldReader parses the fields of one stored record and remembers the
// first problem, naming the key.
type fieldReader struct {
	key string
	m   map[string]string
	err error
}

func (r *fieldReader) fail(field, value string, why error) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s field %s = %s: %v", ErrCorrupt, r.key, field, task.Quote(value), why)
	}
}

func (r *fieldReader) str(f string) string { return r.m[f] }

func (r *fieldReader) int64(f string) int64 {
	v := r.m[f]
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		r.fail(f, v, err)
	}
	return n
}

func (r *fieldReader) int(f string) int { return int(r.int64(f)) }

func (r *fieldReader) bool(f string) bool {
	switch v := r.m[f]; v {
	case "", "0":
		return false
	case "1":
		return true
	default:
		r.fail(f, v, fmt.Errorf("want 0 or 1"))
		return false
	}
}

func (r *fieldReader) time(f string) time.Time {
	v := r.m[f]
	if v == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		r.fail(f, v, err)
	}
	return t
}

func (r *fieldReader) duration(f string) time.Duration {
	v := r.m[f]
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		r.fail(f, v, err)
	}
	return d
}

func (r *fieldReader) json(f string, into any) {
	v := r.m[f]
	if v == "" {
		return
	}
	if err := json.Unmarshal([]byte(v), into); err != nil {
		r.fail(f, v, err)
	}
}

// decodeTask parses a task record; nil, nil when m is empty (no record).
func decodeTask(key string, m map[string]string) (*task.Task, error) {
	if len(m) == 0 {
		return nil, nil
	}
	r := &fieldReader{key: key, m: m}
	t := &task.Task{
		ID: r.str(fID), TenantID: r.str(fTenantID), PlanID: r.str(fPlanID),
		Status:         task.Status(r.str(fStatus)),
		PauseRequested: r.bool(fPause), CancelRequested: r.bool(fCancel),
		Attempt: r.int(fAttempt), StageIndex: r.int(fStageIndex), StageName: r.str(fStageName),
		TotalStages: r.int(fTotalStages), LastError: r.str(fLastError), Reason: r.str(fReason),
		Owner: r.str(fOwner), HeartbeatAt: r.time(fHeartbeatAt),
		Fence: r.int64(fFence), Seq: r.int64(fSeq),
		CreatedAt: r.time(fCreatedAt), StartedAt: r.time(fStartedAt),
		FinishedAt: r.time(fFinishedAt), UpdatedAt: r.time(fUpdatedAt),
	}
	r.json(fParams, &t.Params)
	if !t.Status.Valid() {
		r.fail(fStatus, string(t.Status), fmt.Errorf("not a task status"))
	}
	if !task.ValidID(t.ID) {
		r.fail(fID, t.ID, fmt.Errorf("not a task id"))
	}
	if r.err != nil {
		return nil, r.err
	}
	return t, nil
}

// planRecord returns every field of a plan record.
func planRecord(p *plan.Plan) ([]string, error) {
	stages, err := json.Marshal(p.Stages)
	if err != nil {
		return nil, fmt.Errorf("plan %s: encode stages: %w", p.ID, err)
	}
	params, err := encodeParams(p.Params)
	if err != nil {
		return nil, fmt.Errorf("plan %s: %w", p.ID, err)
	}
	return []string{
		fID, p.ID, fName, p.Name, fStatus, string(p.Status), fReason, p.Reason,
		fPipeline, p.Pipeline, fStages, string(stages), fParams, params,
		fMaxConcurrency, strconv.Itoa(p.MaxConcurrency), fOnTenantLocked, string(p.OnTenantLocked),
		fLockWait, p.LockWait.String(), fMaxFailed, strconv.Itoa(p.MaxFailed),
		fOwner, p.Owner, fTotalTasks, strconv.Itoa(p.TotalTasks),
		fCreatedAt, formatTime(p.CreatedAt), fStartedAt, formatTime(p.StartedAt),
		fFinishedAt, formatTime(p.FinishedAt), fUpdatedAt, formatTime(p.UpdatedAt),
	}, nil
}

// planState returns the fields UpdatePlan writes.
func planState(p *plan.Plan) []string {
	return []string{
		fStatus, string(p.Status), fReason, p.Reason, fOwner, p.Owner,
		fStartedAt, formatTime(p.StartedAt), fFinishedAt, formatTime(p.FinishedAt),
		fUpdatedAt, formatTime(p.UpdatedAt),
	}
}

// decodePlan parses a plan record; nil, nil when m is empty (no record).
func decodePlan(key string, m map[string]string) (*plan.Plan, error) {
	if len(m) == 0 {
		return nil, nil
	}
	r := &fieldReader{key: key, m: m}
	p := &plan.Plan{
		ID: r.str(fID), Name: r.str(fName), Status: plan.Status(r.str(fStatus)), Reason: r.str(fReason),
		Pipeline: r.str(fPipeline), MaxConcurrency: r.int(fMaxConcurrency),
		OnTenantLocked: plan.LockPolicy(r.str(fOnTenantLocked)), LockWait: r.duration(fLockWait),
		MaxFailed: r.int(fMaxFailed), Owner: r.str(fOwner), TotalTasks: r.int(fTotalTasks),
		CreatedAt: r.time(fCreatedAt), StartedAt: r.time(fStartedAt),
		FinishedAt: r.time(fFinishedAt), UpdatedAt: r.time(fUpdatedAt),
	}
	r.json(fStages, &p.Stages)
	r.json(fParams, &p.Params)
	if !p.Status.Valid() {
		r.fail(fStatus, string(p.Status), fmt.Errorf("not a plan status"))
	}
	if !plan.ValidID(p.ID) {
		r.fail(fID, p.ID, fmt.Errorf("not a plan id"))
	}
	if r.err != nil {
		return nil, r.err
	}
	return p, nil
}

// ledger is one per-task entry of a plan's counts hash:
// "status|seq|fence|writeId|owner|tenant". Status "" counts the task nowhere
// (its record is missing).
type ledger struct {
	Status   task.Status
	Seq      int64
	Fence    int64
	WriteID  string
	Owner    string
	TenantID string
}

func (l ledger) String() string {
	return string(l.Status) + "|" + strconv.FormatInt(l.Seq, 10) + "|" + strconv.FormatInt(l.Fence, 10) +
		"|" + l.WriteID + "|" + l.Owner + "|" + l.TenantID
}

func parseLedger(s string) (ledger, bool) {
	parts := strings.Split(s, "|")
	if len(parts) != 6 {
		return ledger{}, false
	}
	seq, err1 := strconv.ParseInt(parts[1], 10, 64)
	fence, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return ledger{}, false
	}
	return ledger{Status: task.Status(parts[0]), Seq: seq, Fence: fence, WriteID: parts[3], Owner: parts[4], TenantID: parts[5]}, true
}

// newCounts returns counts with every task status present.
func newCounts() plan.Counts {
	c := make(plan.Counts, len(task.Statuses))
	for _, s := range task.Statuses {
		c[s] = 0
	}
	return c
}

func statusNames() []string {
	out := make([]string, len(task.Statuses))
	for i, s := range task.Statuses {
		out[i] = string(s)
	}
	return out
}
