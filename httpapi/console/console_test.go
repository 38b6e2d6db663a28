package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi/console"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestPagesEmptyStore: every page answers on a store with nothing in it,
// says so, and keeps to the Content-Security-Policy.
func TestPagesEmptyStore(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{})
	br := b.signedIn(operatorSecret)
	for _, c := range []struct {
		path   string
		status int
		want   string
	}{
		{b.ui(""), 200, "No plans yet"},
		{b.ui("?status=FAILED"), 200, "No plans with status FAILED"},
		{b.ui("instances"), 200, "coord-a"},
		{b.ui("instances"), 200, "Key layout"},
		{b.ui("tenants/t-none"), 404, "tenant t-none has no task"},
		{b.ui("plans/plan-01JDQZV5X8M7R2K9C3B4N6P0QS"), 404, "NOT_FOUND"},
		{b.ui("plans/not-a-plan"), 400, "is not a plan id"},
		{b.ui("tenants/" + url.PathEscape(hostile)), 400, "is not a tenant id"},
		{b.ui("plans/" + url.PathEscape(hostile)), 400, "is not a plan id"},
		{b.ui("search?q=plan-01JDQZV5X8M7R2K9C3B4N6P0QS"), 303, ""},
		{b.ui("search?q=t-none"), 303, ""},
		{b.ui("search?q=task-01JDQZV5X8M7R2K9C3B4N6P0QS"), 404, "Nothing found"},
		{b.ui("search?q=" + url.QueryEscape("<b>")), 400, "Nothing found"},
		{b.ui("nothing-here"), 404, "No such page"},
	} {
		p := br.get(c.path).mustStatus(t, c.status, c.path)
		if c.status == 303 {
			continue
		}
		p.mustContain(t, c.path, c.want)
		p.mustBeSafe(t, c.path)
	}
	if loc := br.get(b.ui("search?q=t-none")).header.Get("Location"); loc != b.ui("tenants/t-none") {
		t.Errorf("search t-none goes to %q", loc)
	}
	if p := br.get("/"); p.status != http.StatusSeeOther || p.header.Get("Location") != b.ui("") {
		t.Errorf("GET / = %d %q, want 303 to the console", p.status, p.header.Get("Location"))
	}
	for _, f := range []string{"static/console.js", "static/console.css"} {
		p := br.get(b.ui(f)).mustStatus(t, 200, f)
		if len(p.body) < 500 {
			t.Errorf("%s: %d bytes", f, len(p.body))
		}
	}
}

// TestPagesFailedTenant: a plan with a failed tenant, as the plan list,
// the plan page and the tenant page show it: status in words, the error in
// full, the timeline and checkpoint; hostile values escaped everywhere.
func TestPagesFailedTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{})
	b.target.setFail("t-bad", true)
	pv := b.createPlan(b.coord, "rollout "+hostile, "t-ok", "t-bad")
	b.waitPlan(pv.ID, plan.StatusFailed)
	// An operator's reason with markup goes to the timeline.
	if _, err := b.coord.CancelTask(context.Background(), "t-bad", "INC-7 "+hostile, facade.Actor{Name: "otto", Role: "operator"}); err == nil {
		t.Fatal("cancelling a FAILED task succeeded")
	}
	br := b.signedIn(operatorSecret)

	list := br.get(b.ui("")).mustStatus(t, 200, "plans")
	list.mustContain(t, "plans", pv.ID, "FAILED", "2/2 done", "✗</span> 1 FAILED", "&lt;script&gt;")
	list.mustBeSafe(t, "plans")

	pp := br.get(b.ui("plans/"+pv.ID)).mustStatus(t, 200, "plan")
	pp.mustContain(t, "plan", `id="row-t-bad"`, `id="row-t-ok"`, "✗</span> FAILED", "✓</span> COMPLETED",
		"config server down &lt;script&gt;", // the error in full, escaped
		`id="retry-failed"`, "Retry failed (1)", "Page 1: 2 tenants")
	pp.mustBeSafe(t, "plan")

	tp := br.get(b.ui("tenants/t-bad")).mustStatus(t, 200, "tenant")
	tp.mustContain(t, "tenant", "FAILED", "task.failed", "task.stage_failed", "Completed stages</dt><dd>push",
		"&lt;script&gt;", // the context data of push, and the error
		`name="expectedAttempt" value="1"`, "Retry… (dry run first)", "History")
	tp.mustBeSafe(t, "tenant")

	filtered := br.get(b.ui("plans/"+pv.ID+"?status=FAILED")).mustStatus(t, 200, "filtered")
	filtered.mustContain(t, "filtered", `id="row-t-bad"`, "matching the filter").mustNotContain(t, "filtered", `id="row-t-ok"`)
	byPrefix := br.get(b.ui("plans/"+pv.ID+"?prefix=t-o")).mustStatus(t, 200, "prefix")
	byPrefix.mustContain(t, "prefix", `id="row-t-ok"`).mustNotContain(t, "prefix", `id="row-t-bad"`)
	br.get(b.ui("plans/"+pv.ID+"?prefix="+url.QueryEscape("<x>"))).mustStatus(t, 400, "hostile prefix").mustBeSafe(t, "hostile prefix")
}

