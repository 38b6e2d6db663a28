package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/task"
)

// statusChunk is how many tenant ids one POST /v1/tenants:status carries.
const statusChunk = httpapi.MaxStatusTenants

func (a *app) status(ctx context.Context, fs *flag.FlagSet, args []string) error {
	tenant := fs.String("tenant", "", "tenant id")
	file := fs.String("tenants-file", "", "file with one tenant id a line (# starts a comment; - reads stdin)")
	if err := a.parseNoArgs(fs, args); err != nil {
		return err
	}
	switch {
	case *tenant != "" && *file != "":
		return usagef("give --tenant or --tenants-file, not both")
	case *file != "":
		return a.statusMany(ctx, *file)
	}
	if err := checkTenant(*tenant); err != nil {
		return err
	}
	var d httpapi.TaskDetail
	raw, err := a.cli.getJSON(ctx, tenantPath(*tenant, "task"), nil, &d)
	if err != nil {
		return err
	}
	if a.json() {
		return printJSON(a.stdout, raw)
	}
	return a.printTaskDetail(d)
}

// statusMany answers status --tenants-file: POST /v1/tenants:status in
// chunks of statusChunk ids, one row (or JSON entry) per tenant in file
// order; a tenant without a task is a "not found" row (null in JSON).
func (a *app) statusMany(ctx context.Context, file string) error {
	data, err := a.readFile(file)
	if err != nil {
		return err
	}
	ids, err := tenantIDs(file, data)
	if err != nil {
		return err
	}
	found := make(map[string]json.RawMessage, len(ids))
	for start := 0; start < len(ids); start += statusChunk {
		chunk := ids[start:min(start+statusChunk, len(ids))]
		var answer struct {
			Tasks map[string]json.RawMessage `json:"tasks"`
		}
		_, err := a.cli.call(ctx, request{method: http.MethodPost, path: "/v1/tenants:status",
			body: httpapi.TenantsStatusRequest{TenantIDs: chunk}}, &answer)
		if err != nil {
			return err
		}
		for _, id := range chunk {
			found[id] = answer.Tasks[id]
		}
	}
	if a.json() {
		out := make(map[string]json.RawMessage, len(ids))
		for _, id := range ids {
			out[id] = nullIfEmpty(found[id])
		}
		return printValue(a.stdout, map[string]any{"tasks": out})
	}
	t := a.taskTable(true)
	for _, id := range ids {
		raw := nullIfEmpty(found[id])
		if bytes.Equal(raw, []byte("null")) {
			t.row(id, "not found", "-", "-", "-", "-", "-", "-", "-", "-")
			continue
		}
		var d httpapi.TaskDetail
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("decode the task of tenant %s: %w", id, err)
		}
		a.taskRow(t, d.Task, &d)
	}
	return t.flush()
}

