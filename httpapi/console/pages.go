package console

import (
	"context"
	"errors"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/parallel"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/tenantlock"
)

// feedCursor returns the feed's cursor now ("" when the feed cannot be
// read: the page then follows from the oldest event it gets).
func (c *Console) feedCursor(ctx context.Context) string {
	_, next, err := c.svc.Events(ctx, task.FeedFilter{After: "$", Limit: 1}, 0)
	if err != nil {
		return ""
	}
	return next
}

// fragment reports whether the request asks for the page's live parts only
// (the script refreshing it).
func fragment(r *http.Request) bool { return r.URL.Query().Get("fragment") == "1" }

// planRow is a plan in the plan list.
type planRow struct {
	facade.PlanView
	Bar bar
	// CountsErr says why the counts are missing.
	CountsErr string
}

type plansPage struct {
	frame
	Status  string
	Plans   []planRow
	Next    string
	Cursor  string
	Filters []plan.Status
}

// GET /ui/: plans, newest first, with their progress.
func (c *Console) plansPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := plan.ListFilter{Status: plan.Status(q.Get("status")), Cursor: q.Get("cursor"), Limit: PlansPageSize}
	if f.Status != "" && !f.Status.Valid() {
		c.renderError(w, r, nil, http.StatusBadRequest, "INVALID_ARGUMENT: "+task.Quote(string(f.Status))+" is not a plan status.")
		return
	}
	page := plansPage{frame: c.frame(r, "Plans"), Status: string(f.Status), Cursor: f.Cursor, Filters: plan.Statuses}
	page.Live = liveInfo{Kind: "plans", Cursor: c.feedCursor(r.Context())}
	views, next, err := c.svc.Plans(r.Context(), f)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	page.Next = next
	for _, v := range views {
		row := planRow{PlanView: v}
		if v.Counts == nil {
			// The listing does not count: read each plan (at most
			// PlansPageSize, one round trip each).
			full, err := c.svc.Plan(r.Context(), v.ID)
			if err != nil {
				_, code, _, _ := httpapi.Classify(err)
				row.CountsErr = code
			} else {
				row.PlanView = full
			}
		}
		row.Bar = newBar(row.Counts, row.TotalTasks)
		page.Plans = append(page.Plans, row)
	}
	page.Live.Fragment = r.URL.Path + "?" + withFragment(r)
	if fragment(r) {
		c.renderFragment(w, "plans", page)
		return
	}
	c.render(w, r, "plans", 0, page)
}

// withFragment returns the request's query with fragment=1 added.
func withFragment(r *http.Request) string {
	q := r.URL.Query()
	q.Del("tenant")
	q.Set("fragment", "1")
	return q.Encode()
}

// taskFilter is the plan page's filter of its tenants.
type taskFilter struct {
	Status   string
	Orphaned bool
	Prefix   string
	Cursor   string
	Page     int
}

func (f taskFilter) plan() plan.TaskFilter {
	return plan.TaskFilter{Status: task.Status(f.Status), Orphaned: f.Orphaned, TenantPrefix: f.Prefix, Cursor: f.Cursor, Limit: PageSize}
}

// Active reports whether the filter narrows the list.
func (f taskFilter) Active() bool { return f.Status != "" || f.Orphaned || f.Prefix != "" }

func readTaskFilter(get func(string) string) (taskFilter, error) {
	f := taskFilter{Status: get("status"), Orphaned: get("orphaned") == "1" || get("orphaned") == "true",
		Prefix: strings.TrimSpace(get("prefix")), Cursor: get("cursor")}
	if f.Status != "" && !task.Status(f.Status).Valid() {
		return f, wrapInvalid(task.Quote(f.Status) + " is not a task status")
	}
	if f.Prefix != "" && !task.ValidTenantID(f.Prefix) {
		return f, wrapInvalid("tenant prefix " + task.Quote(f.Prefix) + " cannot start a tenant id (letters, digits, '.', '_', '-')")
	}
	if n := get("page"); n != "" {
		for _, ch := range n {
			if ch < '0' || ch > '9' || len(n) > 6 {
				return f, wrapInvalid("page " + task.Quote(n) + " is not a number")
			}
			f.Page = f.Page*10 + int(ch-'0')
		}
	}
	f.Page = max(f.Page, 1)
	return f, nil
}