// TestPagesRunningPlan: a RUNNING tenant holding its lock, live parts of
// the page, and the feed the page follows.
func TestPagesRunningPlan(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{})
	release := b.target.holdTenant("t-run")
	defer release()
	br := b.signedIn(operatorSecret)
	cursorPage := br.get(b.ui("")).mustStatus(t, 200, "plans")
	cursor := attr(t, cursorPage.body, "data-cursor")
	pv := b.createPlan(b.coord, "slow", "t-run")
	b.waitTask("t-run", task.StatusRunning)

	pp := br.get(b.ui("plans/"+pv.ID)).mustStatus(t, 200, "plan")
	pp.mustContain(t, "plan", "▶</span> RUNNING", "1/2 push", `data-live="plan"`, `data-plan="`+pv.ID+`"`)
	pp.mustBeSafe(t, "plan")
	tp := br.get(b.ui("tenants/t-run")).mustStatus(t, 200, "tenant")
	tp.mustContain(t, "tenant", "RUNNING", "yes, by instance coord-a", "Break glass: release the lock", `name="fence" value="`)
	tp.mustBeSafe(t, "tenant")

	// The fragment holds the counts and only the rows asked for.
	frag := br.get(b.ui("plans/"+pv.ID+"?fragment=1&tenant=t-run")).mustStatus(t, 200, "fragment")
	frag.mustContain(t, "fragment", `id="plan-summary"`, `id="row-t-run"`).mustNotContain(t, "fragment", "<html", `id="actions"`)

	// The feed after the page's cursor names the plan and tenant.
	var ch struct {
		Cursor  string
		Tenants []string
		Plans   []string
		Events  int
	}
	// The coordinator publishes its events in batches (20ms): ask again
	// until they are in the feed.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ev := br.get(b.ui("events?after="+url.QueryEscape(cursor))).mustStatus(t, 200, "events")
		err := jsonUnmarshal(ev.body, &ch)
		if err == nil && ch.Events > 0 && contains(ch.Tenants, "t-run") && contains(ch.Plans, pv.ID) && ch.Cursor != cursor {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events after the page's cursor: %+v (%v)", ch, err)
		}
	}
	// As a stream: a first "changes" event at once, with its cursor as id.
	req, _ := http.NewRequest("GET", b.srv.URL+b.ui("events?planId="+pv.ID+"&after="+url.QueryEscape(cursor)), nil)
	req.Header.Set("Accept", "text/event-stream")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := br.hc.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	buf := make([]byte, 4096)
	n, _ := res.Body.Read(buf)
	if res.Header.Get("Content-Type") != "text/event-stream" || !strings.Contains(string(buf[:n]), "event: changes\ndata: ") ||
		!strings.Contains(string(buf[:n]), "t-run") {
		t.Fatalf("stream: %s %q", res.Header.Get("Content-Type"), buf[:n])
	}
	release()
	b.waitTask("t-run", task.StatusCompleted)
}

// TestPagesOrphanedTask: a RUNNING task whose instance does not run it any
// more shows orphaned, on the plan page (with its filter) and the tenant
// page.
func TestPagesOrphanedTask(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{})
	release := b.target.holdTenant("t-orphan")
	defer release()
	// An earlier process with this instance's id runs the task: this one
	// does not, so the task is orphaned as far as it knows.
	ghost := b.newCoordinator("coord-a")
	pv := b.createPlan(ghost, "ghost", "t-orphan", "t-fine")
	b.waitTask("t-orphan", task.StatusRunning)
	// Until t-fine has finished, it is RUNNING by coord-a: orphaned too.
	b.waitTask("t-fine", task.StatusCompleted)
	br := b.signedIn(operatorSecret)
	pp := br.get(b.ui("plans/"+pv.ID+"?orphaned=1")).mustStatus(t, 200, "plan")
	pp.mustContain(t, "plan", `id="row-t-orphan"`, "⚠ orphaned", `id="retry-orphaned"`)
	pp.mustNotContain(t, "plan", `id="row-t-fine"`)
	pp.mustBeSafe(t, "plan")
	tp := br.get(b.ui("tenants/t-orphan")).mustStatus(t, 200, "tenant")
	tp.mustContain(t, "tenant", "⚠ orphaned: its instance is gone")
	tp.mustBeSafe(t, "tenant")
}

