package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
)

// tourStep is one shell block of the README's tour and the output the
// README shows under it (nil when it shows none).
type tourStep struct {
	heading string
	script  string
	want    []string
	// followed: want is what a command left running in another terminal
	// ("--follow") printed meanwhile — an output block of its own, after a
	// paragraph that names that terminal; script is empty.
	followed bool
}

// tourSteps returns the shell blocks of the README from the line starting
// with from up to the next "## " section, each with the output block that
// follows it.
func tourSteps(readme, from string) ([]tourStep, error) {
	start := strings.Index(readme, "\n"+from)
	if start < 0 {
		return nil, fmt.Errorf("no line %q", from)
	}
	end := strings.Index(readme[start+1:], "\n## ")
	if end < 0 {
		return nil, fmt.Errorf(`no "## " section after %q`, from)
	}
	end++
	lines := strings.Split(readme[start:start+end], "\n")
	var (
		steps   []tourStep
		heading string
		text    string // the last line of prose
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
		case strings.HasPrefix(l, "### "), strings.HasPrefix(l, "**"):
			heading = strings.Trim(strings.TrimPrefix(l, "### "), "*")
			if b, _, ok := strings.Cut(heading, "**"); ok {
				heading = b
			}
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
		case l == "```":
			// An output block of its own: what another terminal printed.
			want, next, err := block(i)
			if err != nil {
				return nil, err
			}
			if strings.Contains(text, "Terminal 4") {
				steps = append(steps, tourStep{heading: heading, want: want, followed: true})
			}
			i = next
		case strings.HasPrefix(l, "```"):
			_, next, err := block(i) // yaml, json...: not run
			if err != nil {
				return nil, err
			}
			i = next
		default:
			if strings.TrimSpace(l) != "" {
				text = l
			}
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

// readOnly reports whether a command of the README only looks (a GET with
// curl, a deployctl read) or waits: what can be run again until the state
// it shows is reached.
func readOnly(cmd string) bool {
	switch {
	case strings.HasPrefix(cmd, "sleep "):
		return true
	case strings.HasPrefix(cmd, "curl "):
		return !strings.Contains(cmd, "-X ")
	case strings.Contains(cmd, "--watch"), strings.Contains(cmd, "--follow"):
		return false
	}
	for _, look := range []string{"events", "status", "timeline", "tasks", "lock show", "plan show"} {
		if strings.HasPrefix(cmd, "deployctl "+look+" ") {
			return true
		}
	}
	return false
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

// The deployctl flows show outputs "trimmed", with times relative to when
// they were taken and columns as wide as their content: looseVariable and
// looseMatch compare what they show, not how it is laid out.
var looseVariable = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`task-[0-9A-HJKMNP-TV-Z]{26}`), "task-<id>"},
	{regexp.MustCompile(`\b\d{13}(-\d+)?\b`), "<n>"},                   // fences, feed cursors
	{regexp.MustCompile(`\b(\d+[a-z]+)+ ago\b|\bjust now\b`), "<ago>"}, // relative times
	{regexp.MustCompile(`^TTL +\S+`), "TTL <ttl>"},
	{regexp.MustCompile(`\b(PENDING|RUNNING|PAUSED|COMPLETED|FAILED|CANCELLED) \d+\b`), "$1 <n>"}, // counts of a moment (TASKS)
	{regexp.MustCompile(`\s+`), " "},
}

func looseNormalize(lines []string) []string {
	out := normalize(lines)
	for i, l := range out {
		for _, v := range looseVariable {
			l = v.re.ReplaceAllString(l, v.with)
		}
		out[i] = strings.TrimSpace(l)
	}
	return out
}

// looseMatch reports whether the lines the README shows (normalized; "..."
// marks what it trimmed) come in got in their order; a line the README cut
// with "…" matches a line it starts (or that starts it, when both were cut).
func looseMatch(want, got []string) bool {
	j := 0
	for _, w := range want {
		if w == "..." {
			continue
		}
		for ; j < len(got); j++ {
			if w == got[j] {
				break
			}
			if strings.HasSuffix(w, "…") {
				wp, gp := strings.TrimSuffix(w, "…"), strings.TrimSuffix(got[j], "…")
				if strings.HasPrefix(gp, wp) || strings.HasSuffix(got[j], "…") && strings.HasPrefix(wp, gp) {
					break
				}
			}
		}
		if j == len(got) {
			return false
		}
		j++
	}
	return true
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
	dir   string
	state string
	env   []string
	// merged: stderr goes with stdout, in order (the deployctl flows show
	// both as a terminal does); otherwise anything on stderr fails.
	merged bool
	// follow is the command left running in another terminal, if any.
	follow *followProc
}

