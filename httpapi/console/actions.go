package console

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Every action is a form POST carrying the session's CSRF token and a
// reason. The ones that touch many tenants, or cannot be undone, first
// answer a confirmation page saying what would happen (a dry run), whose
// form sends the same fields again with confirm=yes. The real action then
// redirects (303) to the page it was made from, with a flash message.

// confirmPage asks to confirm an action after its dry run.
type confirmPage struct {
	frame
	Heading string
	Lines   []string
	Items   []confirmItem
	More    int
	Hidden  []field
	Action  string
	Button  string
	Back    string
	// Nothing is set when the action would touch nothing: no button then.
	Nothing bool
}

type confirmItem struct{ Label, Detail string }

type field struct{ Name, Value string }

// maxListed is how many tenants a confirmation page lists by name.
const maxListed = 50

func confirmed(r *http.Request) bool { return r.PostForm.Get("confirm") == "yes" }

// hiddenFields returns the form's fields to send again, with confirm=yes.
func hiddenFields(r *http.Request, skip ...string) []field {
	out := []field{{"confirm", "yes"}}
	for _, k := range sortedKeys(r.PostForm) {
		// The confirmation page's form carries the session's CSRF token
		// itself.
		if k == "confirm" || k == "csrf" || slices.Contains(skip, k) {
			continue
		}
		for _, v := range r.PostForm[k] {
			out = append(out, field{k, v})
		}
	}
	return out
}

