package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

var hiddenRe = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// confirmForm returns the hidden fields of a confirmation page's form.
func confirmForm(t *testing.T, p page) url.Values {
	t.Helper()
	form := url.Values{}
	for _, m := range hiddenRe.FindAllStringSubmatch(p.body, -1) {
		form.Add(m[1], htmlUnescape(m[2]))
	}
	if form.Get("confirm") != "yes" {
		t.Fatalf("no confirmation form in the page:\n%.3000s", p.body)
	}
	return form
}

func htmlUnescape(s string) string {
	return strings.NewReplacer("&lt;", "<", "&gt;", ">", "&#34;", `"`, "&#39;", "'", "&amp;", "&", "&#43;", "+").Replace(s)
}

// TestRetryFailedDryRunThenConfirm: "retry failed" answers how many tenants
// it would touch and changes nothing; confirming retries exactly those, and
// the plan page says so.
func TestRetryFailedDryRunThenConfirm(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{})
	for _, id := range []string{"t-1", "t-2"} {
		b.target.setFail(id, true)
	}
	pv := b.createPlan(b.coord, "bulk", "t-1", "t-2", "t-ok")
	b.waitPlan(pv.ID, plan.StatusFailed)
	op := b.signedIn(operatorSecret)
	csrf := op.csrf(b.ui("plans/" + pv.ID))
	dry := op.post(b.ui("plans/"+pv.ID+"/retry"), url.Values{"csrf": {csrf}, "scope": {"failed"}, "reason": {"INC-9 " + hostile},
		"back": {b.ui("plans/" + pv.ID)}}, nil).mustStatus(t, 200, "dry run")
	dry.mustContain(t, "dry run", "Retry 2 failed tenants", "2 selected, 2 would be retried from its checkpoint, 0 would be skipped",
		"Nothing has changed yet", "Retry 2 tenants", "INC-9 &lt;script&gt;")
	dry.mustBeSafe(t, "dry run")
	if tv, _ := b.coord.TaskByTenant(context.Background(), "t-1"); tv.Attempt != 1 {
		t.Fatalf("the dry run retried: attempt %d", tv.Attempt)
	}
	b.target.setFail("t-1", false)
	b.target.setFail("t-2", false)
	done := op.post(b.ui("plans/"+pv.ID+"/retry"), confirmForm(t, dry), nil).mustStatus(t, http.StatusSeeOther, "confirm")
	if loc := done.header.Get("Location"); loc != b.ui("plans/"+pv.ID) {
		t.Fatalf("after the retry: to %q", loc)
	}
	b.waitPlan(pv.ID, plan.StatusCompleted)
	back := op.get(b.ui("plans/"+pv.ID)).mustStatus(t, 200, "back")
	back.mustContain(t, "back", "Retried 2 of 2 selected tenants.", "✓</span> COMPLETED")
	op.get(b.ui("plans/"+pv.ID)).mustNotContain(t, "reload", "Retried 2 of 2") // a flash shows once
	tl, _ := b.coord.Timeline(context.Background(), "t-1", 0)
	found := false
	for _, ev := range tl.Events {
		found = found || (ev.Type == task.EventRetryRequested && ev.Actor == "otto" && ev.Reason == "INC-9 "+hostile)
	}
	if !found {
		t.Fatalf("no retry by otto with the reason in t-1's timeline: %+v", tl.Events)
	}
}

// TestRetryAllMatching: "select all matching" takes every tenant the filter
// matches, across pages, and nothing else.
func TestRetryAllMatching(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{})
	for _, id := range []string{"eu-1", "eu-2", "us-1"} {
		b.target.setFail(id, true)
	}
	pv := b.createPlan(b.coord, "m", "eu-1", "eu-2", "us-1")
	b.waitPlan(pv.ID, plan.StatusFailed)
	op := b.signedIn(operatorSecret)
	csrf := op.csrf(b.ui("plans/" + pv.ID))
	dry := op.post(b.ui("plans/"+pv.ID+"/retry"), url.Values{"csrf": {csrf}, "scope": {"selected"}, "all": {"1"}, "prefix": {"eu-"},
		"reason": {"eu fixed"}, "mode": {"stage"}, "stage": {"verify"}}, nil).mustStatus(t, 200, "dry run")
	dry.mustContain(t, "dry run", "Retry 2 tenants matching the filter", "from stage verify", "<strong>eu-1</strong>", "<strong>eu-2</strong>")
	dry.mustNotContain(t, "dry run", "us-1")
	op.post(b.ui("plans/"+pv.ID+"/retry"), confirmForm(t, dry), nil).mustStatus(t, http.StatusSeeOther, "confirm")
	if tv, _ := b.coord.TaskByTenant(context.Background(), "us-1"); tv.Attempt != 1 {
		t.Fatalf("us-1 retried: attempt %d", tv.Attempt)
	}
	b.waitTask("eu-1", task.StatusFailed)
	if tv, _ := b.coord.TaskByTenant(context.Background(), "eu-2"); tv.Attempt != 2 {
		t.Fatalf("eu-2 not retried: attempt %d", tv.Attempt)
	}
	// Selecting nothing is refused with a word.
	op.post(b.ui("plans/"+pv.ID+"/retry"), url.Values{"csrf": {csrf}, "scope": {"selected"}, "reason": {"x"}}, nil).
		mustStatus(t, http.StatusBadRequest, "none selected").mustContain(t, "none selected", "no tenant selected")
}

