package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

const (
	// watchIntervalDefault is how often --watch re-reads the plan.
	watchIntervalDefault = time.Second
	// watchMaxFailures ends a watch after this many transient errors in a row.
	watchMaxFailures = 10
	// barWidth is the width of the progress bar, in cells.
	barWidth = 30
)

// planEndedError ends a watch whose plan finished other than COMPLETED.
type planEndedError struct {
	id     string
	status plan.Status
	reason string
}

func (e *planEndedError) Error() string {
	msg := fmt.Sprintf("plan %s finished %s", e.id, e.status)
	if e.reason != "" {
		msg += ": " + e.reason
	}
	return msg
}

func (a *app) planCreate(ctx context.Context, fs *flag.FlagSet, args []string) error {
	file := fs.String("f", "", "plan file, YAML or JSON (- reads stdin)")
	watch := fs.Bool("watch", false, "then follow the plan until it ends")
	interval := fs.Duration("interval", watchIntervalDefault, "refresh interval of --watch")
	if err := a.parseNoArgs(fs, args); err != nil {
		return err
	}
	if *file == "" {
		return usagef("-f FILE is required (- reads stdin)")
	}
	if *interval <= 0 {
		return usagef("--interval must be positive")
	}
	data, err := a.readFile(*file)
	if err != nil {
		return err
	}
	body, err := planBody(*file, data)
	if err != nil {
		return err
	}
	var p httpapi.Plan
	raw, err := a.cli.call(ctx, request{method: http.MethodPost, path: "/v1/plans", body: body}, &p)
	if err != nil {
		return err
	}
	if *watch {
		if !a.json() {
			fmt.Fprintf(a.stdout, "created plan %s (%s)\n", p.PlanID, cell(p.Name))
		}
		return a.watch(ctx, p.PlanID, *interval, nil)
	}
	if a.json() {
		return printJSON(a.stdout, raw)
	}
	return a.printPlan(p)
}

// readFile reads name, or stdin for "-".
func (a *app) readFile(name string) ([]byte, error) {
	if name == "-" {
		data, err := io.ReadAll(a.stdin)
		if err != nil {
			return nil, fmt.Errorf("read stdin: %w", err)
		}
		return data, nil
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read plan file: %w", err)
	}
	return data, nil
}

// planBody returns the JSON body for a plan file: JSON as is, YAML
// converted. A .json file must be JSON; stdin and other names are JSON if
// they parse as JSON, else YAML.
func planBody(name string, data []byte) ([]byte, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, usagef("plan file %s is empty", name)
	}
	ext := strings.ToLower(filepath.Ext(name))
	if ext == ".json" || (ext != ".yaml" && ext != ".yml" && json.Valid(trimmed)) {
		var v any
		if err := json.Unmarshal(trimmed, &v); err != nil {
			return nil, usagef("plan file %s is not valid JSON: %v", name, err)
		}
		if _, ok := v.(map[string]any); !ok {
			return nil, usagef("plan file %s must hold a JSON object (a plan)", name)
		}
		return trimmed, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		return nil, usagef("plan file %s is neither JSON nor valid YAML: %v", name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, usagef("plan file %s holds more than one YAML document", name)
	}
	budget := yamlNodesMax
	v, err := fromYAML(&doc, "", false, &budget)
	if err != nil {
		return nil, usagef("plan file %s: %v", name, err)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, usagef("plan file %s must hold a YAML mapping (a plan)", name)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, usagef("plan file %s cannot be converted to JSON: %v", name, err)
	}
	return b, nil
}

// yamlNodesMax bounds the values YAML aliases expand to (a few aliases can
// otherwise expand to billions); values written out are bounded by the
// file's size.
const yamlNodesMax = 1_000_000

