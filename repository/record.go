package repository

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/deploycoord/deploycoord/internal/jsonenc"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Field names of the task record (HASH {p}task:{tenantId}:<taskId>).
const (
	fID         = "id"
	fTenantID   = "tenantId"
	fPlanID     = "planId"
	fStatus     = "status"
	fParams     = "params"
	fPause      = "pauseRequested"
	fCancel     = "cancelRequested"
	fAttempt    = "attempt"
	fStageIndex = "stageIndex"
	fStageName  = "stageName"
	// fStageStartedAt is when the current stage started.
	fStageStartedAt = "stageStartedAt"
	fTotalStages    = "totalStages"
	fLastError      = "lastError"
	fReason         = "reason"
	fOwner          = "owner"
	fHeartbeatAt    = "heartbeatAt"
	fFence          = "fence"
	fSeq            = "seq"
	fWriteID        = "writeId"
	fCreatedAt      = "createdAt"
	fStartedAt      = "startedAt"
	fFinishedAt     = "finishedAt"
	fUpdatedAt      = "updatedAt"
	fCancelledAt    = "cancelledAt"
	// fTTLAt is when the task's keys last got their TTL (the writer's
	// clock, Unix ms; see write_task.lua).
	fTTLAt = "ttlAt"
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

// appendTime appends formatTime(t).
func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return b
	}
	return t.UTC().AppendFormat(b, time.RFC3339Nano)
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
	b, err := jsonenc.Value(nil, p)
	if err != nil {
		return "", fmt.Errorf("encode params: %w", err)
	}
	return string(b), nil
}

// Fields of the task record split by who writes them:
//
//   - fixed fields (planId, params, totalStages, createdAt) are written at
//     creation with fixedSum, a digest of them. A write sends only the
//     digest, as the pseudo-field "?fixedSum" that write_task.lua compares
//     and does not store; when it differs (the writer changed one of them,
//     or the record predates the digest) the script asks for them and the
//     store sends the write again with the fields themselves. Params can be
//     large: an unchanged record does not carry them on every write.
//   - id and tenantId are written at creation only: the key holds them.
//   - mutable fields are sent by every write (mutableFields).
//   - seq, fence, writeId and the requests belong to the scripts.
const (
	fFixedSum = "fixedSum"
	// checkFixedSum is the pseudo-field a write sends the digest under.
	checkFixedSum = "?" + fFixedSum
	// checkBlind is the pseudo-field a blind start (task.Write.Blind) sends
	// its plan id under, instead of the digest: the script checks the
	// record's plan and answers with the fixed fields.
	checkBlind = "?blind"
	// checkCurrent is the pseudo-field a write that must be of the tenant's
	// current task (task.Write.Current) sends its task id under: the script
	// compares it with the newest entry of the tenant's history.
	checkCurrent = "?current"
)

// mutableFields are the record fields every write sets, in the order of
// EncodedWrite.vals.
var mutableFields = [...]string{
	fStatus, fAttempt, fStageIndex, fStageName, fLastError, fReason, fOwner,
	fHeartbeatAt, fStartedAt, fFinishedAt, fUpdatedAt, fStageStartedAt,
}

// zeroOf is the value a mutable field reads as when the record lacks it:
// "0" for a number, "" for a string or time. A new record leaves such
// values out, and so does a task's first write (see scriptArgs).
func zeroOf(field string) string {
	if field == fAttempt || field == fStageIndex {
		return "0"
	}
	return ""
}

