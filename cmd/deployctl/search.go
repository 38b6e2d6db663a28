package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// statusList is a repeatable --status flag that also takes a comma list.
type statusList []task.Status

func (s *statusList) String() string { return joinStatuses(*s) }

func (s *statusList) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		st := task.Status(strings.ToUpper(strings.TrimSpace(p)))
		if !st.Valid() {
			return fmt.Errorf("%s is not a task status (%s)", task.Quote(p), joinStatuses(task.Statuses))
		}
		for _, seen := range *s {
			if seen == st {
				return fmt.Errorf("%s is given twice", st)
			}
		}
		*s = append(*s, st)
	}
	return nil
}

// tasks searches tasks across plans: GET /v1/tasks.
func (a *app) tasks(ctx context.Context, fs *flag.FlagSet, args []string) error {
	var statuses statusList
	fs.Var(&statuses, "status", "tasks in this status; repeat it or give a comma list ("+joinStatuses(task.Statuses)+")")
	orphaned := fs.Bool("orphaned", false, "also orphaned tasks (RUNNING on an instance that stopped heartbeating)")
	longer := fs.Duration("running-longer-than", 0, "also tasks whose current stage has run on a live instance for longer than this (10m)")
	planID := fs.String("plan", "", "only the tasks of this plan")
	stageName := fs.String("stage", "", "only tasks at this stage")
	since := fs.String("since", "", "only tasks that entered their status since this RFC 3339 time or this long ago (1h)")
	limit := fs.Int("limit", 0, "page size (server default when 0; 1.."+strconv.Itoa(plan.LimitMax)+")")
	cursor := fs.String("cursor", "", "continue a search from this cursor")
	all := fs.Bool("all", false, "follow the cursor to the last page")
	if err := a.parseNoArgs(fs, args); err != nil {
		return err
	}
	q := url.Values{}
	if len(statuses) > 0 {
		q.Set("status", joinStatusList(statuses))
	}
	if *orphaned {
		q.Set("orphaned", "true")
	}
	if *longer < 0 {
		return usagef("--running-longer-than must be positive")
	}
	if *longer > 0 {
		q.Set("runningLongerThan", longer.String())
	}
	if *planID != "" {
		if !plan.ValidID(*planID) {
			return usagef("--plan %s is not a plan id", task.Quote(*planID))
		}
		q.Set("planId", *planID)
	}
	if *stageName != "" {
		if !task.ValidStageName(*stageName) {
			return usagef("--stage %s is not a stage name", task.Quote(*stageName))
		}
		q.Set("stage", *stageName)
	}
	if *since != "" {
		at, err := a.sinceTime(*since)
		if err != nil {
			return err
		}
		q.Set("since", at.UTC().Format(time.RFC3339Nano))
	}
	if err := checkLimit(*limit); err != nil {
		return err
	}
	rows, next, raw, err := a.pages(ctx, "/v1/tasks", q, *limit, *cursor, *all, "tasks")
	if err != nil {
		return err
	}
	if a.json() {
		return a.printPagesJSON("tasks", rows, next, raw, *all)
	}
	now := a.now()
	t := newTable(a.stdout, "TENANT", "PLAN", "STATUS", "STAGE", "IN STAGE", "ATTEMPT", "OWNER", "UPDATED", "TASK", "ERROR")
	for _, raw := range rows {
		var tk httpapi.Task
		if err := json.Unmarshal(raw, &tk); err != nil {
			return fmt.Errorf("decode task: %w", err)
		}
		inStage := "-"
		if tk.Status == task.StatusRunning && tk.StageStartedAt != nil {
			inStage = now.Sub(*tk.StageStartedAt).Truncate(time.Second).String()
		}
		t.row(cell(tk.TenantID), cell(tk.PlanID), taskStatus(tk), stageText(tk), inStage, strconv.Itoa(tk.Attempt),
			cell(tk.Owner), ago(tk.UpdatedAt, now), cell(tk.TaskID), cell(tk.LastError))
	}
	if err := t.flush(); err != nil {
		return err
	}
	a.more(next, "tasks")
	return nil
}

// sinceTime reads --since: an RFC 3339 time, or a duration back from now.
func (a *app) sinceTime(s string) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, usagef("--since %s: a duration must be positive", task.Quote(s))
		}
		return a.now().Add(-d), nil
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usagef("--since %s: want an RFC 3339 time (2026-11-25T01:00:00Z) or a duration (1h)", task.Quote(s))
	}
	return at, nil
}

func joinStatusList(ss []task.Status) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return strings.Join(out, ",")
}