// fromYAML converts a YAML node to values encoding/json accepts. Scalars
// keep the types YAML gives them, except timestamps, which stay the text
// written (the API parses its own times and durations); mapping keys are
// their text; merge keys (<<) are applied.
func fromYAML(n *yaml.Node, at string, aliased bool, budget *int) (any, error) {
	if aliased {
		if *budget--; *budget < 0 {
			return nil, fmt.Errorf("aliases expand too far (more than %d values)", yamlNodesMax)
		}
	}
	where := func() string { return orDash(strings.TrimPrefix(at, ".")) }
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return fromYAML(n.Content[0], at, aliased, budget)
	case yaml.AliasNode:
		return fromYAML(n.Alias, at, true, budget)
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!timestamp", "!!str":
			return n.Value, nil
		case "!!null":
			return nil, nil
		case "!!int":
			if i, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
				return i, nil
			}
		}
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("at %s: %w", where(), err)
		}
		return v, nil
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, c := range n.Content {
			v, err := fromYAML(c, at+"["+strconv.Itoa(i)+"]", aliased, budget)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		var merges []any
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, vn := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("at %s: a mapping key must be a plain value", where())
			}
			v, err := fromYAML(vn, at+"."+k.Value, aliased, budget)
			if err != nil {
				return nil, err
			}
			if k.ShortTag() == "!!merge" {
				merges = append(merges, v)
				continue
			}
			out[k.Value] = v
		}
		for _, m := range merges {
			list, ok := m.([]any)
			if !ok {
				list = []any{m}
			}
			for _, e := range list {
				mm, ok := e.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("at %s: << must merge a mapping", where())
				}
				for k, v := range mm {
					if _, set := out[k]; !set {
						out[k] = v
					}
				}
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("at %s: unsupported YAML node", where())
}

func (a *app) planShow(ctx context.Context, fs *flag.FlagSet, args []string) error {
	watch := fs.Bool("watch", false, "then follow its progress until it is COMPLETED, FAILED or CANCELLED (exit 0 only for COMPLETED)")
	interval := fs.Duration("interval", watchIntervalDefault, "refresh interval of --watch")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	id, err := onePlanID(pos)
	if err != nil {
		return err
	}
	if *interval <= 0 {
		return usagef("--interval must be positive")
	}
	if *watch && a.json() {
		return a.watch(ctx, id, *interval, nil) // the plan as JSON lines, the first one included
	}
	var p httpapi.Plan
	raw, err := a.cli.getJSON(ctx, planPath(id), nil, &p)
	if err != nil {
		return err
	}
	if a.json() {
		return printJSON(a.stdout, raw)
	}
	if err := a.printPlan(p); err != nil {
		return err
	}
	if *watch {
		// The plan as shown above, then its progress until it ends, from
		// the same read.
		return a.watch(ctx, id, *interval, &planRead{p: p, raw: raw})
	}
	return nil
}

