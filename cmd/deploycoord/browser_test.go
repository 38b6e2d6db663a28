package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// The browser tests drive Debian's chromium (apt-get install chromium)
// through chromedp against a real server (Main on :0) and a real Redis.
// Without a chromium they skip with a message, unless the browser is
// required: DEPLOYCOORD_REQUIRE_BROWSER=1, or DEPLOYCOORD_REQUIRE_REDIS=1
// (CI sets both), when they fail.

const (
	browserOperator = "otto-operator-secret-0123"
	browserViewer   = "vera-viewer-secret-0123456"
)

// chromiumPath returns the browser to drive, or skips (fails when required).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on PATH: install it with apt-get install chromium to run the browser tests"
	if os.Getenv("DEPLOYCOORD_REQUIRE_BROWSER") == "1" || redistest.Required() {
		t.Fatal(msg + " (required here: DEPLOYCOORD_REQUIRE_BROWSER or DEPLOYCOORD_REQUIRE_REDIS is set)")
	}
	t.Skip(msg)
	return ""
}

// newBrowser starts a headless chromium with a fresh profile, closed when
// the test ends, and returns its context (each step bounded by the test's).
func newBrowser(t *testing.T, width, height int) context.Context {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelT(); cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(width), int64(height))); err != nil {
		t.Fatalf("start chromium (%s): %v", path, err)
	}
	return ctx
}

// browserServer runs the server on the shared real Redis with two tokens
// and a target its inline http stages may call.
func browserServer(t *testing.T) (*Main, *e2eTarget) {
	t.Helper()
	_, prefix := redistest.Real(t)
	tg := newE2ETarget(t)
	m, _, err := runMain(t, "-redis-url", "redis://"+redistest.Addr(), "-key-prefix", prefix,
		"-inline-http-hosts", "127.0.0.1", "-lock-lease", "3s", "-rate-limit", "off",
		"-tokens", "otto:operator:"+browserOperator+",vera:viewer:"+browserViewer)
	if err != nil {
		t.Fatal(err)
	}
	return m, tg
}

