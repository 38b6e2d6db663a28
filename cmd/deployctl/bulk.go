package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/task"
)

// listedMax is how many tenant ids a bulk retry's summary names before
// "and N more".
const listedMax = 20

// retryStatuses are the statuses a bulk retry selects by.
var retryStatuses = []task.Status{task.StatusFailed, task.StatusPaused, task.StatusCancelled}

// listFlag is a flag that may be repeated; each use adds one value (a value
// may also hold several, comma-separated).
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// skippedError ends a bulk retry that left some selected tenants alone, or
// did not select some of the tenants named: exit 4, as a refused single
// retry.
type skippedError struct {
	planID               string
	skipped, notSelected int
}

func (e *skippedError) Error() string {
	var parts []string
	if e.skipped > 0 {
		parts = append(parts, fmt.Sprintf("%d selected tenant(s) of plan %s were not retried", e.skipped, e.planID))
	}
	if e.notSelected > 0 {
		parts = append(parts, fmt.Sprintf("%d tenant(s) named were not selected in plan %s", e.notSelected, e.planID))
	}
	return strings.Join(parts, "; ") + " (listed above)"
}

// planRetry is "deployctl plan retry": POST /v1/plans/{id}/retry. Without
// --yes it first asks for a dry run, shows how many tenants would be
// retried and asks for confirmation on a terminal; the confirmed retry then
// names exactly the tenants shown. It refuses to run unconfirmed when stdin
// is not a terminal.
func (a *app) planRetry(ctx context.Context, fs *flag.FlagSet, args []string) error {
	var statuses, tenants listFlag
	fs.Var(&statuses, "status", "select tasks in this status: "+joinStatuses(retryStatuses)+" (repeat for several)")
	orphaned := fs.Bool("orphaned", false, "also select RUNNING tasks whose owner instance is gone")
	fs.Var(&tenants, "tenant", "only this tenant of the selection (repeat, or comma-separate, for several)")
	file := fs.String("tenants-file", "", "only the tenants listed in this file, one a line (# comments; - reads stdin, which then needs --yes or --dry-run)")
	fromStage := fs.String("from-stage", "", "re-run every selected task from this stage (default: from its checkpoint)")
	fromStart := fs.Bool("from-start", false, "start every selected task over from the first stage, checkpoint reset")
	reason := fs.String("reason", "", "why (required; recorded in each task's timeline and the audit trail)")
	dryRun := fs.Bool("dry-run", false, "only show which tenants would be retried; change nothing")
	yes := fs.Bool("yes", false, "do not ask for confirmation (needed when stdin is not a terminal)")
	key := fs.String("idempotency-key", "", "Idempotency-Key header: a repeated request gets the first answer")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	id, err := onePlanID(pos)
	if err != nil {
		return err
	}
	body := facade.PlanRetryRequest{Orphaned: *orphaned, Reason: *reason, FromStage: *fromStage}
	for _, s := range statuses {
		st := task.Status(strings.ToUpper(s))
		if !st.Valid() || (st != task.StatusFailed && st != task.StatusPaused && st != task.StatusCancelled) {
			return usagef("--status %s: a bulk retry selects %s (orphaned RUNNING tasks: --orphaned)", task.Quote(s), joinStatuses(retryStatuses))
		}
		for _, prev := range body.Statuses {
			if prev == st {
				return usagef("--status %s is given twice", st)
			}
		}
		body.Statuses = append(body.Statuses, st)
	}
	if len(body.Statuses) == 0 && !body.Orphaned {
		return usagef("select what to retry: --status FAILED (and/or PAUSED, CANCELLED) and/or --orphaned")
	}
	seen := make(map[string]bool, len(tenants))
	for _, tn := range tenants {
		if err := checkTenant(tn); err != nil {
			return err
		}
		if seen[tn] {
			return usagef("--tenant %s is given twice", tn)
		}
		seen[tn] = true
	}
	if *file != "" {
		if *file == "-" && !*yes && !*dryRun {
			return usagef("--tenants-file - reads stdin, which leaves no terminal to confirm on: add --yes (or --dry-run)")
		}
		data, err := a.readFile(*file)
		if err != nil {
			return err
		}
		ids, err := tenantIDs(*file, data)
		if err != nil {
			return err
		}
		for _, tn := range ids {
			if !seen[tn] {
				seen[tn] = true
				tenants = append(tenants, tn)
			}
		}
	}
	if len(tenants) > facade.MaxBulkTenants {
		return usagef("at most %d tenants (--tenant, --tenants-file), got %d", facade.MaxBulkTenants, len(tenants))
	}
	if len(tenants) > 0 {
		body.Tenants = tenants
	}
	switch {
	case *fromStage != "" && *fromStart:
		return usagef("choose one of --from-stage and --from-start")
	case *fromStage != "" && !task.ValidStageName(*fromStage):
		return usagef("--from-stage %s is not a valid stage name", task.Quote(*fromStage))
	case *fromStart:
		body.FromCheckpoint = new(false)
	}
	if err := checkReason(*reason); err != nil {
		return err
	}
	if *key != "" && !validIdempotencyKey(*key) {
		return usagef("--idempotency-key must be 1..128 characters of A-Za-z0-9._:-")
	}
	if *dryRun {
		body.DryRun = true
		res, raw, err := a.postPlanRetry(ctx, id, body, *key)
		if err != nil {
			return err
		}
		if a.json() {
			return printJSON(a.stdout, raw)
		}
		printPlanRetry(a.stdout, id, res, tenants)
		return nil
	}
	if !*yes {
		if !a.stdinTTY {
			return usagef("plan retry changes tasks and stdin is not a terminal to confirm on: add --yes " +
				"(run it with --dry-run first to see which tenants it retries)")
		}
		confirmed, err := a.confirmPlanRetry(ctx, id, &body)
		if err != nil || !confirmed {
			return err
		}
	}
	res, raw, err := a.postPlanRetry(ctx, id, body, *key)
	if err != nil {
		return err
	}
	if a.json() {
		if err := printJSON(a.stdout, raw); err != nil {
			return err
		}
	} else {
		printPlanRetry(a.stdout, id, res, tenants)
	}
	if len(res.Skipped) > 0 || len(res.NotSelected) > 0 {
		return &skippedError{planID: id, skipped: len(res.Skipped), notSelected: len(res.NotSelected)}
	}
	return nil
}