// watch re-reads the plan every interval until it is finished. On a
// terminal (table output) it redraws one progress line in place; otherwise
// it prints a line (or, with -o json, the plan as one JSON line) each time
// the progress changes. It returns nil when the plan COMPLETED and a
// *planEndedError when it FAILED or was CANCELLED. first, when not nil, is
// the plan as just read: the first round uses it instead of reading again.
func (a *app) watch(ctx context.Context, id string, interval time.Duration, first *planRead) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	last, failures, drawn := "", 0, false
	// For the terminal line: the pace since the watch began (ETA) and the
	// failing tenants, read again only when the FAILED count changes.
	start, done0, failedSeen := time.Now(), -1, -1
	var failing []string
	endLine := func() {
		if drawn {
			fmt.Fprintln(a.stdout)
			drawn = false
		}
	}
	defer endLine()
	for {
		var (
			p   httpapi.Plan
			raw []byte
			err error
		)
		if first != nil {
			p, raw, first = first.p, first.raw, nil
		} else {
			raw, err = a.cli.getJSON(ctx, planPath(id), nil, &p)
		}
		switch {
		case err != nil && ctx.Err() == nil && transient(err) && failures+1 < watchMaxFailures:
			failures++
			endLine()
			fmt.Fprintf(a.stderr, "warning: %s (retrying)\n", clean(err.Error()))
		case err != nil:
			return err
		default:
			failures = 0
			line := progress(p)
			switch {
			case a.json():
				if line != last {
					if err := printLine(a.stdout, raw); err != nil {
						return err
					}
				}
			case a.tty:
				c := p.Counts
				done := c[task.StatusCompleted] + c[task.StatusFailed] + c[task.StatusCancelled]
				if done0 < 0 {
					done0 = done
				}
				if f := c[task.StatusFailed]; f != failedSeen {
					failedSeen = f
					if f > 0 {
						failing = a.failingTenants(ctx, id, 3)
					}
				}
				fitted := fitLine(p, a.termWidth()-1, eta(done0, done, p.TotalTasks, time.Since(start)), failing, failedSeen)
				fmt.Fprintf(a.stdout, "\r\033[K%s", fitted)
				drawn = true
			case line != last:
				fmt.Fprintln(a.stdout, line)
			}
			last = line
			if p.Status.Finished() {
				if p.Status == plan.StatusCompleted {
					return nil
				}
				return &planEndedError{id: p.PlanID, status: p.Status, reason: clean(p.Reason)}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// planRead is a plan as read from the API: decoded, and as it came.
type planRead struct {
	p   httpapi.Plan
	raw []byte
}

// progress is one line of plan progress:
//
//	plan-01J... RUNNING [###.......]  30%  3/10 done  completed 3  failed 0  cancelled 0  running 2  paused 0  pending 5
func progress(p httpapi.Plan) string {
	c := p.Counts
	done := c[task.StatusCompleted] + c[task.StatusFailed] + c[task.StatusCancelled]
	pct := 100
	if p.TotalTasks > 0 {
		pct = done * 100 / p.TotalTasks
	}
	s := fmt.Sprintf("%s %s %s %3d%%  %d/%d done  completed %d  failed %d  cancelled %d  running %d  paused %d  pending %d",
		p.PlanID, p.Status, bar(done, p.TotalTasks, barWidth), pct, done, p.TotalTasks,
		c[task.StatusCompleted], c[task.StatusFailed], c[task.StatusCancelled],
		c[task.StatusRunning], c[task.StatusPaused], c[task.StatusPending])
	if p.Reason != "" && p.Status != plan.StatusRunning {
		s += "  (" + cell(p.Reason) + ")"
	}
	return s
}

// printPlan prints one plan as a list of fields.
func (a *app) printPlan(p httpapi.Plan) error {
	now := a.now()
	t := newTable(a.stdout)
	t.row("PLAN", p.PlanID)
	t.row("NAME", cell(p.Name))
	status := string(p.Status)
	if p.Reason != "" {
		status += " (" + cell(p.Reason) + ")"
	}
	t.row("STATUS", status)
	pipeline := p.Pipeline
	if pipeline == "" {
		pipeline = "(inline stages)"
	}
	t.row("PIPELINE", cell(pipeline))
	stages := make([]string, len(p.Stages))
	for i, s := range p.Stages {
		stages[i] = clean(s)
	}
	t.row("STAGES", orDash(strings.Join(stages, ", ")))
	t.row("OWNER", cell(p.Owner))
	t.row("CONCURRENCY", strconv.Itoa(p.MaxConcurrency))
	if p.Counts != nil {
		c := p.Counts
		done := c[task.StatusCompleted] + c[task.StatusFailed] + c[task.StatusCancelled]
		t.row("PROGRESS", fmt.Sprintf("%s %d/%d done", bar(done, p.TotalTasks, barWidth), done, p.TotalTasks))
		var counts []string
		for _, s := range task.Statuses {
			counts = append(counts, fmt.Sprintf("%s %d", s, c[s]))
		}
		t.row("TASKS", strings.Join(counts, "  "))
		if p.Orphaned != nil && *p.Orphaned != 0 {
			orphaned := strconv.Itoa(*p.Orphaned)
			if *p.Orphaned < 0 {
				orphaned = "unknown (instance registry unreadable)"
			} else {
				orphaned += " (RUNNING without a live run: owner gone or heartbeat stale; retry them, or resume the plan with --include-orphaned)"
			}
			t.row("ORPHANED", orphaned)
		}
	} else {
		t.row("TASKS", strconv.Itoa(p.TotalTasks))
	}
	t.row("CREATED", ago(p.CreatedAt, now))
	t.row("STARTED", ago(p.StartedAt, now))
	t.row("FINISHED", ago(p.FinishedAt, now))
	if p.Degraded {
		t.row("DEGRADED", "yes: answered from memory, Redis unreachable")
	}
	return t.flush()
}

func (a *app) planList(ctx context.Context, fs *flag.FlagSet, args []string) error {
	status := fs.String("status", "", "only plans in this status ("+joinStatuses(plan.Statuses)+")")
	limit := fs.Int("limit", 0, "page size (server default when 0; 1.."+strconv.Itoa(plan.LimitMax)+")")
	cursor := fs.String("cursor", "", "continue a listing from this cursor")
	all := fs.Bool("all", false, "follow the cursor to the last page")
	if err := a.parseNoArgs(fs, args); err != nil {
		return err
	}
	q := url.Values{}
	if *status != "" {
		s := plan.Status(strings.ToUpper(*status))
		if !s.Valid() {
			return usagef("--status %s is not a plan status (%s)", task.Quote(*status), joinStatuses(plan.Statuses))
		}
		q.Set("status", string(s))
	}
	if err := checkLimit(*limit); err != nil {
		return err
	}
	rows, next, raw, err := a.pages(ctx, "/v1/plans", q, *limit, *cursor, *all, "plans")
	if err != nil {
		return err
	}
	if a.json() {
		return a.printPagesJSON("plans", rows, next, raw, *all)
	}
	now := a.now()
	t := newTable(a.stdout, "PLAN", "NAME", "STATUS", "PROGRESS", "TASKS", "OWNER", "CREATED", "FINISHED")
	for _, raw := range rows {
		var p httpapi.Plan
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("decode plan: %w", err)
		}
		t.row(cell(p.PlanID), cell(p.Name), cell(string(p.Status)), listProgress(p), strconv.Itoa(p.TotalTasks), cell(p.Owner),
			ago(p.CreatedAt, now), ago(p.FinishedAt, now))
	}
	if err := t.flush(); err != nil {
		return err
	}
	a.more(next, "plans")
	return nil
}

// listBarWidth is the width of a plan list's progress bar, in cells.
const listBarWidth = 10

// listProgress is a listed plan's progress from the counts the listing
// carries: "[#####.....] 5/10 done, 1 failed, 2 running" ("-" from a server
// that does not send counts in listings).
func listProgress(p httpapi.Plan) string {
	if p.Counts == nil {
		return "-"
	}
	c := p.Counts
	done := c[task.StatusCompleted] + c[task.StatusFailed] + c[task.StatusCancelled]
	s := fmt.Sprintf("%s %d/%d done", bar(done, p.TotalTasks, listBarWidth), done, p.TotalTasks)
	for _, st := range []task.Status{task.StatusFailed, task.StatusCancelled, task.StatusRunning, task.StatusPaused} {
		if n := c[st]; n > 0 {
			s += fmt.Sprintf(", %d %s", n, strings.ToLower(string(st)))
		}
	}
	return s
}

// more tells a table reader how to get the next page.
func (a *app) more(next, what string) {
	if next != "" {
		fmt.Fprintf(a.stderr, "more %s: add --cursor %s, or --all for every page\n", what, clean(next))
	}
}

// printPagesJSON prints a listing fetched by pages with -o json: the
// server's answer as it came for one page, or with --all every row under key
// and the last nextCursor.
func (a *app) printPagesJSON(key string, rows []json.RawMessage, next string, raw []byte, all bool) error {
	if !all {
		return printJSON(a.stdout, raw)
	}
	return printValue(a.stdout, map[string]any{key: rows, "nextCursor": next})
}

// pages GETs a listing (its items under key), one page or, with all, every
// page. It returns the items as the server sent them, the cursor after the
// last page read and that page as the server sent it.
func (a *app) pages(ctx context.Context, path string, q url.Values, limit int, cursor string, all bool, key string) ([]json.RawMessage, string, []byte, error) {
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	} else if all {
		q.Set("limit", strconv.Itoa(plan.LimitMax))
	}
	var out []json.RawMessage
	seen := map[string]bool{}
	for {
		var page struct {
			NextCursor string `json:"nextCursor"`
		}
		raw, err := a.cli.getJSON(ctx, path, q, &page)
		if err != nil {
			return nil, "", nil, err
		}
		var items map[string]json.RawMessage
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, "", nil, fmt.Errorf("GET %s: the answer is not a JSON object: %w", path, err)
		}
		if v, ok := items[key]; ok {
			if err := json.Unmarshal(v, &list); err != nil {
				return nil, "", nil, fmt.Errorf("GET %s: %s is not a list: %w", path, key, err)
			}
		}
		out = append(out, list...)
		// A filtered listing examines a bounded stretch a page and may
		// answer an empty page with more further on: read on to the first
		// rows or the end, rather than show an empty table and a cursor.
		if (!all && len(out) > 0) || page.NextCursor == "" {
			if out == nil {
				out = []json.RawMessage{}
			}
			return out, page.NextCursor, raw, nil
		}
		if seen[page.NextCursor] {
			return nil, "", nil, fmt.Errorf("GET %s: the server returned cursor %s twice", path, task.Quote(page.NextCursor))
		}
		seen[page.NextCursor] = true
		q.Set("cursor", page.NextCursor)
	}
}

