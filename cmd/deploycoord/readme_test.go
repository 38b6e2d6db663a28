package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// tourStep is one shell block of the README's tour and the output the
// README shows under it (nil when it shows none).
type tourStep struct {
	heading string
	script  string
	want    []string
}

// tourSteps returns the shell blocks of the README's "A 5-minute tour", from
// "### 1." up to the next "## " section, each with the output block that
// follows it.
func tourSteps(readme string) ([]tourStep, error) {
	start := strings.Index(readme, "\n### 1. ")
	if start < 0 {
		return nil, fmt.Errorf(`no "### 1." heading`)
	}
	end := strings.Index(readme[start:], "\n## ")
	if end < 0 {
		return nil, fmt.Errorf(`no "## " section after the tour`)
	}
	lines := strings.Split(readme[start:start+end], "\n")
	var (
		steps   []tourStep
		heading string
	)
	block := func(i int) (body []string, next int, err error) {
		for j := i + 1; j < len(lines); j++ {
			if lines[j] == "```" {
				return lines[i+1 : j], j + 1, nil
			}
		}
		return nil, 0, fmt.Errorf("unclosed block after %q", lines[i])
	}
	for i := 0; i < len(lines); {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "### "):
			heading = strings.TrimPrefix(l, "### ")
			i++
		case l == "```sh":
			body, next, err := block(i)
			if err != nil {
				return nil, err
			}
			s := tourStep{heading: heading, script: strings.Join(body, "\n")}
			j := next
			for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
				j++
			}
			if j < len(lines) && lines[j] == "```" {
				want, after, err := block(j)
				if err != nil {
					return nil, err
				}
				s.want, next = want, after
			}
			steps = append(steps, s)
			i = next
		default:
			i++
		}
	}
	return steps, nil
}

