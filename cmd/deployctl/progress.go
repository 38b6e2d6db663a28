package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/task"
)

// widthDefault is the terminal width assumed when it cannot be read.
const widthDefault = 80

// termWidth is the width of the terminal stdout is, or $COLUMNS, or 80.
func (a *app) termWidth() int {
	if f, ok := a.stdout.(*os.File); ok {
		if w := ttyWidth(f); w > 0 {
			return w
		}
	}
	if n, err := strconv.Atoi(a.getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return widthDefault
}

// eta estimates when the plan ends from the pace since the watch began:
// done0 tasks finished at start, done now after elapsed. 0 when it cannot
// tell yet (nothing finished since).
func eta(done0, done, total int, elapsed time.Duration) time.Duration {
	if done <= done0 || done >= total || elapsed <= 0 {
		return 0
	}
	perTask := elapsed / time.Duration(done-done0)
	return perTask * time.Duration(total-done)
}

// fitLine is the progress line of a terminal watch, fitted to width: the
// plan, status, bar and counts, the ETA and the failing tenants; the parts
// that do not fit are left out, least important first (the plan id is
// shortened to its end, the bar narrowed, the failing list cut with +N).
func fitLine(p httpapi.Plan, width int, left time.Duration, failing []string, failed int) string {
	c := p.Counts
	done := c[task.StatusCompleted] + c[task.StatusFailed] + c[task.StatusCancelled]
	pct := 100
	if p.TotalTasks > 0 {
		pct = done * 100 / p.TotalTasks
	}
	id := p.PlanID
	if len(id) > 12 {
		id = "…" + id[len(id)-8:]
	}
	counts := fmt.Sprintf("%d/%d ok %d failed %d running %d", done, p.TotalTasks, c[task.StatusCompleted], c[task.StatusFailed], c[task.StatusRunning])
	etaText := ""
	if left > 0 {
		etaText = "ETA " + left.Round(time.Second).String()
	}
	failText := ""
	if failed > 0 && len(failing) > 0 {
		failText = "failing: " + strings.Join(failing, ",")
		if failed > len(failing) {
			failText += fmt.Sprintf(" +%d", failed-len(failing))
		}
	}
	for barW := barWidth; ; barW -= 5 {
		parts := []string{id, string(p.Status)}
		if barW > 0 {
			parts = append(parts, bar(done, p.TotalTasks, barW))
		}
		parts = append(parts, fmt.Sprintf("%d%%", pct), counts)
		if etaText != "" {
			parts = append(parts, etaText)
		}
		line := strings.Join(parts, " ")
		if failText != "" {
			line += "  " + failText
		}
		if utf8.RuneCountInString(line) <= width || barW <= 0 {
			return truncate(line, width)
		}
	}
}

// truncate cuts s to width runes, ending with "…" when cut.
func truncate(s string, width int) string {
	if width <= 0 || utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}

// failingTenants returns up to n tenants of the plan whose task FAILED.
func (a *app) failingTenants(ctx context.Context, id string, n int) []string {
	q := url.Values{"status": {string(task.StatusFailed)}, "limit": {strconv.Itoa(n)}}
	var list httpapi.TaskList
	if _, err := a.cli.getJSON(ctx, planPath(id)+"/tasks", q, &list); err != nil {
		return nil
	}
	out := make([]string, 0, len(list.Tasks))
	for _, tk := range list.Tasks {
		out = append(out, cell(tk.TenantID))
	}
	return out
}