func joinStatuses[S ~string](ss []S) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return strings.Join(out, ", ")
}

func (a *app) planTasks(ctx context.Context, fs *flag.FlagSet, args []string) error {
	status := fs.String("status", "", "only tasks in this status ("+joinStatuses(task.Statuses)+")")
	orphaned := fs.Bool("orphaned", false, "only orphaned tasks (RUNNING on an instance that stopped heartbeating)")
	limit := fs.Int("limit", 0, "page size (server default when 0; 1.."+strconv.Itoa(plan.LimitMax)+")")
	cursor := fs.String("cursor", "", "continue a listing from this cursor")
	all := fs.Bool("all", false, "follow the cursor to the last page")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	id, err := onePlanID(pos)
	if err != nil {
		return err
	}
	q := url.Values{}
	if *status != "" {
		s := task.Status(strings.ToUpper(*status))
		if parts := strings.Split(strings.ToUpper(*status), ","); len(parts) > 1 &&
			!slices.ContainsFunc(parts, func(p string) bool { return !task.Status(p).Valid() }) {
			return usagef("--status %s: plan tasks takes one status; for several, deployctl tasks --plan %s --status %s lists them (newest first)",
				task.Quote(*status), id, strings.Join(parts, ","))
		}
		if !s.Valid() {
			return usagef("--status %s is not a task status (%s)", task.Quote(*status), joinStatuses(task.Statuses))
		}
		if *orphaned && s != task.StatusRunning {
			// Both filters apply (an orphan is RUNNING): the list would be empty.
			return usagef("--orphaned lists RUNNING tasks: it cannot go with --status %s (list them one after the other, or use deployctl tasks --status %s --orphaned, which lists either)", s, s)
		}
		q.Set("status", string(s))
	}
	if *orphaned {
		q.Set("orphaned", "true")
	}
	if err := checkLimit(*limit); err != nil {
		return err
	}
	rows, next, raw, err := a.pages(ctx, planPath(id)+"/tasks", q, *limit, *cursor, *all, "tasks")
	if err != nil {
		return err
	}
	if a.json() {
		return a.printPagesJSON("tasks", rows, next, raw, *all)
	}
	t := a.taskTable()
	for _, raw := range rows {
		var tk httpapi.Task
		if err := json.Unmarshal(raw, &tk); err != nil {
			return fmt.Errorf("decode task: %w", err)
		}
		a.taskRow(t, tk, nil)
	}
	if err := t.flush(); err != nil {
		return err
	}
	a.more(next, "tasks")
	return nil
}

// planAction returns the command POSTing /v1/plans/{id}/{verb}.
func planAction(verb string) func(a *app, ctx context.Context, fs *flag.FlagSet, args []string) error {
	return func(a *app, ctx context.Context, fs *flag.FlagSet, args []string) error {
		reason := fs.String("reason", "", "why (required; recorded in the timeline and audit trail)")
		var orphans *bool
		if verb == "resume" {
			orphans = fs.Bool("include-orphaned", false, "also take over the plan's orphaned tasks from their checkpoints")
		}
		pos, err := a.parse(fs, args)
		if err != nil {
			return err
		}
		id, err := onePlanID(pos)
		if err != nil {
			return err
		}
		if err := checkReason(*reason); err != nil {
			return err
		}
		var body any = httpapi.ReasonRequest{Reason: *reason}
		if orphans != nil {
			body = httpapi.ResumePlanRequest{Reason: *reason, IncludeOrphaned: *orphans}
		}
		var p httpapi.Plan
		raw, err := a.cli.call(ctx, request{method: http.MethodPost, path: planPath(id) + "/" + verb, body: body}, &p)
		if err != nil {
			return err
		}
		if a.json() {
			return printJSON(a.stdout, raw)
		}
		return a.printPlan(p)
	}
}