// followProc is a command the README leaves running in a terminal of its
// own ("deployctl events --follow").
type followProc struct {
	cmd         *exec.Cmd
	out, stderr logSink // written by the process, read by the test
	done        chan error
}

// startFollow starts cmd (a simple command: words, a "#" comment) with the
// shell's environment, its program looked up in the shell's PATH.
func (s *tourShell) startFollow(t *testing.T, line string) {
	t.Helper()
	if s.follow != nil {
		t.Fatalf("a second command left running: %q", line)
	}
	line, _, _ = strings.Cut(line, "#")
	words := strings.Fields(line)
	prog := words[0]
	for _, kv := range s.env {
		if path, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, d := range filepath.SplitList(path) {
				if _, err := os.Stat(filepath.Join(d, prog)); err == nil {
					prog = filepath.Join(d, prog)
					break
				}
			}
		}
	}
	f := &followProc{cmd: exec.Command(prog, words[1:]...), done: make(chan error, 1)}
	f.cmd.Dir, f.cmd.Env = s.dir, s.env
	f.cmd.Stdout, f.cmd.Stderr = &f.out, &f.stderr
	if err := f.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	go func() { f.done <- f.cmd.Wait() }()
	t.Cleanup(func() {
		_ = f.cmd.Process.Kill()
		<-f.done
	})
	s.follow = f
}

