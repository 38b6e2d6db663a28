package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/docstest"
)

// docsCommands returns every deployctl command of the shell blocks of a
// Markdown document: from "deployctl" at the start of a command (a line, or
// after "$(", ";", "&&") to the end of that command (an unquoted "|", ";",
// "&", ")" or "#"), continuation lines joined.
func docsCommands(doc string) []string {
	var out []string
	for _, l := range docstest.ShellLines(doc) {
		out = append(out, commandsIn(l)...)
	}
	return out
}

// commandsIn returns the deployctl commands of one shell line.
func commandsIn(l string) []string {
	var out []string
	start := true // at the start of a command
	for i := 0; i < len(l); {
		if start {
			rest := strings.TrimLeft(l[i:], " ")
			if strings.HasPrefix(rest, "deployctl ") || rest == "deployctl" {
				j := len(l) - len(rest)
				end := commandEnd(l, j)
				out = append(out, strings.TrimSpace(l[j:end]))
				i, start = end, false
				continue
			}
		}
		start = false
		switch {
		case l[i] == '#' && (i == 0 || l[i-1] == ' '):
			return out // a comment
		case strings.HasPrefix(l[i:], "$("), strings.HasPrefix(l[i:], "&&"):
			i += 2
			start = true
		case l[i] == ';':
			i++
			start = true
		case l[i] == '\'' || l[i] == '"':
			q := l[i]
			i++
			for i < len(l) && l[i] != q {
				i++
			}
			i++
		default:
			i++
		}
	}
	return out
}

// commandEnd is where the command starting at i ends.
func commandEnd(l string, i int) int {
	for i < len(l) {
		switch c := l[i]; c {
		case '\'', '"':
			i++
			for i < len(l) && l[i] != c {
				i++
			}
		case '|', ';', '&', ')', '#':
			return i
		}
		i++
	}
	return i
}

// shellWords splits a command into words as a shell does for these
// (quotes, no escapes), putting values for the documents' variables.
func shellWords(cmd string, vars map[string]string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool
	)
	flush := func() {
		if in {
			words = append(words, cur.String())
		}
		cur.Reset()
		in = false
	}
	for i := 0; i < len(cmd); i++ {
		switch c := cmd[i]; {
		case c == ' ' || c == '\t':
			flush()
		case c == '\'' || c == '"':
			j := strings.IndexByte(cmd[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unclosed quote in %q", cmd)
			}
			cur.WriteString(cmd[i+1 : i+1+j])
			i += 1 + j
			in = true
		case c == '$':
			j := i + 1
			for j < len(cmd) && (cmd[j] == '_' || cmd[j] >= 'A' && cmd[j] <= 'Z' || cmd[j] >= '0' && cmd[j] <= '9') {
				j++
			}
			name := cmd[i+1 : j]
			v, ok := vars[name]
			if !ok {
				return nil, fmt.Errorf("unknown variable $%s in %q", name, cmd)
			}
			cur.WriteString(v)
			i = j - 1
			in = true
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	flush()
	return words, nil
}

// TestDocsCommandsParse runs every deployctl command of the README's and
// the runbook's shell blocks, as written, against a server that is not
// there: each must get past its flags and arguments (exit 1, the server
// unreachable; 0 for -h) — none may be a usage error (exit 2), so the
// documents name no flag, command or argument deployctl does not take.
func TestDocsCommandsParse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.yaml")
	if err := os.WriteFile(plan, []byte("name: docs\nstages: [{name: s, kind: noop}]\ntenants: [{tenantId: t-1}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"PLAN": "plan-01M80EY974CD6269H6GG9KXZ9H", "ROLLOUT": "plan-01M80EY974CD6269H6GG9KXZ9H",
		"SOAK": "plan-01M80EZ629Y0MNQ9AYTE3K2QMR", "BULK": "plan-01M887BG10WVJKZ3G8HMMSAVMC", "FENCE": "7"}
	env := map[string]string{"DEPLOYCTL_SERVER": "http://127.0.0.1:1"} // nothing listens on port 1
	total := 0
	for _, doc := range []string{"../../README.md", "../../docs/operations.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		cmds := docsCommands(string(b))
		if len(cmds) < 10 {
			t.Fatalf("%s: %d deployctl commands found, want at least 10: %q", doc, len(cmds), cmds)
		}
		total += len(cmds)
		for _, c := range cmds {
			words, err := shellWords(c, vars)
			if err != nil {
				t.Errorf("%s: %v", doc, err)
				continue
			}
			args := words[1:]
			for i := range args {
				if i > 0 && (args[i-1] == "-f" || args[i-1] == "--file") {
					args[i] = plan
				}
			}
			// --follow and --watch would wait for the server: a second is
			// enough for a usage error to show.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			r := runCLI(t, ctx, env, "", args...)
			cancel()
			want := 1
			if len(args) > 0 && (args[len(args)-1] == "-h" || args[len(args)-1] == "--help") {
				want = 0
			}
			if r.code == 2 || r.code != want && !(ctx.Err() != nil && r.code != 2) {
				t.Errorf("%s: %s\nexit %d, want %d (usage errors exit 2)\n%s", doc, c, r.code, want, r)
			}
		}
	}
	t.Logf("%d deployctl commands of the documents parsed", total)
}
