package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/plan"
)

// Version is deployctl's version, set at build time with
// -ldflags "-X main.Version=...".
var Version = "dev"

// version prints deployctl's version and those of the instances the server
// knows (GET /v1/instances); a server that does not answer is a warning.
func (a *app) version(ctx context.Context, fs *flag.FlagSet, args []string) error {
	if err := a.parseNoArgs(fs, args); err != nil {
		return err
	}
	var list httpapi.InstanceList
	raw, err := a.cli.getJSON(ctx, "/v1/instances", nil, &list)
	if a.json() {
		out := map[string]any{"deployctl": Version}
		if err == nil {
			out["instances"] = json.RawMessage(raw)
		}
		return printValue(a.stdout, out)
	}
	fmt.Fprintf(a.stdout, "deployctl  %s\n", clean(Version))
	if err != nil {
		fmt.Fprintf(a.stderr, "warning: the server's version is unknown: %s\n", clean(err.Error()))
		return nil
	}
	for _, in := range list.Instances {
		if in.Alive {
			fmt.Fprintf(a.stdout, "server     %s (instance %s)\n", cell(in.Version), cell(in.ID))
		}
	}
	return nil
}

// instances lists the coordinator instances.
func (a *app) instances(ctx context.Context, fs *flag.FlagSet, args []string) error {
	if err := a.parseNoArgs(fs, args); err != nil {
		return err
	}
	var list httpapi.InstanceList
	raw, err := a.cli.getJSON(ctx, "/v1/instances", nil, &list)
	if err != nil {
		return err
	}
	if a.json() {
		return printJSON(a.stdout, raw)
	}
	now := a.now()
	t := newTable(a.stdout, "INSTANCE", "ALIVE", "ADDR", "VERSION", "LAYOUT", "RUNNING", "LAST SEEN", "STARTED", "MODE")
	for _, in := range list.Instances {
		alive, mode, layout := "no", "shared", "-"
		if in.Alive {
			alive = "yes"
		}
		if in.SingleInstance {
			mode = "single-instance"
		}
		if in.StorageLayout > 0 {
			layout = strconv.Itoa(in.StorageLayout)
		}
		t.row(cell(in.ID), alive, cell(in.Addr), cell(in.Version), layout, strconv.Itoa(in.TasksRunning), ago(in.LastSeen, now), ago(in.StartedAt, now), mode)
	}
	return t.flush()
}

// history lists a tenant's tasks, newest first.
func (a *app) history(ctx context.Context, fs *flag.FlagSet, args []string) error {
	tenant := fs.String("tenant", "", "tenant id (required)")
	limit := fs.Int("limit", 0, "how many tasks (server default when 0; 1.."+strconv.Itoa(plan.LimitMax)+")")
	if err := a.parseTenant(fs, args, tenant); err != nil {
		return err
	}
	if err := checkLimit(*limit); err != nil {
		return err
	}
	q := url.Values{}
	if *limit > 0 {
		q.Set("limit", strconv.Itoa(*limit))
	}
	var h httpapi.History
	raw, err := a.cli.getJSON(ctx, tenantPath(*tenant, "history"), q, &h)
	if err != nil {
		return err
	}
	if a.json() {
		return printJSON(a.stdout, raw)
	}
	t := newTable(a.stdout, "TASK", "PLAN", "STATUS", "STAGE", "ATTEMPT", "UPDATED", "ERROR")
	now := a.now()
	for _, tk := range h.Tasks {
		t.row(cell(tk.TaskID), cell(tk.PlanID), taskStatus(tk), stageText(tk), strconv.Itoa(tk.Attempt), ago(tk.UpdatedAt, now), cell(tk.LastError))
	}
	return t.flush()
}

// checkpoint shows the checkpoint of a tenant's current task, with its
// context data.
func (a *app) checkpoint(ctx context.Context, fs *flag.FlagSet, args []string) error {
	tenant := fs.String("tenant", "", "tenant id (required)")
	if err := a.parseTenant(fs, args, tenant); err != nil {
		return err
	}
	var ck httpapi.Checkpoint
	raw, err := a.cli.getJSON(ctx, tenantPath(*tenant, "checkpoint"), nil, &ck)
	if err != nil {
		return err
	}
	if a.json() {
		return printJSON(a.stdout, raw)
	}
	t := newTable(a.stdout)
	t.row("TENANT", cell(ck.TenantID))
	t.row("COMPLETED", cell(strings.Join(ck.CompletedStages, ", ")))
	if len(ck.SkippedStages) > 0 {
		t.row("SKIPPED", cell(strings.Join(ck.SkippedStages, ", ")))
	}
	t.row("ATTEMPT", strconv.Itoa(ck.Attempt))
	t.row("FENCE", strconv.FormatInt(ck.Fence, 10))
	saved := "-"
	if ck.SavedAt != nil {
		saved = ago(ck.SavedAt, a.now()) + " (" + ck.SavedAt.UTC().Format(time.RFC3339) + ")"
	}
	t.row("SAVED", saved)
	keys := make([]string, 0, len(ck.ContextData))
	for k := range ck.ContextData {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b, _ := json.Marshal(ck.ContextData[k])
		t.row("DATA "+cell(k), cell(string(b)))
	}
	return t.flush()
}