// createPlan creates a plan on m of the tenants: push, hold (waits at the
// target's gate while it is closed), verify.
func createBrowserPlan(t *testing.T, m *Main, tg *e2eTarget, name string, tenants ...string) facade.PlanView {
	t.Helper()
	var stages []task.StageSpec
	for _, s := range []string{"push", "hold", "verify"} {
		cfg, _ := json.Marshal(map[string]any{"method": "POST", "url": tg.url(s)})
		stages = append(stages, task.StageSpec{Name: s, Kind: "http", Timeout: task.Duration(time.Minute), Config: cfg})
	}
	spec := plan.Spec{Name: name, Stages: stages, MaxConcurrency: 20}
	for _, id := range tenants {
		spec.Tenants = append(spec.Tenants, plan.TenantSpec{TenantID: id})
	}
	v, err := m.coord.CreatePlan(context.Background(), spec, facade.Actor{Name: "browser-test"})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// signIn signs the browser in with secret.
func signIn(base, secret string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.Navigate(base+"/ui/sign-in"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), secret),
		chromedp.Click(chromedp.CSS("form.signin button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("header .who")),
	)
}

// waitText waits until the element's text holds want.
func waitText(sel, want string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.includes(%q); })()`, sel, want),
		chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))
}

// evaluate returns the value of a JavaScript expression in the page.
func evaluate[T any](t *testing.T, ctx context.Context, expr string, opts ...chromedp.EvaluateOption) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
	if err != nil {
		t.Fatalf("evaluate %.60q: %v", expr, err)
	}
	return v
}

// TestBrowserWatchFailAndRetry is the console's main flow in a real
// browser: the plan page shows a tenant go from RUNNING to FAILED while it
// is open (the page does not reload), "retry failed" shows its dry run and
// the confirmed retry completes the tenant; then sign-out.
func TestBrowserWatchFailAndRetry(t *testing.T) {
	t.Parallel()
	m, tg := browserServer(t)
	ctx := newBrowser(t, 1280, 800)
	base := "http://" + m.Addr
	tg.closeGate()
	tg.setFail("t-02", "verify", true)
	pv := createBrowserPlan(t, m, tg, "browser rollout", "t-01", "t-02")
	until(t, 15*time.Second, func() (bool, string) {
		return tg.waiting("t-02", "hold") == 1, "t-02 waiting at the hold stage"
	})

	err := chromedp.Do(ctx,
		signIn(base, browserOperator),
		chromedp.Navigate(base+"/ui/plans/"+pv.ID),
		waitText("#row-t-02 .st", "RUNNING"),
		// The page must stay this very document: a reload would lose this.
		chromedp.Evaluate[chromedp.Void](`window.__stay = "same page"`),
		waitText("#live-status", "Live: following the event feed"),
	)
	if err != nil {
		t.Fatalf("open the plan page: %v", err)
	}
	tg.open() // t-02 goes on to verify, which fails
	err = chromedp.Do(ctx,
		waitText("#row-t-02 .st", "FAILED"),
		waitText("#row-t-01 .st", "COMPLETED"),
		waitText("#plan-summary", "FAILED"),
	)
	if err != nil {
		t.Fatalf("watch t-02 fail: %v", err)
	}
	if marker := evaluate[string](t, ctx, `window.__stay || "reloaded"`); marker != "same page" {
		t.Fatalf("the page reloaded to show the failure (marker %q)", marker)
	}
	tg.setFail("t-02", "verify", false)
	err = chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#reason"), "INC-42 target fixed"),
		chromedp.Click(chromedp.CSS("#retry-failed")),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
	)
	if err != nil {
		t.Fatalf("retry failed: %v", err)
	}
	confirmText := evaluate[string](t, ctx, `document.querySelector("main").innerText`)
	if !strings.Contains(confirmText, "Retry 1 failed tenants") || !strings.Contains(confirmText, "Nothing has changed yet") {
		t.Errorf("the confirmation did not show the dry run: %q", confirmText)
	}
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
		waitText(".flash", "Retried 1 of 1 selected tenants"),
		waitText("#row-t-02 .st", "COMPLETED"),
		waitText("#plan-summary", "COMPLETED"),
	)
	if err != nil {
		t.Fatalf("confirm the retry: %v", err)
	}
	if tv, err := m.coord.TaskByTenant(context.Background(), "t-02"); err != nil || tv.Status != task.StatusCompleted || tv.Attempt != 2 {
		t.Fatalf("t-02 after the retry: %s attempt %d, %v", tv.Status, tv.Attempt, err)
	}

	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("header .who button")),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.Navigate(base+"/ui/plans/"+pv.ID),
		chromedp.WaitVisible(chromedp.CSS("#token")),
	)
	if err != nil {
		t.Fatalf("sign out: %v", err)
	}
	if url, _ := chromedp.Run(ctx, chromedp.Location()); !strings.Contains(url, "/ui/sign-in?next=") {
		t.Fatalf("after sign-out the plan page went to %s, want the sign-in page", url)
	}
}

// TestBrowserHiddenPageGivesBackItsStream: a browser opens at most six
// connections to the server (HTTP/1.1) and every open console page held
// one for its event stream, so with five other console tabs open the sixth
// did not even load. A hidden page (a background tab) closes its stream,
// and follows the feed again from its cursor when shown.
func TestBrowserHiddenPageGivesBackItsStream(t *testing.T) {
	t.Parallel()
	m, tg := browserServer(t)
	ctx := newBrowser(t, 1280, 800)
	base := "http://" + m.Addr
	pv := createBrowserPlan(t, m, tg, "tabs", "t-h1")
	err := chromedp.Do(ctx,
		signIn(base, browserOperator),
		chromedp.Navigate(base+"/ui/plans/"+pv.ID),
		waitText("#live-status", "Live: following the event feed"),
	)
	if err != nil {
		t.Fatal(err)
	}
	// The tab goes to the background (the page's handler runs at once),
	// and five other tabs follow the feed (streams opened here, on the
	// same connections): the console must still load.
	status := evaluate[int](t, ctx, `(async () => {
		Object.defineProperty(document, "visibilityState", {configurable: true, get: () => "hidden"});
		document.dispatchEvent(new Event("visibilitychange"));
		window.__tabs = [];
		await Promise.all([1, 2, 3, 4, 5].map(() => new Promise(ok => {
			const es = new EventSource(document.body.dataset.root + "events");
			window.__tabs.push(es);
			es.addEventListener("open", ok);
		})));
		const stop = new AbortController();
		setTimeout(() => stop.abort(), 20000); // a hang, not a measure
		try {
			return (await fetch(document.body.dataset.root, {signal: stop.signal})).status;
		} catch (e) {
			return -1;
		}
	})()`, chromedp.EvalAwaitPromise)
	if status != 200 {
		t.Fatalf("with five other pages following the feed, a page load answered %d (-1: no connection left)", status)
	}
	err = chromedp.Do(ctx,
		waitText("#live-status", "paused while the page is hidden"),
		chromedp.Evaluate[chromedp.Void](`window.__tabs.forEach(es => es.close());
			Object.defineProperty(document, "visibilityState", {configurable: true, get: () => "visible"});
			document.dispatchEvent(new Event("visibilitychange"))`),
		waitText("#live-status", "Live: following the event feed"),
	)
	if err != nil {
		t.Fatalf("shown again, the page does not follow the feed: %v", err)
	}
}

// TestBrowserViewerCannotAct: a viewer sees the plan but no action, and an
// action sent from the page anyway (with the page's own CSRF token) is
// refused.
func TestBrowserViewerCannotAct(t *testing.T) {
	t.Parallel()
	m, tg := browserServer(t)
	ctx := newBrowser(t, 390, 844) // a phone
	base := "http://" + m.Addr
	tg.setFail("t-v", "verify", true)
	pv := createBrowserPlan(t, m, tg, "viewer", "t-v")
	until(t, 15*time.Second, func() (bool, string) {
		v, _ := m.coord.Plan(context.Background(), pv.ID)
		return v.Status == plan.StatusFailed, "plan FAILED"
	})
	err := chromedp.Do(ctx,
		signIn(base, browserViewer),
		chromedp.Navigate(base+"/ui/plans/"+pv.ID),
		waitText("#row-t-v .st", "FAILED"),
	)
	if err != nil {
		t.Fatal(err)
	}
	hasActions := evaluate[bool](t, ctx, `document.getElementById("actions") !== null || document.querySelector("input[name=tenant]") !== null`)
	// At phone width the page does not scroll sideways (tables scroll
	// inside their frame).
	overflow := evaluate[bool](t, ctx, `document.documentElement.scrollWidth > window.innerWidth + 1`)
	status := evaluate[int](t, ctx, `(async () => {
		const csrf = document.querySelector("input[name=csrf]").value;
		const body = new URLSearchParams({csrf, scope: "failed", reason: "sneaky", confirm: "yes"});
		const res = await fetch(location.pathname + "/retry", {method: "POST", body, credentials: "same-origin"});
		return res.status;
	})()`, chromedp.EvalAwaitPromise)
	if hasActions {
		t.Error("a viewer's plan page shows actions")
	}
	if overflow {
		t.Error("the plan page scrolls sideways at phone width")
	}
	if status != 403 {
		t.Errorf("a viewer's retry sent from the page: %v, want 403", status)
	}
	if tv, _ := m.coord.TaskByTenant(context.Background(), "t-v"); tv.Attempt != 1 {
		t.Errorf("the viewer's retry went through: attempt %d", tv.Attempt)
	}
}

// TestConsoleScreenshots writes the screenshots of the README and
// docs/operations.md — the plan list, a plan with a failed tenant, and that
// tenant — at 1280×800 into docs/console/. It runs only when asked:
//
//	DEPLOYCOORD_SCREENSHOTS=1 go test ./cmd/deploycoord -run TestConsoleScreenshots
func TestConsoleScreenshots(t *testing.T) {
	if os.Getenv("DEPLOYCOORD_SCREENSHOTS") != "1" {
		t.Skip("set DEPLOYCOORD_SCREENSHOTS=1 to write docs/console/*.png")
	}
	m, tg := browserServer(t)
	ctx := newBrowser(t, 1280, 800)
	base := "http://" + m.Addr
	tg.setFail("eu-west-07", "verify", true)
	tg.setFail("us-east-12", "verify", true)
	var ids []string
	for _, region := range []string{"eu-west", "us-east", "ap-south"} {
		for i := 1; i <= 14; i++ {
			ids = append(ids, fmt.Sprintf("%s-%02d", region, i))
		}
	}
	done := createBrowserPlan(t, m, tg, "config-rollout-2026-11-20", "eu-west-01", "eu-west-02", "us-east-01")
	until(t, 15*time.Second, func() (bool, string) {
		v, _ := m.coord.Plan(context.Background(), done.ID)
		return v.Status == plan.StatusCompleted, "first plan COMPLETED"
	})
	pv := createBrowserPlan(t, m, tg, "config-rollout-2026-11-21", ids...)
	until(t, 30*time.Second, func() (bool, string) {
		v, _ := m.coord.Plan(context.Background(), pv.ID)
		return v.Status == plan.StatusFailed, "plan FAILED"
	})
	tg.closeGate()
	running := createBrowserPlan(t, m, tg, "cert-renewal", "eu-west-01", "eu-west-02", "eu-west-03", "us-east-01")
	until(t, 15*time.Second, func() (bool, string) {
		return tg.waiting("eu-west-01", "hold") == 1, "the third plan running"
	})
	_ = running
	dir := filepath.Join("..", "..", "docs", "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shots := []struct{ file, path, ready string }{
		{"plans.png", "/ui/", "#plans-live"},
		{"plan.png", "/ui/plans/" + pv.ID + "?status=FAILED", "#row-us-east-12"},
		{"tenant.png", "/ui/tenants/eu-west-07", "#tenant-timeline"},
	}
	if err := chromedp.Do(ctx, signIn(base, browserOperator)); err != nil {
		t.Fatal(err)
	}
	for _, s := range shots {
		err := chromedp.Do(ctx,
			chromedp.Navigate(base+s.path),
			chromedp.WaitVisible(chromedp.CSS(s.ready)),
			waitText("#live-status", "Live"),
		)
		if err != nil {
			t.Fatalf("%s: %v", s.file, err)
		}
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("%s: %v", s.file, err)
		}
		if err := os.WriteFile(filepath.Join(dir, s.file), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote docs/console/%s (%d bytes)", s.file, len(png))
	}
	tg.open()
}

// TestBrowserScriptsOff: with JavaScript disabled the pages still show
// everything (they are rendered on the server) and a retry still works,
// through its dry run and confirmation, as plain form posts.
func TestBrowserScriptsOff(t *testing.T) {
	t.Parallel()
	m, tg := browserServer(t)
	ctx := newBrowser(t, 1280, 800)
	base := "http://" + m.Addr
	tg.setFail("t-ns", "verify", true)
	createBrowserPlan(t, m, tg, "no script", "t-ns")
	until(t, 15*time.Second, func() (bool, string) {
		tv, err := m.coord.TaskByTenant(context.Background(), "t-ns")
		return err == nil && tv.Status == task.StatusFailed, "t-ns FAILED"
	})
	if err := chromedp.Do(ctx, signIn(base, browserOperator)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
	tg.setFail("t-ns", "verify", false)
	err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/tenants/t-ns"),
		chromedp.WaitVisible(chromedp.CSS("#tenant-timeline")),
	)
	if err != nil {
		t.Fatal(err)
	}
	text := evaluateText(t, ctx)
	for _, want := range []string{"FAILED", "target says no", "task.stage_failed", "push, hold", "live updates need JavaScript"} {
		if !strings.Contains(text, want) {
			t.Errorf("tenant page with scripts off: no %q in\n%s", want, text)
		}
	}
	err = chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#reason"), "scripts off"),
		chromedp.Click(chromedp.CSS("#retry-tenant")),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
	)
	if err != nil {
		t.Fatalf("retry with scripts off: %v", err)
	}
	if text := evaluateText(t, ctx); !strings.Contains(text, "Retry accepted: tenant t-ns, attempt 2") {
		t.Errorf("after the retry: %s", text)
	}
	until(t, 15*time.Second, func() (bool, string) {
		tv, _ := m.coord.TaskByTenant(context.Background(), "t-ns")
		return tv.Status == task.StatusCompleted, "t-ns COMPLETED after the retry"
	})
}

// evaluateText returns the page's visible text, read through the DOM
// protocol (page scripts may be off).
func evaluateText(t *testing.T, ctx context.Context) string {
	t.Helper()
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
	if err != nil {
		t.Fatal(err)
	}
	return text
}