// stopFollow ends the command left running as the README says: Ctrl-C
// (SIGINT), exit 0, and the cursor to resume from on stderr.
func (s *tourShell) stopFollow(t *testing.T) {
	t.Helper()
	f := s.follow
	if f == nil {
		t.Fatal("README: no command was left running (--follow)")
	}
	if err := f.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-f.done:
		f.done <- err // for the cleanup
		if err != nil {
			t.Errorf("%v after Ctrl-C: %v (the README says exit 0); stderr: %s", f.cmd.Args, err, f.stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%v did not end within 20s of Ctrl-C", f.cmd.Args)
	}
	if !regexp.MustCompile(`next: --after \d+-\d+`).MatchString(f.stderr.String()) {
		t.Errorf("%v printed no cursor to resume from on stderr after Ctrl-C: %q", f.cmd.Args, f.stderr.String())
	}
}

func (s *tourShell) run(commands []string) ([]string, error) {
	if len(commands) == 0 {
		return nil, nil
	}
	script := fmt.Sprintf("[ -f %[1]q ] && . %[1]q\n%[2]s\n__rc=$?\n"+
		"{ for v in PLAN BULK ROLLOUT SOAK FENCE; do declare -p $v; done; } > %[1]q 2>/dev/null\nexit $__rc\n",
		s.state, strings.Join(commands, "\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = s.dir, s.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if s.merged {
		cmd.Stderr = &stdout
	}
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

// readREADME returns the repository's README.
func readREADME(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmeSection returns the README from the line heading (a whole line)
// on, starting with the newline before it.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	text := readREADME(t)
	start := strings.Index(text, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("README: no %q section", heading)
	}
	return text[start:]
}

// buildTool builds the command in pkg (a directory) into bin.
func buildTool(t *testing.T, pkg, bin string) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	if out, err := exec.Command(gobin, "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
}

// startDemoTarget builds and starts cmd/demotarget failing what fail says,
// and returns its address.
func startDemoTarget(t *testing.T, dir, fail string) string {
	t.Helper()
	bin := filepath.Join(dir, "demotarget")
	buildTool(t, "../demotarget", bin)
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

// TestREADMETour runs the README's 5-minute tour and then its "SRE's flows
// with deployctl" as written — their shell blocks, with bash, curl and jq,
// against the deploycoord binary started as "Terminal 2" starts it (the
// embedded Redis), cmd/demotarget as "Terminal 1" does, and deployctl on
// the PATH — and compares each block's output with the output the README
// shows. Only the addresses (the README's fixed ports 8080 and 9000 become
// free ones) and the files' paths are changed; "go install" is the test's
// build, and the command the README leaves running in a fourth terminal
// ("--follow") runs in the background: what the README shows it printed is
// compared with what it printed, and at the end Ctrl-C (SIGINT) must end it
// with exit 0 and the cursor to resume from on stderr.
//
// The tour's outputs must be the README's but for plan ids, times and
// fencing tokens. The deployctl flows show theirs "trimmed", with relative
// times and aligned columns: there the lines the README shows must come in
// that order (looseMatch). A block ending in commands that only look (GETs,
// sleeps, deployctl's reads) has those run again until the output is the
// README's (the tour says "after the 5 seconds"), for at most a minute.
// Before the take-over of t-04 the test waits, as the README's reader does,
// until the task shows orphaned.
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
	readme := readREADME(t)
	tour, err := tourSteps(readme, "### 1. ")
	if err != nil {
		t.Fatalf("README: %v", err)
	}
	flows, err := tourSteps(readme, "## The SRE's flows with `deployctl`")
	if err != nil {
		t.Fatalf("README: %v", err)
	}
	if len(tour) < 8 || len(flows) < 7 {
		t.Fatalf("README: %d shell blocks in the tour and %d in the deployctl flows, want at least 8 and 7", len(tour), len(flows))
	}
	if !slices.ContainsFunc(flows, func(s tourStep) bool { return s.followed }) {
		t.Fatal(`README: the deployctl flows show no "Terminal 4 meanwhile printed" output`)
	}
	dir := t.TempDir()
	demo := startDemoTarget(t, dir, "t-03/verify")
	buildTool(t, "../deployctl", filepath.Join(dir, "bin", "deployctl"))
	// Named as the instance of the README's outputs.
	n := startNode(t, "vm-22075", []string{"DEPLOYCOORD_LISTEN=127.0.0.1:0", "DEPLOYCOORD_INLINE_HTTP_HOSTS=" + demo})
	server := strings.TrimPrefix(n.base, "http://")
	addrs := strings.NewReplacer("localhost:8080", server, "localhost:9000", demo, "127.0.0.1:9000", demo,
		"/tmp/", dir+"/")
	env := append(cleanEnv(), "NO_PROXY=*", "no_proxy=*", "DEPLOYCTL_SERVER="+n.base)
	for i, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			env[i] = "PATH=" + filepath.Join(dir, "bin") + string(os.PathListSeparator) + strings.TrimPrefix(kv, "PATH=")
		}
	}
	sh := &tourShell{dir: dir, state: filepath.Join(dir, "tour.vars"), env: env}
	for i, s := range tour {
		runStep(t, sh, i+1, s, addrs, false)
	}
	sh.merged = true
	for i, s := range flows {
		if strings.Contains(s.script, "take over") {
			waitOrphaned(t, n, "t-04")
		}
		runStep(t, sh, len(tour)+i+1, s, addrs, true)
	}
	sh.stopFollow(t)
}

// runStep runs one block of the README (see TestREADMETour) and fails the
// test unless its output is the README's.
func runStep(t *testing.T, sh *tourShell, i int, s tourStep, addrs *strings.Replacer, loose bool) {
	t.Helper()
	if s.followed {
		want := looseNormalize(s.want)
		var got []string
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(300 * time.Millisecond) {
			if sh.follow == nil {
				t.Fatalf("%s, block %d: the README shows what a command left running printed, and none runs", s.heading, i)
			}
			got = looseNormalize(strings.Split(strings.TrimRight(sh.follow.out.String(), "\n"), "\n"))
			if looseMatch(want, got) || time.Now().After(deadline) {
				break
			}
		}
		if !looseMatch(want, got) {
			t.Fatalf("%s, block %d: %v\n\nthe README shows:\n%s\n\nit printed:\n%s", s.heading, i, sh.follow.cmd.Args,
				strings.Join(want, "\n"), strings.Join(got, "\n"))
		}
		return
	}
	var cmds []string
	for _, c := range shellCommands(addrs.Replace(s.script)) {
		switch {
		case strings.HasPrefix(c, "go install "):
			continue // the test built it
		case strings.Contains(c, "--follow"):
			sh.startFollow(t, c) // "terminal 4"
			continue
		}
		cmds = append(cmds, c)
	}
	k := len(cmds)
	for k > 0 && readOnly(cmds[k-1]) {
		k--
	}
	head, err := sh.run(cmds[:k])
	if err != nil {
		t.Fatalf("%s, block %d:\n%s\n%v", s.heading, i, s.script, err)
	}
	norm := normalize
	if loose {
		norm = looseNormalize
	}
	want := norm(s.want)
	same := func(got []string) bool {
		if loose {
			return looseMatch(want, got)
		}
		return strings.Join(got, "\n") == strings.Join(want, "\n")
	}
	var got []string
	for deadline, tail := time.Now().Add(time.Minute), cmds[k:]; ; {
		out, err := sh.run(tail)
		if err != nil {
			t.Fatalf("%s, block %d:\n%s\n%v", s.heading, i, s.script, err)
		}
		got = norm(append(append([]string(nil), head...), out...))
		if s.want == nil || same(got) || len(tail) == 0 || time.Now().After(deadline) {
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
	if s.want != nil && !same(got) {
		t.Fatalf("%s, block %d:\n%s\n\nthe README shows:\n%s\n\nit printed:\n%s", s.heading, i, s.script,
			strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
}

// waitOrphaned waits until the tenant's task shows orphaned (its lock was
// released under it: the holder stops at its next renewal).
func waitOrphaned(t *testing.T, n *node, tenant string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		if n.task(tenant).Orphaned {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task of %s did not show orphaned within 90s", tenant)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestREADMEConfigurationTable checks the README's table of settings
// against the binary's: every setting is a row with its variable, its flag
// and its default, and every variable of the table is a setting. A default
// the binary computes (an empty default, like the instance id's
// <hostname>-<pid>) may be shown as what it becomes.
func TestREADMEConfigurationTable(t *testing.T) {
	t.Parallel()
	section := readmeSection(t, "## Configuration")
	type row struct{ flag, def string }
	rows := map[string]row{}
	code := regexp.MustCompile("`([^`]*)`")
	for _, l := range strings.Split(section, "\n")[2:] {
		if strings.HasPrefix(l, "## ") || strings.HasPrefix(l, "### ") {
			break
		}
		if !strings.HasPrefix(l, "| `DEPLOYCOORD_") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), " | ")
		if len(cells) < 4 {
			t.Fatalf("README: a row of %d cells: %q", len(cells), l)
		}
		var envs, flags []string
		for _, m := range code.FindAllStringSubmatch(cells[0], -1) {
			envs = append(envs, m[1])
		}
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			flags = append(flags, m[1])
		}
		if len(envs) != len(flags) {
			t.Fatalf("README: %d variables and %d flags in %q", len(envs), len(flags), l)
		}
		def := strings.TrimSpace(cells[2])
		if m := code.FindStringSubmatch(def); m != nil && m[0] == def {
			def = m[1]
		} else if strings.HasPrefix(def, "*(") {
			def = "" // *(empty)*, *(none)*, *(the listen address)*: computed or none
		}
		for i, e := range envs {
			if _, dup := rows[e]; dup {
				t.Errorf("README: %s has two rows", e)
			}
			rows[e] = row{flags[i], def}
		}
	}
	if len(rows) == 0 {
		t.Fatal("README: no settings in the configuration table")
	}
	for _, s := range settings() {
		r, ok := rows[s.env]
		if !ok {
			t.Errorf("README: %s (-%s) is not in the configuration table", s.env, s.flag)
			continue
		}
		delete(rows, s.env)
		if r.flag != "-"+s.flag {
			t.Errorf("README: %s has flag %s, the binary -%s", s.env, r.flag, s.flag)
		}
		if r.def != s.def && s.def != "" {
			t.Errorf("README: %s defaults to %q, the binary to %q", s.env, r.def, s.def)
		}
	}
	for e := range rows {
		t.Errorf("README: %s is in the configuration table but is no setting of the binary", e)
	}
}

// TestREADMEPipelineExample starts the server with the README's example
// pipelines file ("### Pipelines") — refused without DEPLOYCOORD_ALLOW_EXEC,
// as the README says of its exec stage, and served with it — and sends the
// README's plan request naming the pipeline: the plan is created with the
// pipeline's three stages.
func TestREADMEPipelineExample(t *testing.T) {
	t.Parallel()
	section := readmeSection(t, "### Pipelines")
	yamlAt := strings.Index(section, "```yaml\n")
	if yamlAt < 0 {
		t.Fatal("README: no yaml block under Pipelines")
	}
	yamlBody, _, ok := strings.Cut(section[yamlAt+len("```yaml\n"):], "\n```")
	if !ok {
		t.Fatal("README: the pipelines yaml block is not closed")
	}
	path := writeFile(t, "pipelines.yaml", yamlBody+"\n")

	if m, _, err := runMain(t, "-pipelines", path); err == nil {
		t.Fatalf("the README's pipelines (an exec stage) served without DEPLOYCOORD_ALLOW_EXEC on %s", m.Addr)
	} else if !strings.Contains(err.Error(), "exec") {
		t.Fatalf("refused without naming exec: %v", err)
	}

	m, _, err := runMain(t, "-pipelines", path, "-allow-exec")
	if err != nil {
		t.Fatalf("the README's pipelines with -allow-exec: %v", err)
	}
	shAt := strings.Index(section, "```sh\n")
	if shAt < 0 {
		t.Fatal("README: no plan request under Pipelines")
	}
	script, _, _ := strings.Cut(section[shAt+len("```sh\n"):], "\n```")
	_, body, ok := strings.Cut(script, "-d '")
	if !ok || !strings.HasSuffix(body, "'") {
		t.Fatalf("README: no -d '...' body in %q", script)
	}
	n := local(t, m)
	created := must[httpapi.Plan](n, http.MethodPost, "/v1/plans", json.RawMessage(strings.TrimSuffix(body, "'")), http.StatusCreated)
	if created.Name != "rollout-1.2.3" || created.Pipeline != "standard-deploy" || created.TotalTasks != 2 ||
		!slices.Equal(created.Stages, []string{"push-config", "settle", "migrate"}) {
		t.Fatalf("created %+v", created)
	}
}
