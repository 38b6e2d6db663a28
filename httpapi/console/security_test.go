package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// TestSignInAndOut: a page asks to sign in; an unknown token is refused; a
// known one gets a session cookie (HttpOnly, SameSite=Strict, Secure behind
// TLS, the secret nowhere in it) and lands on the page it asked for;
// signing out ends it.
func TestSignInAndOut(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{})
	br := b.browser()
	p := br.get(b.ui("instances")).mustStatus(t, http.StatusSeeOther, "signed out")
	if loc := p.header.Get("Location"); loc != b.ui("sign-in?next=")+url.QueryEscape(b.ui("instances")) {
		t.Fatalf("redirect to %q", loc)
	}
	br.get(b.ui("sign-in")).mustStatus(t, 200, "sign-in page").mustContain(t, "sign-in page", `type="password"`).mustBeSafe(t, "sign-in page")
	br.post(b.ui("sign-in"), url.Values{"token": {"nope-nope-nope-nope"}}, nil).mustStatus(t, http.StatusUnauthorized, "bad token").
		mustContain(t, "bad token", "Unknown token")
	// Only a page of this console may be the destination.
	for next, want := range map[string]string{b.ui("instances"): b.ui("instances"), "https://evil.example/": b.ui(""), b.ui("") + "/evil.example": b.ui("")} {
		res := br.post(b.ui("sign-in"), url.Values{"token": {viewerSecret}, "next": {next}}, map[string]string{"X-Forwarded-Proto": "https"})
		res.mustStatus(t, http.StatusSeeOther, "sign-in")
		if loc := res.header.Get("Location"); loc != want {
			t.Errorf("next %q: went to %q, want %q", next, loc, want)
		}
		ck := res.header.Get("Set-Cookie")
		for _, attr := range []string{"deploycoord_session=", "HttpOnly", "SameSite=Strict", "Secure", "Path=" + b.ui("")} {
			if !strings.Contains(ck, attr) {
				t.Errorf("session cookie %q lacks %s", ck, attr)
			}
		}
		if strings.Contains(ck, viewerSecret) {
			t.Errorf("the session cookie holds the token")
		}
	}
	plain := br.post(b.ui("sign-in"), url.Values{"token": {viewerSecret}}, nil)
	if strings.Contains(plain.header.Get("Set-Cookie"), "Secure") {
		t.Errorf("cookie Secure over plain HTTP: the browser would not send it back")
	}
	br.get(b.ui("instances")).mustStatus(t, 200, "signed in").mustContain(t, "signed in", "vera", "(viewer)", "Sign out")
	out := br.post(b.ui("sign-out"), url.Values{"csrf": {br.csrf(b.ui("instances"))}}, nil).mustStatus(t, http.StatusSeeOther, "sign out")
	if !strings.Contains(out.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("sign-out cookie %q does not expire the session", out.header.Get("Set-Cookie"))
	}
	br.get(b.ui("instances")).mustStatus(t, http.StatusSeeOther, "after sign-out")

	// A forged or tampered cookie is no session.
	forged := b.browser()
	u, _ := url.Parse(b.srv.URL + b.ui(""))
	forged.hc.Jar.SetCookies(u, []*http.Cookie{{Name: "deploycoord_session", Value: "eyJzaWQiOiJ4IiwibiI6Im90dG8iLCJyIjoib3BlcmF0b3IiLCJleHAiOjk5OTk5OTk5OTl9.AAAA"}})
	forged.get(b.ui("")).mustStatus(t, http.StatusSeeOther, "forged cookie")
}