func nullIfEmpty(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

// tenantIDs reads a tenants file: one id a line, blank lines and # comments
// skipped, duplicates dropped, every id checked.
func tenantIDs(file string, data []byte) ([]string, error) {
	var ids []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		id := strings.TrimSpace(line)
		if id == "" {
			continue
		}
		if !task.ValidTenantID(id) {
			return nil, usagef("%s line %d: tenant id %s is not valid: it must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", file, n, task.Quote(id))
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, usagef("read %s: %v", file, err)
	}
	if len(ids) == 0 {
		return nil, usagef("%s lists no tenant ids", file)
	}
	return ids, nil
}

// taskTable starts a table of tasks; withCheckpoint adds a CHECKPOINT column.
func (a *app) taskTable(withCheckpoint ...bool) *table {
	if a.wide() {
		return newTable(a.stdout, "TENANT", "STATUS", "STAGE", "ATTEMPT", "OWNER", "HEARTBEAT", "FENCE", "UPDATED", "PLAN", "TASK", "ERROR")
	}
	if len(withCheckpoint) > 0 && withCheckpoint[0] {
		return newTable(a.stdout, "TENANT", "STATUS", "STAGE", "ATTEMPT", "CHECKPOINT", "OWNER", "UPDATED", "PLAN", "TASK", "ERROR")
	}
	return newTable(a.stdout, "TENANT", "STATUS", "STAGE", "ATTEMPT", "OWNER", "UPDATED", "TASK", "ERROR")
}

// taskRow adds a task to a table from taskTable; d is the detail (with its
// checkpoint) for a table with the CHECKPOINT column, else nil.
func (a *app) taskRow(t *table, tk httpapi.Task, d *httpapi.TaskDetail) {
	now := a.now()
	if a.wide() {
		t.row(cell(tk.TenantID), taskStatus(tk), stageText(tk), strconv.Itoa(tk.Attempt), cell(tk.Owner), ago(tk.HeartbeatAt, now),
			strconv.FormatInt(tk.Fence, 10), ago(tk.UpdatedAt, now), cell(tk.PlanID), cell(tk.TaskID), cell(tk.LastError))
		return
	}
	if d != nil {
		t.row(cell(tk.TenantID), taskStatus(tk), stageText(tk), strconv.Itoa(tk.Attempt), checkpointShort(d),
			cell(tk.Owner), ago(tk.UpdatedAt, now), cell(tk.PlanID), cell(tk.TaskID), cell(tk.LastError))
		return
	}
	t.row(cell(tk.TenantID), taskStatus(tk), stageText(tk), strconv.Itoa(tk.Attempt),
		cell(tk.Owner), ago(tk.UpdatedAt, now), cell(tk.TaskID), cell(tk.LastError))
}

// taskStatus is the status with what else a person must know about it.
func taskStatus(tk httpapi.Task) string {
	s := clean(string(tk.Status))
	var notes []string
	if tk.Orphaned {
		notes = append(notes, "orphaned")
	}
	if tk.PauseRequested {
		notes = append(notes, "pause requested")
	}
	if tk.CancelRequested {
		notes = append(notes, "cancel requested")
	}
	if tk.Degraded {
		notes = append(notes, "from memory")
	}
	if len(notes) > 0 {
		s += " (" + strings.Join(notes, ", ") + ")"
	}
	return s
}

// stageText is "2/3 settle" (1-based), "done" after the last stage.
func stageText(tk httpapi.Task) string {
	switch {
	case tk.TotalStages == 0:
		return "-"
	case tk.CurrentStageIndex >= tk.TotalStages:
		return fmt.Sprintf("done (%d)", tk.TotalStages)
	}
	return fmt.Sprintf("%d/%d %s", tk.CurrentStageIndex+1, tk.TotalStages, cell(tk.CurrentStage))
}

func checkpointShort(d *httpapi.TaskDetail) string {
	if d.Checkpoint == nil {
		return "-"
	}
	return cell(strings.Join(d.Checkpoint.CompletedStages, ","))
}

// printTaskDetail prints one task as a list of fields.
func (a *app) printTaskDetail(d httpapi.TaskDetail) error {
	now := a.now()
	tk := d.Task
	t := newTable(a.stdout)
	t.row("TENANT", cell(tk.TenantID))
	t.row("TASK", cell(tk.TaskID))
	t.row("PLAN", cell(tk.PlanID))
	t.row("STATUS", taskStatus(tk))
	t.row("STAGE", stageText(tk))
	t.row("ATTEMPT", strconv.Itoa(tk.Attempt))
	t.row("OWNER", cell(tk.Owner))
	t.row("HEARTBEAT", ago(tk.HeartbeatAt, now))
	t.row("FENCE", strconv.FormatInt(tk.Fence, 10))
	if d.LockExpiresAt != nil {
		left := d.LockExpiresAt.Sub(now).Round(100 * time.Millisecond)
		t.row("LOCK FREES", fmt.Sprintf("in %s unless renewed (%s); retry --wait-lock waits for it", max(left, 0), d.LockExpiresAt.UTC().Format(time.RFC3339)))
	}
	if tk.LastError != "" {
		t.row("ERROR", clean(tk.LastError))
	}
	if tk.Reason != "" {
		t.row("REASON", clean(tk.Reason))
	}
	if c := d.Checkpoint; c != nil {
		done := strings.Join(c.CompletedStages, ", ")
		ck := fmt.Sprintf("completed: %s", orDash(clean(done)))
		if len(c.SkippedStages) > 0 {
			ck += "; skipped: " + clean(strings.Join(c.SkippedStages, ", "))
		}
		t.row("CHECKPOINT", fmt.Sprintf("%s (saved %s)", ck, ago(c.SavedAt, now)))
	} else {
		t.row("CHECKPOINT", "none")
	}
	t.row("CREATED", ago(tk.CreatedAt, now))
	t.row("STARTED", ago(tk.StartedAt, now))
	t.row("FINISHED", ago(tk.FinishedAt, now))
	t.row("UPDATED", ago(tk.UpdatedAt, now))
	return t.flush()
}

func (a *app) timeline(ctx context.Context, fs *flag.FlagSet, args []string) error {
	tenant := fs.String("tenant", "", "tenant id (required)")
	limit := fs.Int("limit", 0, "the last N entries (0: all the server keeps)")
	if err := a.parseTenant(fs, args, tenant); err != nil {
		return err
	}
	if *limit < 0 || *limit > task.MaxTimeline {
		return usagef("--limit %d: want 1..%d", *limit, task.MaxTimeline)
	}
	q := url.Values{}
	if *limit > 0 {
		q.Set("limit", strconv.Itoa(*limit))
	}
	var tl httpapi.Timeline
	raw, err := a.cli.getJSON(ctx, tenantPath(*tenant, "timeline"), q, &tl)
	if err != nil {
		return err
	}
	if a.json() {
		return printJSON(a.stdout, raw)
	}
	fmt.Fprintf(a.stdout, "tenant %s, task %s\n\n", cell(tl.TenantID), cell(tl.TaskID))
	now := a.now()
	t := newTable(a.stdout, "AT", "TYPE", "STAGE", "ATTEMPT", "DETAIL")
	for _, e := range tl.Events {
		at := e.At
		attempt := "-"
		if e.Attempt > 0 {
			attempt = strconv.Itoa(e.Attempt)
		}
		if e.StageAttempt > 0 {
			attempt += fmt.Sprintf(" (try %d)", e.StageAttempt)
		}
		when := ago(&at, now)
		if a.wide() {
			// The time itself, to line entries up with logs and the target's.
			when = at.UTC().Format("2006-01-02T15:04:05.000Z") + " (" + when + ")"
		}
		t.row(when, cell(string(e.Type)), cell(e.Stage), attempt, eventDetail(e))
	}
	return t.flush()
}

// eventDetail sums up the rest of a timeline entry.
func eventDetail(e task.Event) string {
	var parts []string
	if e.Reason != "" {
		parts = append(parts, e.Reason)
	}
	if e.Delay > 0 {
		parts = append(parts, "next try in "+e.Delay.D().String())
	}
	if e.Duration > 0 {
		parts = append(parts, "took "+e.Duration.D().Round(time.Millisecond).String())
	}
	if e.Actor != "" {
		by := "by " + e.Actor
		if e.Role != "" {
			by += " (" + e.Role + ")"
		}
		parts = append(parts, by)
	}
	if e.Instance != "" {
		parts = append(parts, "on "+e.Instance)
	}
	if e.Fence != 0 {
		parts = append(parts, "fence "+strconv.FormatInt(e.Fence, 10))
	}
	if len(e.Data) > 0 {
		if b, err := json.Marshal(e.Data); err == nil {
			parts = append(parts, string(b))
		}
	}
	return cell(strings.Join(parts, "; "))
}

func (a *app) retry(ctx context.Context, fs *flag.FlagSet, args []string) error {
	tenant := fs.String("tenant", "", "tenant id (required)")
	fromCheckpoint := fs.Bool("from-checkpoint", false, "mode: resume after the last checkpointed stage")
	fromStart := fs.Bool("from-start", false, "mode: start over from the first stage, checkpoint reset")
	fromStage := fs.String("from-stage", "", "mode: re-run from this stage (the checkpoint must cover it)")
	skip := fs.Bool("skip", false, "mode: mark the failed stage skipped and go on")
	outputs := fs.String("outputs", "", "with --skip: the skipped stage's outputs, a JSON object")
	reason := fs.String("reason", "", "why (required; recorded in the timeline and audit trail)")
	dryRun := fs.Bool("dry-run", false, "only show which stages would run; change nothing")
	expected := fs.Int("expected-attempt", 0, "refuse (exit 4) unless the task's attempt is N: guards against double retries")
	key := fs.String("idempotency-key", "", "Idempotency-Key header: a repeated request gets the first answer")
	waitLock := fs.Bool("wait-lock", false, "if the task is RUNNING but orphaned, wait until its lock frees (lockExpiresAt), then retry")
	if err := a.parseTenant(fs, args, tenant); err != nil {
		return err
	}
	body := facade.RetryRequest{Reason: *reason, DryRun: *dryRun, ExpectedAttempt: *expected}
	var modes []string
	if *fromCheckpoint {
		modes = append(modes, "--from-checkpoint")
		body.FromCheckpoint = new(true)
	}
	if *fromStart {
		modes = append(modes, "--from-start")
		body.FromCheckpoint = new(false)
	}
	if *fromStage != "" {
		modes = append(modes, "--from-stage")
		if !task.ValidStageName(*fromStage) {
			return usagef("--from-stage %s is not a valid stage name", task.Quote(*fromStage))
		}
		body.FromStage = *fromStage
	}
	if *skip {
		modes = append(modes, "--skip")
		body.SkipStage = true
	}
	switch {
	case len(modes) == 0:
		return usagef("choose a retry mode: --from-checkpoint, --from-start, --from-stage S or --skip")
	case len(modes) > 1:
		return usagef("choose exactly one retry mode, not %s", strings.Join(modes, " and "))
	case *outputs != "" && !*skip:
		return usagef("--outputs goes with --skip only")
	case *expected < 0:
		return usagef("--expected-attempt must be positive")
	}
	if *outputs != "" {
		if err := json.Unmarshal([]byte(*outputs), &body.Outputs); err != nil || body.Outputs == nil {
			return usagef("--outputs must be a JSON object, like '{\"version\": \"1.2.3\"}'")
		}
	}
	if err := checkReason(*reason); err != nil {
		return err
	}
	if *waitLock && !*dryRun {
		if err := a.waitLock(ctx, *tenant); err != nil {
			return err
		}
	}
	r := request{method: http.MethodPost, path: tenantPath(*tenant, "retry"), body: body}
	if *key != "" {
		if len(*key) > 255 || strings.ContainsFunc(*key, func(c rune) bool { return c <= ' ' || c >= 0x7f }) {
			return usagef("--idempotency-key must be 1..255 printable ASCII characters without spaces")
		}
		r.header = http.Header{"Idempotency-Key": {*key}}
	}
	status, raw, err := a.cli.do(ctx, r)
	if err != nil {
		return err
	}
	if a.json() {
		return printJSON(a.stdout, raw)
	}
	if status == http.StatusOK || *dryRun {
		var dry httpapi.DryRun
		if err := json.Unmarshal(raw, &dry); err != nil {
			return fmt.Errorf("decode the dry run: %w", err)
		}
		stages := make([]string, len(dry.WouldRun))
		for i, s := range dry.WouldRun {
			stages[i] = clean(s)
		}
		if len(stages) == 0 {
			fmt.Fprintf(a.stdout, "dry run: tenant %s: no stage would run; nothing changed\n", *tenant)
			return nil
		}
		fmt.Fprintf(a.stdout, "dry run: tenant %s would run %s; nothing changed\n", *tenant, strings.Join(stages, ", "))
		return nil
	}
	var d httpapi.TaskDetail
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("decode the task: %w", err)
	}
	fmt.Fprintf(a.stdout, "retry accepted: tenant %s, task %s, attempt %d\n\n", cell(d.TenantID), cell(d.TaskID), d.Attempt)
	t := a.taskTable()
	a.taskRow(t, d.Task, nil)
	return t.flush()
}