// failedRetryDryRun makes tenant's task fail (a plan of it alone), signs
// an operator in and asks the console for a retry from the checkpoint at
// attempt 1: the operator, the CSRF token and the dry run's page.
func failedRetryDryRun(t *testing.T, b *bundle, tenant string) (*browser, string, page) {
	t.Helper()
	b.target.setFail(tenant, true)
	b.createPlan(b.coord, "p-"+tenant, tenant)
	b.waitTask(tenant, task.StatusFailed)
	op := b.signedIn(operatorSecret)
	csrf := op.csrf(b.ui("tenants/" + tenant))
	dry := op.post(b.ui("tenants/"+tenant+"/retry"), url.Values{"csrf": {csrf}, "reason": {"fixed"}, "mode": {"checkpoint"}, "expectedAttempt": {"1"}}, nil).
		mustStatus(t, 200, "dry run")
	return op, csrf, dry
}

// TestTenantRetryQueuedSaysSo: with shared plans (the server's default) a
// confirmed retry queues the task; the flash says so instead of "runs".
func TestTenantRetryQueuedSaysSo(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{shared: true})
	op, _, dry := failedRetryDryRun(t, b, "t-q")
	b.target.setFail("t-q", false)
	op.post(b.ui("tenants/t-q/retry"), confirmForm(t, dry), nil).mustStatus(t, http.StatusSeeOther, "confirm")
	op.get(b.ui("tenants/t-q")).mustStatus(t, 200, "back").
		mustContain(t, "back", "Retry accepted: tenant t-q, attempt 2, queued to run verify: the first instance with room in the plan starts it.")
	b.waitTask("t-q", task.StatusCompleted)
}

// TestTenantRetryAndLock: a tenant's retry shows the stages it would run
// before running them; a held lock is released only with the fence seen,
// after a confirmation; a stale attempt is refused with its code.
func TestTenantRetryAndLock(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{})
	op, csrf, dry := failedRetryDryRun(t, b, "t-x")
	dry.mustContain(t, "dry run", "Retry tenant t-x from its checkpoint?", "<strong>verify</strong> — would run").mustNotContain(t, "dry run", "<strong>push</strong>")
	b.target.setFail("t-x", false)
	hold := b.target.holdTenant("t-x")
	defer hold()
	op.post(b.ui("tenants/t-x/retry"), confirmForm(t, dry), nil).mustStatus(t, http.StatusSeeOther, "confirm")
	// The same confirmation again: attempt 1 is stale now.
	op.post(b.ui("tenants/t-x/retry"), confirmForm(t, dry), nil).mustStatus(t, http.StatusConflict, "again").mustContain(t, "again", "ATTEMPT_MISMATCH")

	tp := op.get(b.ui("tenants/t-x")).mustStatus(t, 200, "tenant")
	fence := regexp.MustCompile(`name="fence" value="(\d+)"`).FindStringSubmatch(tp.body)
	if fence == nil {
		t.Fatalf("no lock release form while the retry holds the lock:\n%s", tp.body)
	}
	form := url.Values{"csrf": {csrf}, "reason": {"stuck " + hostile}, "fence": {fence[1]}}
	ask := op.post(b.ui("tenants/t-x/lock/release"), form, nil).mustStatus(t, 200, "release asks")
	ask.mustContain(t, "release asks", "Break the lock of tenant t-x (fence "+fence[1]+")?", "instance coord-a")
	ask.mustBeSafe(t, "release asks")
	stale := confirmForm(t, ask)
	stale.Set("fence", "1")
	op.post(b.ui("tenants/t-x/lock/release"), stale, nil).mustStatus(t, http.StatusConflict, "stale fence").mustContain(t, "stale fence", "LOCK_MISMATCH")
	op.post(b.ui("tenants/t-x/lock/release"), confirmForm(t, ask), nil).mustStatus(t, http.StatusSeeOther, "release")
	if li, _ := b.coord.Lock(context.Background(), "t-x"); li.Held {
		t.Fatalf("lock still held: %+v", li)
	}
	op.get(b.ui("tenants/t-x")).mustContain(t, "after release", "Released the lock of tenant t-x", "lock.released")
}

// TestPlanActions: pause and resume at once; cancel after a confirmation.
func TestPlanActions(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{})
	hold := b.target.holdTenant("t-p")
	defer hold()
	pv := b.createPlan(b.coord, "pa", "t-p")
	b.waitTask("t-p", task.StatusRunning)
	op := b.signedIn(operatorSecret)
	csrf := op.csrf(b.ui("plans/" + pv.ID))
	act := func(action string, extra url.Values) page {
		form := url.Values{"csrf": {csrf}, "reason": {"window " + hostile}}
		for k, v := range extra {
			form[k] = v
		}
		return op.post(b.ui("plans/"+pv.ID+"/"+action), form, nil)
	}
	act("pause", nil).mustStatus(t, http.StatusSeeOther, "pause")
	op.get(b.ui("plans/"+pv.ID)).mustContain(t, "paused", "is PAUSED").mustBeSafe(t, "paused")
	act("resume", nil).mustStatus(t, http.StatusSeeOther, "resume")
	ask := act("cancel", nil).mustStatus(t, 200, "cancel asks").mustContain(t, "cancel asks", "Cancel plan pa (", "1 tasks have not finished")
	if p, _ := b.coord.Plan(context.Background(), pv.ID); p.Status == plan.StatusCancelled {
		t.Fatal("cancelled before the confirmation")
	}
	op.post(b.ui("plans/"+pv.ID+"/cancel"), confirmForm(t, ask), nil).mustStatus(t, http.StatusSeeOther, "cancel")
	hold()
	b.waitPlan(pv.ID, plan.StatusCancelled)
}