// shellCommands splits a shell block into its commands: a line ending in
// "\" or "|" goes on, and a here-document runs to its "EOF".
func shellCommands(script string) []string {
	var (
		out  []string
		cur  []string
		here bool
	)
	for _, l := range strings.Split(script, "\n") {
		if len(cur) == 0 && strings.TrimSpace(l) == "" {
			continue
		}
		cur = append(cur, l)
		switch {
		case here:
			if l == "EOF" {
				here = false
			} else {
				continue
			}
		case strings.Contains(l, "<<'EOF'") || strings.Contains(l, "<<EOF"):
			here = true
			continue
		case strings.HasSuffix(l, `\`) || strings.HasSuffix(l, "|"):
			continue
		}
		out = append(out, strings.Join(cur, "\n"))
		cur = nil
	}
	if len(cur) > 0 {
		out = append(out, strings.Join(cur, "\n"))
	}
	return out
}

// readOnly reports whether a tour command only looks (a GET with curl) or
// waits: what can be run again until the state it shows is reached.
func readOnly(cmd string) bool {
	return strings.HasPrefix(cmd, "sleep ") || strings.HasPrefix(cmd, "curl ") && !strings.Contains(cmd, "-X ")
}

var tourVariable = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`plan-[0-9A-HJKMNP-TV-Z]{26}`), "plan-<id>"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), "<time>"},
	{regexp.MustCompile(`"fence": \d+`), `"fence": <n>`},
}

// normalize replaces what differs from run to run (plan ids, times, fencing
// tokens), expands tabs as a terminal does (every 8 columns: the README
// shows jq's @tsv as it looks) and drops trailing blanks.
func normalize(lines []string) []string {
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		l = expandTabs(l)
		for _, v := range tourVariable {
			l = v.re.ReplaceAllString(l, v.with)
		}
		out = append(out, strings.TrimRight(l, " \t"))
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

func expandTabs(l string) string {
	if !strings.Contains(l, "\t") {
		return l
	}
	var b strings.Builder
	col := 0
	for _, r := range l {
		if r == '\t' {
			n := 8 - col%8
			b.WriteString(strings.Repeat(" ", n))
			col += n
			continue
		}
		b.WriteRune(r)
		col++
	}
	return b.String()
}

// tourShell runs tour commands with bash, keeping the variables the tour
// sets ($PLAN, $BULK) from one block to the next, as one terminal would.
type tourShell struct {
	t     *testing.T
	dir   string
	state string
	env   []string
}

func (s *tourShell) run(commands []string) ([]string, error) {
	if len(commands) == 0 {
		return nil, nil
	}
	script := fmt.Sprintf("[ -f %[1]q ] && . %[1]q\n%[2]s\n__rc=$?\n{ declare -p PLAN; declare -p BULK; } > %[1]q 2>/dev/null\nexit $__rc\n",
		s.state, strings.Join(commands, "\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = s.dir, s.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	if stderr.Len() > 0 {
		return nil, fmt.Errorf("wrote to stderr:\n%s", &stderr)
	}
	if stdout.Len() == 0 {
		return nil, nil
	}
	return strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n"), nil
}

// startDemoTarget builds and starts cmd/demotarget failing what fail says,
// and returns its address.
func startDemoTarget(t *testing.T, dir, fail string) string {
	t.Helper()
	bin := filepath.Join(dir, "demotarget")
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	if out, err := exec.Command(gobin, "build", "-o", bin, "../demotarget").CombinedOutput(); err != nil {
		t.Fatalf("go build ../demotarget: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0", "-fail", fail)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, a, ok := strings.Cut(sc.Text(), "listening on "); ok {
				a, _, _ = strings.Cut(a, ";")
				addr <- a
			}
		}
	}()
	select {
	case a := <-addr:
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("demotarget did not say where it listens within 30s")
		return ""
	}
}

// TestREADMETour runs the README's 5-minute tour as written — its shell
// blocks, with bash, curl and jq, against the deploycoord binary started as
// "Terminal 2" starts it (the embedded Redis) and cmd/demotarget as
// "Terminal 1" does — and compares each block's output with the output the
// README shows, plan ids, times and fencing tokens aside. Only the
// addresses (the README's fixed ports 8080 and 9000 become free ones) and
// the plan file's path are changed. A block ending in commands that only
// look (GETs, sleeps) has those run again until the output is the README's
// (the tour says "after the 5 seconds"), for at most a minute.
func TestREADMETour(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("DEPLOYCOORD_REQUIRE_TOOLS") == "1" {
				t.Fatalf("%s is not installed (DEPLOYCOORD_REQUIRE_TOOLS=1): %v", tool, err)
			}
			t.Skipf("the README's tour needs %s: %v", tool, err)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	steps, err := tourSteps(string(readme))
	if err != nil {
		t.Fatalf("README: %v", err)
	}
	if len(steps) < 8 {
		t.Fatalf("README: %d shell blocks in the tour, want at least 8", len(steps))
	}
	dir := t.TempDir()
	demo := startDemoTarget(t, dir, "t-03/verify")
	n := startNode(t, "tour", []string{"DEPLOYCOORD_LISTEN=127.0.0.1:0", "DEPLOYCOORD_INLINE_HTTP_HOSTS=" + demo})
	addrs := strings.NewReplacer("localhost:8080", strings.TrimPrefix(n.base, "http://"),
		"localhost:9000", demo, "127.0.0.1:9000", demo, "/tmp/tour-plan.json", filepath.Join(dir, "tour-plan.json"))
	sh := &tourShell{t: t, dir: dir, state: filepath.Join(dir, "tour.vars"),
		env: append(cleanEnv(), "NO_PROXY=*", "no_proxy=*")}
	for i, s := range steps {
		cmds := shellCommands(addrs.Replace(s.script))
		k := len(cmds)
		for k > 0 && readOnly(cmds[k-1]) {
			k--
		}
		head, err := sh.run(cmds[:k])
		if err != nil {
			t.Fatalf("%s, block %d:\n%s\n%v", s.heading, i+1, s.script, err)
		}
		want := normalize(s.want)
		var got []string
		for deadline, tail := time.Now().Add(time.Minute), cmds[k:]; ; {
			out, err := sh.run(tail)
			if err != nil {
				t.Fatalf("%s, block %d:\n%s\n%v", s.heading, i+1, s.script, err)
			}
			got = normalize(append(append([]string(nil), head...), out...))
			if s.want == nil || strings.Join(got, "\n") == strings.Join(want, "\n") || len(tail) == 0 || time.Now().After(deadline) {
				break
			}
			// Look again, without the waits: the README's state comes soon.
			var looks []string
			for _, c := range tail {
				if !strings.HasPrefix(c, "sleep ") {
					looks = append(looks, c)
				}
			}
			tail = looks
			time.Sleep(300 * time.Millisecond)
		}
		if s.want != nil && strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("%s, block %d:\n%s\n\nthe README shows:\n%s\n\nit printed:\n%s", s.heading, i+1, s.script,
				strings.Join(want, "\n"), strings.Join(got, "\n"))
		}
	}
}