// taskAction returns the command POSTing /v1/tenants/{id}/{verb}.
func taskAction(verb string) func(a *app, ctx context.Context, fs *flag.FlagSet, args []string) error {
	return func(a *app, ctx context.Context, fs *flag.FlagSet, args []string) error {
		tenant := fs.String("tenant", "", "tenant id (required)")
		reason := fs.String("reason", "", "why (required; recorded in the timeline and audit trail)")
		pos, err := a.parse(fs, args)
		if err != nil {
			return err
		}
		if err := noArgs(pos); err != nil {
			return err
		}
		if err := checkTenant(*tenant); err != nil {
			return err
		}
		if err := checkReason(*reason); err != nil {
			return err
		}
		var d httpapi.TaskDetail
		raw, err := a.cli.call(ctx, request{method: http.MethodPost, path: tenantPath(*tenant, verb),
			body: httpapi.ReasonRequest{Reason: *reason}}, &d)
		if err != nil {
			return err
		}
		if a.json() {
			return printJSON(a.stdout, raw)
		}
		t := a.taskTable()
		a.taskRow(t, d.Task, nil)
		return t.flush()
	}
}

func (a *app) lockShow(ctx context.Context, fs *flag.FlagSet, args []string) error {
	tenant := fs.String("tenant", "", "tenant id (required)")
	if err := a.parseTenant(fs, args, tenant); err != nil {
		return err
	}
	var l httpapi.Lock
	raw, err := a.cli.getJSON(ctx, tenantPath(*tenant, "lock"), nil, &l)
	if err != nil {
		return err
	}
	if a.json() {
		return printJSON(a.stdout, raw)
	}
	t := newTable(a.stdout)
	t.row("TENANT", cell(l.TenantID))
	t.row("HELD", yesNo(l.Held))
	if l.Held {
		t.row("PLAN", cell(l.PlanID))
		t.row("TASK", cell(l.TaskID))
		t.row("OWNER", cell(l.Owner))
		t.row("TTL", (time.Duration(l.TTLMs) * time.Millisecond).String())
		t.row("FENCE", strconv.FormatInt(l.Fence, 10))
	} else if l.Fence == 0 {
		// No fence counter: no lock was ever taken for the tenant on
		// this Redis and key prefix. 0 was never handed out, and an SRE
		// comparing fences must not read it as one.
		t.row("FENCE", "none handed out yet")
	} else {
		t.row("FENCE", strconv.FormatInt(l.Fence, 10)+" (the last one handed out)")
	}
	return t.flush()
}

