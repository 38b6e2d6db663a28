package console

import (
	"net/http"

	"github.com/deploycoord/deploycoord/httpapi"
)

type signInPage struct {
	frame
	Next    string
	Message string
}

// GET /ui/sign-in: the form that takes an API token once.
func (c *Console) signInPage(w http.ResponseWriter, r *http.Request) {
	if len(c.tokens) == 0 {
		http.Redirect(w, r, c.root, http.StatusSeeOther)
		return
	}
	page := signInPage{frame: c.frame(r, "Sign in"), Next: c.localNext(r.URL.Query().Get("next"))}
	if s, ok := c.readSession(r); ok {
		page.Caller = caller{session: s, CSRF: c.keys.csrf(s)}
	}
	c.render(w, r, "signin", 0, page)
}

// POST /ui/sign-in: a known token's secret starts a session. The cookie
// names the token and its role, signed; the secret is not kept.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	if len(c.tokens) == 0 {
		http.Redirect(w, r, c.root, http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		c.renderError(w, r, nil, http.StatusBadRequest, "The form could not be read.")
		return
	}
	next := c.localNext(r.PostForm.Get("next"))
	t, ok := c.lookupToken(r.PostForm.Get("token"))
	if !ok {
		httpapi.Deny(r, "console sign-in with an unknown token")
		c.log.Warn().Str("client_addr", httpapi.ClientAddr(r.Context())).Msg("console sign-in refused: unknown token")
		page := signInPage{frame: c.frame(r, "Sign in"), Next: next, Message: "Unknown token: paste one of the API tokens configured on the server."}
		c.render(w, r, "signin", http.StatusUnauthorized, page)
		return
	}
	if _, err := c.startSession(w, r, t.Name, t.Role); err != nil {
		c.fail(w, r, err)
		return
	}
	httpapi.SetCaller(r, t.Name, t.Role)
	c.log.Info().Str("actor", t.Name).Str("role", string(t.Role)).Str("client_addr", httpapi.ClientAddr(r.Context())).Msg("console sign-in")
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// POST /ui/sign-out: forgets the session cookie.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request) {
	cl := callerOf(r)
	http.SetCookie(w, c.cookie(r, sessionCookie, "", -1))
	c.log.Info().Str("actor", cl.Name).Msg("console sign-out")
	if len(c.tokens) == 0 {
		http.Redirect(w, r, c.root, http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, c.root+"sign-in", http.StatusSeeOther)
}