// done redirects to back with a flash message saying what happened.
func (c *Console) done(w http.ResponseWriter, r *http.Request, back, msg string) {
	c.setFlash(w, r, "ok", msg)
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// back is where an action returns: the page it was sent from (its form's
// "back" field, a console page), or def.
func (c *Console) back(r *http.Request, def string) string {
	if b := r.PostForm.Get("back"); b != "" {
		return c.localNext(b)
	}
	return def
}

// retryMode reads the form's retry mode: from the checkpoint (default),
// from the start, or from a stage.
func retryMode(r *http.Request) (fromCheckpoint *bool, fromStage, label string, err error) {
	switch mode := r.PostForm.Get("mode"); mode {
	case "", "checkpoint":
		return nil, "", "from its checkpoint", nil
	case "start":
		f := false
		return &f, "", "from the first stage (checkpoint reset)", nil
	case "stage":
		st := r.PostForm.Get("stage")
		if !task.ValidStageName(st) {
			return nil, "", "", wrapInvalid("choose the stage to retry from")
		}
		return nil, st, "from stage " + st, nil
	default:
		return nil, "", "", wrapInvalid("mode " + task.Quote(mode) + " is not a retry mode")
	}
}

// POST /ui/plans/{planId}/retry: retry the plan's failed tenants, its
// orphaned ones, the ones selected, or all that match the page's filter.
func (c *Console) retryPlan(w http.ResponseWriter, r *http.Request) {
	planID := chi.URLParam(r, "planId")
	reason := r.PostForm.Get("reason")
	httpapi.AuditAction(r, planID, "", reason)
	if !plan.ValidID(planID) {
		c.fail(w, r, wrapInvalid(task.Quote(planID)+" is not a plan id"))
		return
	}
	fromCkpt, fromStage, modeLabel, err := retryMode(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	req := facade.PlanRetryRequest{FromCheckpoint: fromCkpt, FromStage: fromStage, Reason: reason}
	retryable := []task.Status{task.StatusFailed, task.StatusPaused, task.StatusCancelled}
	scope := r.PostForm.Get("scope")
	if scope == "selected" && r.PostForm.Get("all") == "1" {
		scope = "matching"
	}
	var what string
	switch scope {
	case "failed":
		req.Statuses, what = []task.Status{task.StatusFailed}, "failed tenants"
	case "orphaned":
		req.Orphaned, what = true, "orphaned tenants"
	case "selected", "frozen":
		ids := r.PostForm["tenant"]
		if len(ids) == 0 {
			c.fail(w, r, wrapInvalid("no tenant selected: tick the tenants to retry, or \"select all matching\""))
			return
		}
		req.Statuses, req.Orphaned, req.Tenants, what = retryable, true, ids, "selected tenants"
	case "matching":
		f, err := readTaskFilter(r.PostForm.Get)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		ids, err := c.matching(r, planID, f)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		req.Statuses, req.Orphaned, req.Tenants, what = retryable, true, ids, "tenants matching the filter"
		if len(ids) == 0 {
			req.Tenants = []string{}
		}
	default:
		c.fail(w, r, wrapInvalid("scope "+task.Quote(scope)+" is not failed, orphaned, selected or matching"))
		return
	}
	back := c.back(r, c.root+"plans/"+planID)
	page := confirmPage{frame: c.frame(r, "Confirm retry"), Action: c.root + "plans/" + planID + "/retry", Back: back}
	if req.Tenants != nil && len(req.Tenants) == 0 {
		if confirmed(r) {
			c.done(w, r, back, "Nothing to retry.")
			return
		}
		page.Heading, page.Nothing = "No tenant matches the filter: nothing to retry.", true
		c.render(w, r, "confirm", 0, page)
		return
	}
	expect := r.PostForm.Get("expect")
	if confirmed(r) && expect == "" {
		res, err := c.svc.RetryPlan(r.Context(), planID, req, actor(r))
		if err != nil {
			c.fail(w, r, err)
			return
		}
		c.done(w, r, back, retrySummary(res))
		return
	}
	dry := req
	dry.DryRun = true
	res, err := c.svc.RetryPlan(r.Context(), planID, dry, actor(r))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	n := len(res.Retried)
	var changed string
	if confirmed(r) {
		// A confirmation of a large selection: act only if the selection
		// is still the one the person saw, and then on exactly its tenants.
		if selectionDigest(res.Retried) == expect {
			res, err := c.retryInChunks(r, planID, req, res.Retried)
			if err != nil {
				c.fail(w, r, err)
				return
			}
			c.done(w, r, back, retrySummary(res))
			return
		}
		changed = "The selection changed since the dry run you confirmed (tenants failed, were retried or finished meanwhile): nothing was retried. Here is the dry run again."
	}
	page.Heading = fmt.Sprintf("Retry %d %s of plan %s?", n, what, planID)
	page.Lines = []string{
		fmt.Sprintf("Dry run: %d selected, %d would be retried %s, %d would be skipped. Nothing has changed yet.", res.Selected, n, modeLabel, len(res.Skipped)),
		"Reason: " + reason,
	}
	if changed != "" {
		page.Lines = append([]string{changed}, page.Lines...)
	}
	for i, id := range res.Retried {
		if i == maxListed {
			page.More = n - maxListed
			break
		}
		page.Items = append(page.Items, confirmItem{Label: id, Detail: "would be retried"})
	}
	for i, sk := range res.Skipped {
		if i == maxListed {
			break
		}
		page.Items = append(page.Items, confirmItem{Label: sk.TenantID, Detail: "skipped: " + errText(sk.Err)})
	}
	switch {
	case n == 0:
		page.Nothing = true
	case n > maxFrozen && scope != "selected" && scope != "frozen":
		// Too many to name in the form (Go reads at most 10 000 form
		// fields, the console 1 MiB of them, the facade takes 10 000
		// tenants a call): the form sends the selection again with a
		// digest of the dry run's tenants, and the confirmation retries
		// exactly those, if they are still the ones selected.
		page.Hidden = []field{{"confirm", "yes"}, {"scope", scope}, {"reason", reason}, {"back", back},
			{"mode", r.PostForm.Get("mode")}, {"stage", r.PostForm.Get("stage")},
			{"status", r.PostForm.Get("status")}, {"orphaned", r.PostForm.Get("orphaned")}, {"prefix", r.PostForm.Get("prefix")},
			{"expect", selectionDigest(res.Retried)}}
	default:
		// Confirm exactly the tenants of the dry run.
		page.Hidden = []field{{"confirm", "yes"}, {"scope", "frozen"}, {"reason", reason}, {"back", back},
			{"mode", r.PostForm.Get("mode")}, {"stage", r.PostForm.Get("stage")}}
		for _, id := range res.Retried {
			page.Hidden = append(page.Hidden, field{"tenant", id})
		}
	}
	if n > 0 {
		page.Button = fmt.Sprintf("Retry %d tenants", n)
		if n == 1 {
			page.Button = "Retry 1 tenant"
		}
	}
	c.render(w, r, "confirm", 0, page)
}

// maxFrozen is the most tenants a bulk retry's confirmation names in its
// form; a larger selection is confirmed by a digest of its tenants
// (selectionDigest), checked against a new dry run.
const maxFrozen = 1000

// selectionDigest identifies the tenants of a dry run, in order, so that a
// confirmation can tell whether the selection is still the one shown.
func selectionDigest(ids []string) string {
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("%d-%x", len(ids), h.Sum(nil)[:16])
}

// retryInChunks retries exactly the tenants ids of the selection req, at
// most facade.MaxBulkTenants a call, and adds the answers up. After a
// failed call it returns what the earlier calls did, with the error said
// in the summary's place (some tenants were retried already).
func (c *Console) retryInChunks(r *http.Request, planID string, req facade.PlanRetryRequest, ids []string) (facade.PlanRetryResult, error) {
	total := facade.PlanRetryResult{PlanID: planID, Retried: []string{}, Skipped: []facade.RetrySkip{}}
	for len(ids) > 0 {
		k := min(len(ids), facade.MaxBulkTenants)
		one := req
		one.DryRun, one.Tenants = false, ids[:k]
		res, err := c.svc.RetryPlan(r.Context(), planID, one, actor(r))
		if err != nil {
			if total.Selected == 0 {
				return total, err
			}
			total.Selected += len(ids)
			for _, id := range ids {
				total.Skipped = append(total.Skipped, facade.RetrySkip{TenantID: id, Err: err})
			}
			return total, nil
		}
		total.Selected += res.Selected
		total.Retried = append(total.Retried, res.Retried...)
		total.Skipped = append(total.Skipped, res.Skipped...)
		total.NotSelected = append(total.NotSelected, res.NotSelected...)
		ids = ids[k:]
	}
	return total, nil
}

// matching lists the tenants of the plan that the filter selects, across
// pages, up to facade.MaxBulkTenants.
func (c *Console) matching(r *http.Request, planID string, f taskFilter) ([]string, error) {
	pf := f.plan()
	pf.Cursor, pf.Limit = "", plan.LimitMax
	ids := []string{}
	for {
		ts, next, err := c.svc.PlanTasks(r.Context(), planID, pf)
		if err != nil {
			return nil, err
		}
		for _, tv := range ts {
			ids = append(ids, tv.TenantID)
		}
		if len(ids) > facade.MaxBulkTenants {
			return nil, wrapInvalid(fmt.Sprintf("more than %d tenants match: narrow the filter", facade.MaxBulkTenants))
		}
		if next == "" {
			return ids, nil
		}
		pf.Cursor = next
	}
}

// retrySummary says what a bulk retry did.
func retrySummary(res facade.PlanRetryResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Retried %d of %d selected tenants.", len(res.Retried), res.Selected)
	if len(res.Skipped) > 0 {
		fmt.Fprintf(&b, " Skipped %d:", len(res.Skipped))
		for i, sk := range res.Skipped {
			if i == 10 {
				fmt.Fprintf(&b, " and %d more", len(res.Skipped)-10)
				break
			}
			_, code, _, _ := httpapi.Classify(sk.Err)
			fmt.Fprintf(&b, " %s (%s)", sk.TenantID, code)
		}
		b.WriteString(".")
	}
	return b.String()
}

// POST /ui/plans/{planId}/pause|resume|cancel. Cancel asks first.
func (c *Console) planAction(w http.ResponseWriter, r *http.Request) {
	planID, action := chi.URLParam(r, "planId"), chi.URLParam(r, "action")
	reason := r.PostForm.Get("reason")
	httpapi.AuditAction(r, planID, "", reason)
	back := c.back(r, c.root+"plans/"+planID)
	if action == "cancel" && !confirmed(r) {
		pv, err := c.svc.Plan(r.Context(), planID)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		page := confirmPage{frame: c.frame(r, "Confirm cancel"), Action: c.root + "plans/" + planID + "/cancel", Back: back,
			Heading: fmt.Sprintf("Cancel plan %s (%s)?", pv.Name, planID),
			Lines: []string{
				fmt.Sprintf("%d tasks have not finished: the pending ones will not start, the running ones stop after their current stage. This cannot be undone (failed and cancelled tenants can still be retried one by one).", pv.Counts.Active()),
				"Reason: " + reason,
			},
			Hidden: hiddenFields(r), Button: "Cancel the plan"}
		c.render(w, r, "confirm", 0, page)
		return
	}
	var (
		pv  facade.PlanView
		err error
	)
	switch action {
	case "pause":
		pv, err = c.svc.PausePlan(r.Context(), planID, reason, actor(r))
	case "resume":
		pv, err = c.svc.ResumePlan(r.Context(), planID, facade.ResumeOptions{Reason: reason, IncludeOrphaned: r.PostForm.Get("includeOrphaned") == "1"}, actor(r))
	case "cancel":
		pv, err = c.svc.CancelPlan(r.Context(), planID, reason, actor(r))
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.done(w, r, back, fmt.Sprintf("Plan %s is %s.", pv.Name, pv.Status))
}

// POST /ui/tenants/{tenantId}/retry: a dry run first, then the retry.
func (c *Console) retryTenant(w http.ResponseWriter, r *http.Request) {
	tenantID := chi.URLParam(r, "tenantId")
	reason := r.PostForm.Get("reason")
	httpapi.AuditAction(r, "", tenantID, reason)
	fromCkpt, fromStage, modeLabel, err := retryMode(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	req := facade.RetryRequest{FromCheckpoint: fromCkpt, FromStage: fromStage, Reason: reason}
	if s := r.PostForm.Get("expectedAttempt"); s != "" {
		if req.ExpectedAttempt, err = strconv.Atoi(s); err != nil {
			c.fail(w, r, wrapInvalid("expectedAttempt "+task.Quote(s)+" is not a number"))
			return
		}
	}
	back := c.back(r, c.root+"tenants/"+tenantID)
	if confirmed(r) {
		res, err := c.svc.Retry(r.Context(), tenantID, req, actor(r))
		if err != nil {
			c.fail(w, r, err)
			return
		}
		msg := fmt.Sprintf("Retry accepted: tenant %s runs %s.", tenantID, strings.Join(res.WouldRun, ", "))
		switch {
		case res.Task != nil && res.Task.Status == task.StatusPending:
			// Shared plans: queued for whichever instance has room.
			msg = fmt.Sprintf("Retry accepted: tenant %s, attempt %d, queued to run %s: the first instance with room in the plan starts it.",
				tenantID, res.Task.Attempt, strings.Join(res.WouldRun, ", "))
		case res.Task != nil:
			msg = fmt.Sprintf("Retry accepted: tenant %s, attempt %d, runs %s.", tenantID, res.Task.Attempt, strings.Join(res.WouldRun, ", "))
		}
		c.done(w, r, back, msg)
		return
	}
	req.DryRun = true
	res, err := c.svc.Retry(r.Context(), tenantID, req, actor(r))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	page := confirmPage{frame: c.frame(r, "Confirm retry"), Action: c.root + "tenants/" + tenantID + "/retry", Back: back,
		Heading: fmt.Sprintf("Retry tenant %s %s?", tenantID, modeLabel),
		Lines: []string{
			"Dry run: these stages would run, in order. Nothing has changed yet.",
			"Reason: " + reason,
		},
		Hidden: hiddenFields(r), Button: "Retry " + tenantID}
	for _, st := range res.WouldRun {
		page.Items = append(page.Items, confirmItem{Label: st, Detail: "would run"})
	}
	if len(res.WouldRun) == 0 {
		page.Items = append(page.Items, confirmItem{Label: "(no stage)", Detail: "every stage is done: the retry would only complete the task"})
	}
	c.render(w, r, "confirm", 0, page)
}

// POST /ui/tenants/{tenantId}/pause|resume|cancel. Cancel asks first.
func (c *Console) taskAction(w http.ResponseWriter, r *http.Request) {
	tenantID, action := chi.URLParam(r, "tenantId"), chi.URLParam(r, "action")
	reason := r.PostForm.Get("reason")
	httpapi.AuditAction(r, "", tenantID, reason)
	back := c.back(r, c.root+"tenants/"+tenantID)
	if action == "cancel" && !confirmed(r) {
		page := confirmPage{frame: c.frame(r, "Confirm cancel"), Action: c.root + "tenants/" + tenantID + "/cancel", Back: back,
			Heading: fmt.Sprintf("Cancel the task of tenant %s?", tenantID),
			Lines:   []string{"A running task stops after its current stage. It can be retried later.", "Reason: " + reason},
			Hidden:  hiddenFields(r), Button: "Cancel the task"}
		c.render(w, r, "confirm", 0, page)
		return
	}
	var (
		tv  facade.TaskView
		err error
	)
	switch action {
	case "pause":
		tv, err = c.svc.PauseTask(r.Context(), tenantID, reason, actor(r))
	case "resume":
		tv, err = c.svc.ResumeTask(r.Context(), tenantID, reason, actor(r))
	case "cancel":
		tv, err = c.svc.CancelTask(r.Context(), tenantID, reason, actor(r))
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	msg := fmt.Sprintf("Tenant %s: task is %s.", tenantID, tv.Status)
	if tv.PauseRequested || tv.CancelRequested {
		msg = fmt.Sprintf("Tenant %s: %s requested; the running stage finishes first.", tenantID, action)
	}
	c.done(w, r, back, msg)
}

// POST /ui/tenants/{tenantId}/lock/release: break glass, with the fence the
// operator saw and a reason, after a confirmation.
func (c *Console) releaseLock(w http.ResponseWriter, r *http.Request) {
	tenantID := chi.URLParam(r, "tenantId")
	reason := r.PostForm.Get("reason")
	httpapi.AuditAction(r, "", tenantID, reason)
	fence, err := strconv.ParseInt(r.PostForm.Get("fence"), 10, 64)
	if err != nil || fence <= 0 {
		c.fail(w, r, wrapInvalid("the lock's fence as seen is required"))
		return
	}
	back := c.back(r, c.root+"tenants/"+tenantID)
	if !confirmed(r) {
		li, err := c.svc.Lock(r.Context(), tenantID)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		page := confirmPage{frame: c.frame(r, "Confirm lock release"), Action: c.root + "tenants/" + tenantID + "/lock/release", Back: back,
			Heading: fmt.Sprintf("Break the lock of tenant %s (fence %d)?", tenantID, fence),
			Lines: []string{
				"Break glass: the holder loses the tenant at its next lease renewal and stops without writing; its task then shows orphaned until someone retries it.",
				"The lock is released only if its fence is still the one you saw.",
				"Reason: " + reason,
			},
			Hidden: hiddenFields(r), Button: "Release the lock"}
		if li.Held {
			page.Items = []confirmItem{{Label: "holder", Detail: fmt.Sprintf("instance %s, plan %s, task %s, fence %d, %s left",
				li.Holder.Instance, li.Holder.PlanID, li.Holder.TaskID, li.Fence, dur(li.TTL))}}
		} else {
			page.Items = []confirmItem{{Label: "holder", Detail: "nobody holds the lock now"}}
		}
		c.render(w, r, "confirm", 0, page)
		return
	}
	info, err := c.svc.ReleaseLock(r.Context(), tenantID, fence, reason, actor(r))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.done(w, r, back, fmt.Sprintf("Released the lock of tenant %s held by %s (fence %d).", tenantID, info.Holder.Instance, info.Fence))
}