func attr(t *testing.T, body, name string) string {
	t.Helper()
	i := strings.Index(body, name+`="`)
	if i < 0 {
		t.Fatalf("no %s in the page", name)
	}
	rest := body[i+len(name)+2:]
	return rest[:strings.IndexByte(rest, '"')]
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestPagesPager: the plan page's "Next page" and "First page" links lead
// to the next page and back with the filter kept. The links were the query
// escaped once more by the template (href="?cursor%3d…%26status%3d…"): the
// next page was the first again, unfiltered, and the tenants past the first
// page out of reach (an operator session on a plan of 50 000).
func TestPagesPager(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{})
	var ids []string
	for i := range console.PageSize + 5 {
		ids = append(ids, fmt.Sprintf("pg-%03d", i))
	}
	pv := b.createPlan(b.coord, "pager", ids...)
	b.waitPlan(pv.ID, plan.StatusCompleted)
	br := b.signedIn(operatorSecret)
	link := func(p page, rel string) string {
		t.Helper()
		m := regexp.MustCompile(`<a href="([^"]*)"[^>]*>` + rel).FindStringSubmatch(p.body)
		if m == nil {
			t.Fatalf("no %q link on the page", rel)
		}
		return html.UnescapeString(m[1])
	}
	first := br.get(b.ui("plans/"+pv.ID+"?status=COMPLETED")).mustStatus(t, 200, "page 1")
	first.mustContain(t, "page 1", "Page 1: 100 tenants matching the filter", `id="row-pg-000"`)
	next := link(first, "Next page")
	if !strings.HasPrefix(next, "?") {
		t.Fatalf("next page link %q", next)
	}
	q, err := url.ParseQuery(next[1:])
	if err != nil || q.Get("status") != "COMPLETED" || q.Get("page") != "2" || q.Get("cursor") == "" {
		t.Fatalf("next page link %q: query %v, %v; want status, page 2 and a cursor", next, q, err)
	}
	second := br.get(b.ui("plans/"+pv.ID+next)).mustStatus(t, 200, "page 2")
	second.mustContain(t, "page 2", "Page 2: 5 tenants matching the filter", `id="row-pg-104"`).
		mustNotContain(t, "page 2", `id="row-pg-000"`, "Next page")
	back := link(second, "First page")
	br.get(b.ui("plans/"+pv.ID+back)).mustStatus(t, 200, "back").mustContain(t, "back", "Page 1: 100 tenants matching the filter")
}

// TestBidiControlsShownEscaped: JSON the console shows (a plan's params,
// a checkpoint's context data: a target's answer) may hold bidirectional
// controls, which the API takes there. Shown raw, a right-to-left override
// makes the rest of the line read backwards (a version that is not the
// one stored); the console shows them as JSON escapes instead.
func TestBidiControlsShownEscaped(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{})
	const spoof = "1.2.3\u202e4.5.6\u2066x\u2069"
	outputs, _ := json.Marshal(map[string]any{"outputs": map[string]any{"build": spoof}})
	spec := plan.Spec{Name: "bidi", Params: map[string]any{"version": spoof},
		Stages:  []task.StageSpec{{Name: "build", Kind: "noop", Config: outputs}},
		Tenants: []plan.TenantSpec{{TenantID: "t-bidi"}}}
	pv, err := b.coord.CreatePlan(context.Background(), spec, facade.Actor{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	b.waitPlan(pv.ID, plan.StatusCompleted)
	br := b.signedIn(viewerSecret)
	for _, path := range []string{b.ui("plans/" + pv.ID), b.ui("tenants/t-bidi")} {
		p := br.get(path).mustStatus(t, 200, path).mustContain(t, path, `1.2.3\u202e4.5.6\u2066x\u2069`)
		if i := strings.IndexFunc(p.body, func(r rune) bool { return unicode.Is(unicode.Bidi_Control, r) }); i >= 0 {
			t.Errorf("%s shows a bidirectional control raw: …%s…", path, p.body[max(0, i-40):i+10])
		}
	}
}