func (a *app) lockRelease(ctx context.Context, fs *flag.FlagSet, args []string) error {
	tenant := fs.String("tenant", "", "tenant id (required)")
	fence := fs.Int64("expected-fence", 0, "the fence lock show printed (required): the lock is released only if it still has it")
	reason := fs.String("reason", "", "why (required; recorded in the audit trail)")
	if err := a.parseTenant(fs, args, tenant); err != nil {
		return err
	}
	if *fence <= 0 {
		return usagef("--expected-fence N is required (a positive number, as lock show prints it)")
	}
	if err := checkReason(*reason); err != nil {
		return err
	}
	var rel httpapi.ReleasedLock
	raw, err := a.cli.call(ctx, request{method: http.MethodDelete, path: tenantPath(*tenant, "lock"),
		body: httpapi.ReleaseLockRequest{Reason: *reason, ExpectedFence: *fence}}, &rel)
	if err != nil {
		return err
	}
	if a.json() {
		return printJSON(a.stdout, raw)
	}
	fmt.Fprintf(a.stdout, "released the lock of tenant %s held by %s (plan %s, task %s, fence %d)\n",
		cell(rel.TenantID), cell(rel.Owner), cell(rel.PlanID), cell(rel.TaskID), rel.Fence)
	return nil
}

// waitLockRounds bounds how many times retry --wait-lock waits for a lock:
// an orphaned task's lock is not renewed, so one wait is the rule.
const waitLockRounds = 5

// waitLock waits, while the tenant's task is RUNNING, orphaned and its lock
// still held, until the lock's lockExpiresAt (plus a little): the retry of
// an orphaned task is refused TASK_RUNNING until then. A task not orphaned
// is not waited for: its owner renews the lock.
func (a *app) waitLock(ctx context.Context, tenant string) error {
	for range waitLockRounds {
		var d httpapi.TaskDetail
		if _, err := a.cli.getJSON(ctx, tenantPath(tenant, "task"), nil, &d); err != nil {
			return err
		}
		if d.Status != task.StatusRunning || !d.Orphaned || d.LockExpiresAt == nil {
			return nil
		}
		wait := time.Until(*d.LockExpiresAt) + 100*time.Millisecond
		if wait <= 0 {
			continue
		}
		fmt.Fprintf(a.stderr, "waiting %s for the lock of tenant %s to free (lockExpiresAt %s)\n",
			wait.Round(100*time.Millisecond), tenant, d.LockExpiresAt.UTC().Format(time.RFC3339Nano))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	return nil
}