// confirmPlanRetry runs the dry run of body, shows it and asks on the
// terminal. On "y" it narrows body to the tenants the dry run would retry,
// so that the retry touches no tenant the operator was not shown. It
// reports false (and prints why) when there is nothing to retry or the
// operator declined.
func (a *app) confirmPlanRetry(ctx context.Context, id string, body *facade.PlanRetryRequest) (bool, error) {
	dry := *body
	dry.DryRun = true
	res, _, err := a.postPlanRetry(ctx, id, dry, "")
	if err != nil {
		return false, err
	}
	// -o json keeps stdout for the answer: the summary goes to stderr.
	w := a.stdout
	if a.json() {
		w = a.stderr
	}
	printPlanRetry(w, id, res, body.Tenants)
	if len(res.Retried) == 0 {
		return false, nil
	}
	if len(res.Retried) > facade.MaxBulkTenants {
		return false, fmt.Errorf("the dry run selected %d tenants, more than one confirmed retry may name (%d): narrow it with --tenant, or confirm with --yes",
			len(res.Retried), facade.MaxBulkTenants)
	}
	fmt.Fprintf(a.stderr, "Retry %d tenant(s) of plan %s? [y/N] ", len(res.Retried), id)
	answer, err := bufio.NewReader(a.stdin).ReadString('\n')
	if err != nil && answer == "" {
		fmt.Fprintln(a.stderr)
		return false, fmt.Errorf("no answer: nothing retried")
	}
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
	default:
		return false, fmt.Errorf("not confirmed: nothing retried")
	}
	body.Tenants = res.Retried
	return true, nil
}

func (a *app) postPlanRetry(ctx context.Context, id string, body facade.PlanRetryRequest, key string) (httpapi.PlanRetry, []byte, error) {
	r := request{method: http.MethodPost, path: planPath(id) + "/retry", body: body}
	if key != "" {
		r.header = http.Header{httpapi.HeaderIdempotencyKey: {key}}
	}
	var res httpapi.PlanRetry
	raw, err := a.cli.call(ctx, r, &res)
	return res, raw, err
}

// printPlanRetry prints what a bulk retry did (or, dry run, would do), and
// which of the tenants named (--tenant) the selection did not hold:
//
//	will retry 3 tenant(s) of plan plan-01J... (4 selected): t-001, t-002, t-007
//	skipped 1:
//	TENANT  CODE          DETAIL
//	t-009   TASK_RUNNING  task ... is running on instance coord-b
//	not selected (not in the plan, or not in the statuses asked): t-0O9
func printPlanRetry(w io.Writer, id string, res httpapi.PlanRetry, named []string) {
	verb := "retried"
	if res.DryRun {
		verb = "will retry"
	}
	names := make([]string, 0, min(len(res.Retried), listedMax))
	for i, tn := range res.Retried {
		if i == listedMax {
			break
		}
		names = append(names, cell(tn))
	}
	list := strings.Join(names, ", ")
	if more := len(res.Retried) - len(names); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	line := fmt.Sprintf("%s %d tenant(s) of plan %s (%d selected)", verb, len(res.Retried), id, res.Selected)
	if list != "" {
		line += ": " + list
	}
	if res.DryRun {
		line += "; dry run, nothing changed"
	}
	fmt.Fprintln(w, line)
	if len(res.Skipped) > 0 {
		what := "skipped"
		if res.DryRun {
			what = "would skip"
		}
		fmt.Fprintf(w, "%s %d:\n", what, len(res.Skipped))
		t := newTable(w, "TENANT", "CODE", "DETAIL")
		for _, s := range res.Skipped {
			t.row(cell(s.TenantID), cell(s.Code), cell(s.Detail))
		}
		_ = t.flush()
	}
	if len(named) == 0 {
		return
	}
	selected := make(map[string]bool, len(res.Retried)+len(res.Skipped))
	for _, tn := range res.Retried {
		selected[tn] = true
	}
	for _, s := range res.Skipped {
		selected[s.TenantID] = true
	}
	var missing []string
	for _, tn := range named {
		if !selected[tn] {
			missing = append(missing, cell(tn))
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(w, "not selected (not in the plan, or not in the statuses asked): %s\n", strings.Join(missing, ", "))
	}
}

// validIdempotencyKey is the server's rule for an Idempotency-Key.
func validIdempotencyKey(k string) bool {
	if k == "" || len(k) > 128 {
		return false
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._:-", c)) {
			return false
		}
	}
	return true
}