func wrapInvalid(msg string) error { return errors.Join(facade.ErrInvalid, errors.New(msg)) }

type planPage struct {
	frame
	Plan     facade.PlanView
	Bar      bar
	Filter   taskFilter
	Tasks    []facade.TaskView
	Next     string
	Stages   []string
	Statuses []task.Status
	// NextQuery and FirstQuery are the links of the pager ("?" and the
	// query, encoded here: a plain string would be escaped again by the
	// template, as a query value).
	NextQuery, FirstQuery template.URL
}

// GET /ui/plans/{planId}: counts, settings and one page of tenants.
func (c *Console) planPage(w http.ResponseWriter, r *http.Request) {
	planID := chi.URLParam(r, "planId")
	if !plan.ValidID(planID) {
		c.renderError(w, r, nil, http.StatusBadRequest, "INVALID_ARGUMENT: "+task.Quote(planID)+" is not a plan id.")
		return
	}
	q := r.URL.Query()
	f, err := readTaskFilter(q.Get)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	cursor := c.feedCursor(r.Context())
	pv, err := c.svc.Plan(r.Context(), planID)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	page := planPage{frame: c.frame(r, "Plan "+pv.Name), Plan: pv, Bar: newBar(pv.Counts, pv.TotalTasks), Filter: f,
		Stages: pv.StageNames(), Statuses: task.Statuses}
	page.Live = liveInfo{Kind: "plan", PlanID: planID, Cursor: cursor, Fragment: r.URL.Path + "?" + withFragment(r)}
	if fragment(r) {
		// Only the rows of the tenants asked for (those on the page that
		// changed), and the counts.
		ids := slices.Compact(slices.Sorted(slices.Values(q["tenant"])))
		if len(ids) > PageSize {
			ids = ids[:PageSize]
		}
		for _, id := range ids {
			if !task.ValidTenantID(id) {
				c.fail(w, r, wrapInvalid("tenant "+task.Quote(id)+" is not a tenant id"))
				return
			}
		}
		if len(ids) > 0 {
			byTenant, err := c.svc.TasksByTenant(r.Context(), ids)
			if err != nil {
				c.fail(w, r, err)
				return
			}
			for _, id := range ids {
				// A tenant's current task may belong to a newer plan: its
				// row here stays as it was.
				if tv, ok := byTenant[id]; ok && tv.PlanID == planID {
					page.Tasks = append(page.Tasks, tv)
				}
			}
		}
		c.renderFragment(w, "plan", page)
		return
	}
	tasks, next, err := c.svc.PlanTasks(r.Context(), planID, f.plan())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	page.Tasks, page.Next = tasks, next
	if next != "" {
		nq := r.URL.Query()
		nq.Set("cursor", next)
		nq.Set("page", strconv.Itoa(f.Page+1))
		page.NextQuery = template.URL("?" + nq.Encode())
	}
	if f.Cursor != "" {
		fq := r.URL.Query()
		fq.Del("cursor")
		fq.Del("page")
		page.FirstQuery = template.URL("?" + fq.Encode())
	}
	c.render(w, r, "plan", 0, page)
}

type tenantPage struct {
	frame
	TenantID string
	Task     *facade.TaskView
	Plan     *facade.PlanView
	Timeline []task.Event
	History  []facade.TaskView
	Lock     *tenantlock.Info
	// Stages the retry may start from: those the checkpoint covers and the
	// one after them.
	RetryStages []string
	Checkpoint  *checkpoint.Checkpoint
	// Errs says which parts could not be read, and why.
	Errs []string
}

