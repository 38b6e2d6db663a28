package console

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// frame is what every page shows around its content: the header (search,
// who is signed in), a flash message, and what the script needs to keep
// the page live (in data- attributes: the console allows no inline script).
type frame struct {
	Title   string
	Root    string
	AssetV  string
	Version string
	Caller  caller
	AuthOn  bool
	Flash   *flash
	Now     time.Time
	Query   string
	// Back is the page's own path and query, where its actions return.
	Back string
	// Live says how the script keeps the page current: the kind of page,
	// the feed filter of its event stream, the URL of its live fragment
	// and the feed cursor read before its data (so no change is missed).
	Live liveInfo
}

type liveInfo struct {
	Kind     string // "plans", "plan", "tenant", "instances" or ""
	PlanID   string
	TenantID string
	Fragment string
	Cursor   string
}

func (c *Console) frame(r *http.Request, title string) frame {
	return frame{Title: title, Root: c.root, AssetV: c.assetV, Version: c.cfg.Version, Caller: callerOf(r),
		AuthOn: len(c.tokens) > 0, Now: time.Now().UTC(), Back: c.browserPath(r), Flash: callerOf(r).Flash}
}

// assetVersion is a short hash of the static files, for their URLs.
func assetVersion(files fs.FS) string {
	h := sha256.New()
	_ = fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := fs.ReadFile(files, p)
			h.Write([]byte(p))
			h.Write(b)
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// pageNames are the templates, each parsed with layout.html.
var pageNames = []string{"plans", "plan", "tenant", "instances", "confirm", "signin", "error", "search"}

func parsePages(c *Console) (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"ui":           func(parts ...string) string { return c.root + strings.Join(parts, "/") },
		"esc":          url.PathEscape,
		"statusClass":  func(s any) string { return "st-" + strings.ToLower(fmt.Sprint(s)) },
		"statusSym":    statusSym,
		"ago":          ago,
		"ts":           ts,
		"dur":          dur,
		"json":         prettyJSON,
		"short":        short,
		"pct":          pct,
		"add":          func(a, b int) int { return a + b },
		"count":        func(c plan.Counts, s string) int { return c[task.Status(s)] },
		"row":          func(p planPage, t facade.TaskView) taskRow { return taskRow{TaskView: t, CanAct: p.Caller.CanAct()} },
		"join":         strings.Join,
		"taskStatuses": func() []task.Status { return task.Statuses },
		"planStatuses": func() []plan.Status { return plan.Statuses },
	}
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	pages := make(map[string]*template.Template, len(pageNames))
	for _, n := range pageNames {
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, "templates/"+n+".html")
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", n, err)
		}
		pages[n] = t
	}
	return pages, nil
}

// statusSym is the symbol shown with a status, so that no status is told
// by colour alone (the status's name is always written next to it).
func statusSym(s any) string {
	switch fmt.Sprint(s) {
	case "PENDING", "CREATED":
		return "○"
	case "RUNNING":
		return "▶"
	case "PAUSED":
		return "‖"
	case "COMPLETED":
		return "✓"
	case "FAILED":
		return "✗"
	case "CANCELLED":
		return "⊘"
	}
	return "•"
}

// ago says how long before now t was, shortly ("3m ago"); "-" for zero.
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	switch {
	case d < 0:
		return "just now"
	case d < 5*time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// ts is t in RFC 3339 UTC ("" for zero), for datetime and title attributes.
func ts(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// dur shows a duration rounded to what a person reads.
func dur(d any) string {
	var v time.Duration
	switch x := d.(type) {
	case time.Duration:
		v = x
	case task.Duration:
		v = time.Duration(x)
	case int64:
		v = time.Duration(x) * time.Millisecond
	}
	switch {
	case v == 0:
		return ""
	case v < time.Second:
		return v.Round(time.Millisecond).String()
	case v < time.Minute:
		return v.Round(100 * time.Millisecond).String()
	}
	return v.Round(time.Second).String()
}

// prettyJSON is v as indented JSON (shown as text: the template escapes it).
// Bidirectional controls, which params and a target's outputs may hold,
// are written as JSON escapes: raw, a right-to-left override would make the
// rest of its line read backwards, showing a value other than the stored one.
func prettyJSON(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprint(v)
	}
	return escapeBidi(string(b))
}

// escapeBidi writes the bidirectional controls in JSON text as \uXXXX
// escapes (in JSON they can only be inside strings, where the escape means
// the same character).
func escapeBidi(s string) string {
	if !strings.ContainsFunc(s, isBidiControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isBidiControl(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isBidiControl(r rune) bool { return unicode.Is(unicode.Bidi_Control, r) }

// short cuts s to n runes with an ellipsis (the full text is shown on
// hover and on expand).
func short(n int, s string) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// pct is n out of total as a percentage with two decimals (SVG widths).
func pct(n, total int) string {
	if total <= 0 {
		return "0"
	}
	return fmt.Sprintf("%.2f", 100*float64(n)/float64(total))
}

// bar is a plan's progress: one segment per task status with tasks, in
// the order of task.Statuses, and a text legend.
type bar struct {
	Total    int
	Done     int
	Segments []segment
}

type segment struct {
	Status task.Status
	N      int
	X, W   string
}

func newBar(counts plan.Counts, total int) bar {
	sum := 0
	for _, s := range task.Statuses {
		sum += counts[s]
	}
	total = max(total, sum)
	b := bar{Total: total}
	x := 0
	for _, s := range []task.Status{task.StatusCompleted, task.StatusFailed, task.StatusCancelled, task.StatusRunning, task.StatusPaused, task.StatusPending} {
		n := counts[s]
		if !s.Active() {
			b.Done += n
		}
		if n == 0 {
			continue
		}
		b.Segments = append(b.Segments, segment{Status: s, N: n, X: pct(x, total), W: pct(n, total)})
		x += n
	}
	return b
}

// Label reads the bar out ("3 of 10 done: 2 completed, 1 failed, ...").
func (b bar) Label() string {
	parts := make([]string, 0, len(b.Segments))
	for _, s := range b.Segments {
		parts = append(parts, fmt.Sprintf("%d %s", s.N, strings.ToLower(string(s.Status))))
	}
	return fmt.Sprintf("%d of %d done: %s", b.Done, b.Total, strings.Join(parts, ", "))
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// taskRow is a tenant's row on the plan page.
type taskRow struct {
	facade.TaskView
	CanAct bool
}