// mutableValues returns the values of mutableFields for t (the numbers and
// times formatted into one allocation).
func mutableValues(t *task.Task) [len(mutableFields)]string {
	b := make([]byte, 0, 5*len(time.RFC3339Nano)+2*20)
	var ends [7]int
	b = strconv.AppendInt(b, int64(t.Attempt), 10)
	ends[0] = len(b)
	b = strconv.AppendInt(b, int64(t.StageIndex), 10)
	ends[1] = len(b)
	for i, at := range [...]time.Time{t.HeartbeatAt, t.StartedAt, t.FinishedAt, t.UpdatedAt, t.StageStartedAt} {
		b = appendTime(b, at)
		ends[2+i] = len(b)
	}
	s := unsafe.String(unsafe.SliceData(b), len(b))
	return [...]string{
		string(t.Status), s[:ends[0]], s[ends[0]:ends[1]], t.StageName, t.LastError, t.Reason, t.Owner,
		s[ends[1]:ends[2]], s[ends[2]:ends[3]], s[ends[3]:ends[4]], s[ends[4]:ends[5]], s[ends[5]:ends[6]],
	}
}

// fixedFields are a task's fixed fields as stored, and their digest.
type fixedFields struct {
	planID, params, totalStages, createdAt string
	sum                                    string
}

func fixedOf(t *task.Task) (fixedFields, error) {
	params, err := encodeParams(t.Params)
	if err != nil {
		return fixedFields{}, fmt.Errorf("task %s: %w", t.ID, err)
	}
	f := fixedFields{planID: t.PlanID, params: params, totalStages: strconv.Itoa(t.TotalStages), createdAt: formatTime(t.CreatedAt)}
	f.sum = fixedDigest(f.planID, f.totalStages, f.createdAt, f.params)
	return f, nil
}

// fixedDigest is the FNV-1a 64-bit hash of the fixed fields, in hex.
func fixedDigest(parts ...string) string {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i, p := range parts {
		if i > 0 {
			h *= prime // a zero byte between two parts
		}
		for j := 0; j < len(p); j++ {
			h ^= uint64(p[j])
			h *= prime
		}
	}
	var b [16]byte
	const hex = "0123456789abcdef"
	for i := 15; i >= 0; i-- {
		b[i] = hex[h&15]
		h >>= 4
	}
	return string(b[:])
}

// taskRecord returns the fields of a new task record (seq 0). Empty and
// zero values are left out: a missing field reads as "" or 0.
func taskRecord(t *task.Task) ([]string, error) {
	f, err := fixedOf(t)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, 32)
	// add leaves out a field whose value reads back the same when missing:
	// "" for a string or time, "0" for a number or flag.
	add := func(name, v, zero string) {
		if v != zero {
			out = append(out, name, v)
		}
	}
	out = append(out, fID, t.ID, fTenantID, t.TenantID, fPlanID, t.PlanID, fStatus, string(t.Status))
	add(fParams, f.params, "")
	vals := mutableValues(t)
	for i, name := range mutableFields[1:] {
		add(name, vals[i+1], zeroOf(name))
	}
	add(fTotalStages, f.totalStages, "0")
	add(fCreatedAt, f.createdAt, "")
	add(fPause, formatBool(t.PauseRequested), "0")
	add(fCancel, formatBool(t.CancelRequested), "0")
	add(fFence, strconv.FormatInt(t.Fence, 10), "0")
	return append(out, fFixedSum, f.sum), nil
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
		StageStartedAt: r.time(fStageStartedAt),
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
		fCancelledAt, formatTime(p.CancelledAt),
	}, nil
}

// planState returns the fields UpdatePlan writes. cancelledAt only with a
// cancel: an update that read the plan before a cancel (a pause whose
// compare-and-set passed once a retry reopened the plan) must not erase it.
func planState(p *plan.Plan) []string {
	fields := []string{
		fStatus, string(p.Status), fReason, p.Reason, fOwner, p.Owner,
		fStartedAt, formatTime(p.StartedAt), fFinishedAt, formatTime(p.FinishedAt),
		fUpdatedAt, formatTime(p.UpdatedAt),
	}
	if p.Status == plan.StatusCancelled {
		fields = append(fields, fCancelledAt, formatTime(p.CancelledAt))
	}
	return fields
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
		FinishedAt: r.time(fFinishedAt), UpdatedAt: r.time(fUpdatedAt), CancelledAt: r.time(fCancelledAt),
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