// GET /ui/tenants/{tenantId}: the current task, its checkpoint, timeline,
// history and lock, with the actions on them.
func (c *Console) tenantPage(w http.ResponseWriter, r *http.Request) {
	tenantID := chi.URLParam(r, "tenantId")
	if !task.ValidTenantID(tenantID) {
		c.renderError(w, r, nil, http.StatusBadRequest, "INVALID_ARGUMENT: "+task.Quote(tenantID)+" is not a tenant id.")
		return
	}
	ctx := r.Context()
	page := tenantPage{frame: c.frame(r, "Tenant "+tenantID), TenantID: tenantID}
	page.Live = liveInfo{Kind: "tenant", TenantID: tenantID, Cursor: c.feedCursor(ctx), Fragment: r.URL.Path + "?" + withFragment(r)}
	status := http.StatusOK
	tv, err := c.svc.TaskByTenant(ctx, tenantID)
	switch {
	case errors.Is(err, facade.ErrNotFound):
		status = http.StatusNotFound
	case err != nil:
		c.fail(w, r, err)
		return
	default:
		page.Task, page.Checkpoint = &tv, tv.Checkpoint
	}
	// The plan, timeline, history and lock do not depend on each other:
	// read at once, they cost the page one round trip of Redis' latency
	// instead of four (468 ms at 50 ms round trips, measured).
	var (
		pv                     facade.PlanView
		tl                     facade.TimelineView
		hist                   []facade.TaskView
		li                     tenantlock.Info
		pErr, tErr, hErr, lErr error
	)
	reads := []func(){
		func() { hist, hErr = c.svc.History(ctx, tenantID, 20) },
		func() { li, lErr = c.svc.Lock(ctx, tenantID) },
	}
	if page.Task != nil {
		reads = append(reads,
			func() { pv, pErr = c.svc.Plan(ctx, tv.PlanID) },
			func() { tl, tErr = c.svc.Timeline(ctx, tenantID, 0) })
	}
	parallel.All(reads...)
	if page.Task != nil {
		if pErr == nil {
			page.Plan = &pv
			page.RetryStages = retryStages(pv.StageNames(), tv.Checkpoint)
		}
		if tErr == nil {
			page.Timeline = tl.Events
		} else if !errors.Is(tErr, facade.ErrNotFound) {
			page.Errs = append(page.Errs, "timeline: "+errText(tErr))
		}
	}
	if hErr == nil {
		page.History = hist
	} else {
		page.Errs = append(page.Errs, "history: "+errText(hErr))
	}
	if lErr == nil {
		page.Lock = &li
	} else {
		page.Errs = append(page.Errs, "lock: "+errText(lErr))
	}
	if fragment(r) {
		c.renderFragment(w, "tenant", page)
		return
	}
	c.render(w, r, "tenant", status, page)
}

// retryStages are the stages a retry may start from: the checkpoint's
// completed stages and the first stage after them.
func retryStages(stages []string, ck *checkpoint.Checkpoint) []string {
	n := 1
	if ck != nil {
		n = ck.LastCompletedStageIndex + 2
	}
	return stages[:min(max(n, 1), len(stages))]
}

type instancesPage struct {
	frame
	Instances []facade.InstanceView
}

// GET /ui/instances: the instances seen lately, live or not.
func (c *Console) instancesPage(w http.ResponseWriter, r *http.Request) {
	page := instancesPage{frame: c.frame(r, "Instances")}
	page.Live = liveInfo{Kind: "instances", Fragment: r.URL.Path + "?" + withFragment(r)}
	insts, err := c.svc.Instances(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	page.Instances = insts
	if fragment(r) {
		c.renderFragment(w, "instances", page)
		return
	}
	c.render(w, r, "instances", 0, page)
}

type searchPage struct {
	frame
	Message string
}

// GET /ui/search?q=: jumps to the tenant, plan or task named.
func (c *Console) search(w http.ResponseWriter, r *http.Request) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	switch {
	case plan.ValidID(q):
		http.Redirect(w, r, c.root+"plans/"+q, http.StatusSeeOther)
		return
	case task.ValidID(q):
		tv, err := c.svc.Task(r.Context(), q)
		if err == nil {
			http.Redirect(w, r, c.root+"tenants/"+tv.TenantID, http.StatusSeeOther)
			return
		}
		if !errors.Is(err, facade.ErrNotFound) {
			c.fail(w, r, err)
			return
		}
	case task.ValidTenantID(q):
		http.Redirect(w, r, c.root+"tenants/"+q, http.StatusSeeOther)
		return
	}
	page := searchPage{frame: c.frame(r, "Search")}
	page.Query = q
	page.Message = "Nothing found: type a tenant id (like t-042), a plan id (plan-…) or a task id (task-…)."
	status := http.StatusNotFound
	if q != "" && !task.ValidID(q) {
		status = http.StatusBadRequest
	}
	c.render(w, r, "search", status, page)
}

// errText is what a page says of an error that is not the page's own.
func errText(err error) string {
	_, code, detail, _ := httpapi.Classify(err)
	return code + ": " + detail
}
