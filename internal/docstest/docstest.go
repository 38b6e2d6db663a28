// Package docstest reads the shell blocks of the repository's Markdown
// documents for the tests that keep those documents true (the
// deployctl commands and API calls in the README and the runbook).
package docstest

import "strings"

// ShellLines returns the command lines of doc's shell blocks ("```sh"),
// in order, each line continued with a trailing "\" joined with the next
// (the backslash dropped).
func ShellLines(doc string) []string {
	var (
		out  []string
		in   bool
		line strings.Builder
	)
	for _, l := range strings.Split(doc, "\n") {
		switch {
		case l == "```sh":
			in = true
			continue
		case in && strings.HasPrefix(l, "```"):
			in = false
			if line.Len() > 0 { // a block ending in "\": what there is
				out = append(out, line.String())
				line.Reset()
			}
			continue
		case !in:
			continue
		}
		if before, ok := strings.CutSuffix(l, `\`); ok {
			line.WriteString(before)
			continue
		}
		line.WriteString(l)
		out = append(out, line.String())
		line.Reset()
	}
	return out
}
