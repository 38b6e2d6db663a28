package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

// maxCell bounds a table cell (an error message), in runes; -o json has
// the whole text.
const maxCell = 80

// clean makes server-provided text safe for a terminal and a table cell:
// control and format characters (escape sequences, tabs, newlines, bidi
// overrides) become spaces or '?'.
func clean(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "?") {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			b.WriteByte(' ')
		case unsafeRune(r):
			b.WriteByte('?')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func unsafeRune(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }

// cell is clean(s) cut to maxCell runes, "-" when empty.
func cell(s string) string {
	s = clean(s)
	if s == "" {
		return "-"
	}
	if utf8.RuneCountInString(s) > maxCell {
		r := []rune(s)
		return string(r[:maxCell-1]) + "…"
	}
	return s
}

// ago says how long ago t was ("3m ago", "in 5s", "just now"); "-" for nil.
func ago(t *time.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	d := now.Sub(*t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh", int(d/time.Hour))
	default:
		s = fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// table writes aligned rows; call flush when done.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

// row writes one row; cells must already be clean.
func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) flush() error { return t.tw.Flush() }

// printJSON writes a JSON document indented.
func printJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	// Indent keeps trailing newlines; the API ends its documents with one.
	if err := json.Indent(&buf, bytes.TrimSpace(raw), "", "  "); err != nil {
		return fmt.Errorf("indent the answer: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// printValue writes v as indented JSON.
func printValue(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// printLine writes a JSON document compacted on one line (streams).
func printLine(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, bytes.TrimSpace(raw)); err != nil {
		return fmt.Errorf("compact the answer: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// bar draws a progress bar of width cells for done out of total.
func bar(done, total, width int) string {
	filled := width
	if total > 0 {
		filled = min(width, done*width/total)
	}
	return "[" + strings.Repeat("#", filled) + strings.Repeat(".", width-filled) + "]"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