// TestViewerCannotAct: a viewer's pages carry no action form, and the
// server refuses a viewer's action anyway (403), changing nothing.
func TestViewerCannotAct(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{})
	b.target.setFail("t-bad", true)
	pv := b.createPlan(b.coord, "v", "t-bad")
	b.waitPlan(pv.ID, plan.StatusFailed)
	viewer := b.signedIn(viewerSecret)
	for _, path := range []string{b.ui("plans/" + pv.ID), b.ui("tenants/t-bad")} {
		viewer.get(path).mustStatus(t, 200, path).mustNotContain(t, path, `method="post" action="`+b.ui("plans"), `id="actions"`,
			`id="tenant-actions"`, "Retry failed", "Break glass", `type="checkbox" form="actions"`)
	}
	csrf := viewer.csrf(b.ui("tenants/t-bad")) // the sign-out form's
	for _, a := range []struct{ path string }{
		{b.ui("plans/" + pv.ID + "/retry")}, {b.ui("plans/" + pv.ID + "/cancel")}, {b.ui("tenants/t-bad/retry")}, {b.ui("tenants/t-bad/lock/release")},
	} {
		form := url.Values{"csrf": {csrf}, "reason": {"try"}, "scope": {"failed"}, "confirm": {"yes"}, "fence": {"1"}}
		viewer.post(a.path, form, nil).mustStatus(t, http.StatusForbidden, a.path).mustContain(t, a.path, "vera has role viewer")
	}
	if tv := b.waitTask("t-bad", task.StatusFailed); tv.Attempt != 1 {
		t.Fatalf("a viewer's retry went through: attempt %d", tv.Attempt)
	}
	// Each refusal is on the event feed with its code and reason, as an
	// API refusal is.
	deadline := time.Now().Add(5 * time.Second)
	for {
		evs, _, err := b.coord.Events(context.Background(), task.FeedFilter{Type: facade.EventOperatorRefused, TenantID: "t-bad", Limit: 10}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 2 { // the two tenant actions (the plan actions name no tenant)
			for _, ev := range evs {
				if ev.Data["code"] != httpapi.CodePermissionDenied || ev.Data["reason"] != "try" || ev.Data["actor"] != "vera" {
					t.Errorf("operator.refused of a viewer's console action: %v; want code %s, reason and actor", ev.Data, httpapi.CodePermissionDenied)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d operator.refused events of t-bad, want 2: %v", len(evs), evs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCSRFRefused: an action without the session's CSRF token, with
// another session's, or sent from another site is refused and changes
// nothing.
func TestCSRFRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{})
	b.target.setFail("t-bad", true)
	pv := b.createPlan(b.coord, "c", "t-bad")
	b.waitPlan(pv.ID, plan.StatusFailed)
	op, other := b.signedIn(operatorSecret), b.signedIn(operatorSecret)
	good := op.csrf(b.ui("tenants/t-bad"))
	path := b.ui("tenants/t-bad/retry")
	form := func(csrf string) url.Values {
		return url.Values{"csrf": {csrf}, "reason": {"r"}, "confirm": {"yes"}, "expectedAttempt": {"1"}}
	}
	op.post(path, form(""), nil).mustStatus(t, http.StatusForbidden, "no token").mustContain(t, "no token", "security token")
	op.post(path, form(other.csrf(b.ui("tenants/t-bad"))), nil).mustStatus(t, http.StatusForbidden, "another session's token")
	op.post(path, form(good), map[string]string{"Sec-Fetch-Site": "cross-site"}).mustStatus(t, http.StatusForbidden, "cross-site")
	op.post(path, form(good), map[string]string{"Origin": "https://evil.example"}).mustStatus(t, http.StatusForbidden, "other origin")
	if tv := b.waitTask("t-bad", task.StatusFailed); tv.Attempt != 1 {
		t.Fatalf("a refused retry went through: attempt %d", tv.Attempt)
	}
	op.post(path, form(good), nil).mustStatus(t, http.StatusSeeOther, "good token")
	b.waitTask("t-bad", task.StatusFailed) // the target still fails it
	if tv, _ := b.coord.TaskByTenant(context.Background(), "t-bad"); tv.Attempt != 2 {
		t.Fatalf("after the retry: attempt %d, want 2", tv.Attempt)
	}
}

// TestBasePath: behind a proxy under /deploycoord, links, redirects and
// cookies carry the prefix, and the console answers with or without it.
func TestBasePath(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{basePath: "/deploycoord"})
	br := b.signedIn(operatorSecret)
	if p := br.get("/"); p.header.Get("Location") != "/deploycoord/ui/" {
		t.Errorf("GET / goes to %q", p.header.Get("Location"))
	}
	p := br.get("/deploycoord/ui/").mustStatus(t, 200, "prefixed")
	p.mustContain(t, "prefixed", `href="/deploycoord/ui/static/console.css`, `action="/deploycoord/ui/search"`, `data-root="/deploycoord/ui/"`)
	p.mustNotContain(t, "prefixed", `href="/ui/`, `action="/ui/`)
	// A proxy that strips the prefix: same page, same links.
	req, _ := http.NewRequest("GET", b.srv.URL+"/ui/instances", nil)
	req.AddCookie(&http.Cookie{Name: "deploycoord_session", Value: sessionValue(t, br, b)})
	br.do(req).mustStatus(t, 200, "stripped").mustContain(t, "stripped", `href="/deploycoord/ui/instances"`)
	br.get("/deploycoord/ui/static/console.js").mustStatus(t, 200, "static")
	signedOut := b.browser()
	if loc := signedOut.get("/deploycoord/ui/").header.Get("Location"); !strings.HasPrefix(loc, "/deploycoord/ui/sign-in?next=%2Fdeploycoord%2Fui%2F") {
		t.Errorf("sign-in redirect %q", loc)
	}
}

func sessionValue(t *testing.T, br *browser, b *bundle) string {
	u, _ := url.Parse(b.srv.URL + b.ui(""))
	for _, c := range br.hc.Jar.Cookies(u) {
		if c.Name == "deploycoord_session" {
			return c.Value
		}
	}
	t.Fatal("no session cookie")
	return ""
}

// TestAuthOff: without tokens (loopback only) everybody is anonymous with
// role operator, as in the API, but actions still need the CSRF token of
// the session the console hands out.
func TestAuthOff(t *testing.T) {
	t.Parallel()
	b := setup(t, bundleOpts{noTokens: true})
	b.target.setFail("t-bad", true)
	pv := b.createPlan(b.coord, "a", "t-bad")
	b.waitPlan(pv.ID, plan.StatusFailed)
	br := b.browser()
	br.get(b.ui("sign-in")).mustStatus(t, http.StatusSeeOther, "sign-in with auth off")
	p := br.get(b.ui("plans/"+pv.ID)).mustStatus(t, 200, "plan").mustContain(t, "plan", "anonymous", `id="retry-failed"`)
	p.mustNotContain(t, "plan", "Sign out")
	br.post(b.ui("plans/"+pv.ID+"/pause"), url.Values{"reason": {"x"}}, nil).mustStatus(t, http.StatusForbidden, "no csrf")
	b.browser().post(b.ui("plans/"+pv.ID+"/pause"), url.Values{"reason": {"x"}}, nil).mustStatus(t, http.StatusUnauthorized, "no session")
}
