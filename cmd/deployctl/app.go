package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNotFound = 3
	exitConflict = 4
	// exitUnavailable: the server answered 503 (Redis not answering, or
	// the instance shutting down); the same command may work later.
	exitUnavailable = 5
)

// Defaults of the global flags.
const (
	serverDefault  = "http://127.0.0.1:8080"
	timeoutDefault = 30 * time.Second
	envServer      = "DEPLOYCTL_SERVER"
	envToken       = "DEPLOYCTL_TOKEN"
	outputTable    = "table"
	outputJSON     = "json"
	// outputWide is a table with more columns (tasks: heartbeat, fence,
	// plan).
	outputWide = "wide"
)

// usageError is a bad invocation, caught before any request: exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errHelp means help was asked for and printed: exit 0.
var errHelp = errors.New("deployctl: help printed")

// secret is a flag value that never shows itself: flag's -h output prints a
// flag's default from String, and the token must not appear there.
type secret string

func (s *secret) String() string     { return "" }
func (s *secret) Set(v string) error { *s = secret(v); return nil }

// globals are the flags every command accepts.
type globals struct {
	server  string
	token   secret
	output  string
	timeout time.Duration
	verbose bool
}

var globalNames = map[string]bool{"server": true, "token": true, "o": true, "output": true, "timeout": true, "v": true}

// register adds the global flags to fs, keeping the values already parsed
// (global flags may come before the command or after it).
func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.server, "server", g.server, "API address (env "+envServer+", default "+serverDefault+")")
	fs.Var(&g.token, "token", "bearer token (env "+envToken+"); never printed")
	fs.StringVar(&g.output, "o", g.output, "output format: table, wide (more columns) or json")
	fs.StringVar(&g.output, "output", g.output, "same as -o")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "time limit of each request")
	fs.BoolVar(&g.verbose, "v", g.verbose, "log each request (method, URL, status, duration) to stderr")
}

// app is one run of deployctl.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	now            func() time.Time
	g              globals
	cli            *client
	// tty is true when stdout is a terminal (progress redraws in place).
	tty bool
	// stdinTTY is true when stdin is a terminal (a command may ask).
	stdinTTY bool
	// help prints the running command's help.
	help func()
}

// command is one deployctl command.
type command struct {
	name     string // "plan show"
	synopsis string // arguments after the name
	summary  string
	example  string
	run      func(a *app, ctx context.Context, fs *flag.FlagSet, args []string) error
}

func commandTable() []command {
	return []command{
		{"plan create", "-f FILE [--watch]", "Create (and by default start) a plan from a YAML or JSON file (-f - reads stdin). YAML is converted to JSON and sent as is.",
			"deployctl plan create -f rollout.yaml --watch", (*app).planCreate},
		{"plan show", "ID [--watch]", "Show a plan and its progress. --watch refreshes until the plan is COMPLETED (exit 0), FAILED or CANCELLED (exit 1).",
			"deployctl plan show plan-01JDQZV5X8M7R2K9C3B4N6P0QS --watch", (*app).planShow},
		{"plan list", "[--status S] [--limit N] [--all]", "List plans, newest first. --all follows the cursor to the end.",
			"deployctl plan list --status RUNNING", (*app).planList},
		{"plan tasks", "ID [--status S] [--orphaned] [--all]", "List a plan's tasks in plan order.",
			"deployctl plan tasks plan-01JDQZV5X8M7R2K9C3B4N6P0QS --status FAILED --all", (*app).planTasks},
		{"tasks", "[--status S]... [--orphaned] [--running-longer-than D] [--plan ID] [--stage S] [--since T] [--all]",
			"Search tasks across plans, newest first. --status, --orphaned and --running-longer-than add up (failed or stuck); --plan, --stage and --since narrow.",
			"deployctl tasks --status FAILED --orphaned --running-longer-than 10m", (*app).tasks},
		{"plan start", "ID --reason R", "Start a CREATED plan.",
			`deployctl plan start plan-01JDQZV5X8M7R2K9C3B4N6P0QS --reason "CHG-77 approved"`, planAction("start")},
		{"plan pause", "ID --reason R", "Pause a plan: running tasks finish their stage, no new task starts.",
			`deployctl plan pause plan-01JDQZV5X8M7R2K9C3B4N6P0QS --reason "error rate up"`, planAction("pause")},
		{"plan resume", "ID --reason R [--include-orphaned]", "Resume a paused plan, or take over a plan whose owner instance is gone.",
			`deployctl plan resume plan-01JDQZV5X8M7R2K9C3B4N6P0QS --reason "coord-b died" --include-orphaned`, planAction("resume")},
		{"plan cancel", "ID --reason R", "Cancel a plan.",
			`deployctl plan cancel plan-01JDQZV5X8M7R2K9C3B4N6P0QS --reason "rolled back"`, planAction("cancel")},
		{"plan repair-counts", "ID --reason R", "Recompute a plan's task counts from its task records (if they ever drifted).",
			`deployctl plan repair-counts plan-01JDQZV5X8M7R2K9C3B4N6P0QS --reason "counts disagree with plan tasks"`, planAction("repair-counts")},
		{"plan retry", "ID (--status S ... | --orphaned) [--tenant T ... | --tenants-file F] [--from-stage S | --from-start] --reason R [--dry-run] [--yes]",
			"Retry many of a plan's tasks at once: those in the given statuses (FAILED, PAUSED, CANCELLED) and/or orphaned, optionally only the given tenants, from their checkpoints. Without --yes it first shows the dry run (how many tenants, which) and asks y/N on a terminal; without a terminal it needs --yes. Exit 4 when some selected tenants were skipped (listed with the reason).",
			`deployctl plan retry plan-01JDQZV5X8M7R2K9C3B4N6P0QS --status FAILED --reason "INC-1234 config server fixed"`, (*app).planRetry},
		{"status", "--tenant ID | --tenants-file F", "Show the current task of a tenant, or of every tenant listed in a file (one id a line, # comments; - reads stdin).",
			"deployctl status --tenant t-042", (*app).status},
		{"history", "--tenant ID [--limit N]", "List a tenant's tasks, newest first.",
			"deployctl history --tenant t-042", (*app).history},
		{"checkpoint", "--tenant ID", "Show the checkpoint of a tenant's current task: completed stages and their context data.",
			"deployctl checkpoint --tenant t-042", (*app).checkpoint},
		{"instances", "", "List the coordinator instances seen in the last day: alive, address, version, tasks running.",
			"deployctl instances", (*app).instances},
		{"version", "", "Print deployctl's version and the version of each live server instance.",
			"deployctl version", (*app).version},
		{"timeline", "--tenant ID [--limit N]", "Show the timeline of a tenant's current task, oldest first.",
			"deployctl timeline --tenant t-042", (*app).timeline},
		{"retry", "--tenant ID (--from-checkpoint|--from-start|--from-stage S|--skip [--outputs JSON]) --reason R", "Retry a tenant's task in exactly one mode. --dry-run shows what would run and changes nothing.",
			`deployctl retry --tenant t-042 --from-checkpoint --expected-attempt 1 --reason "INC-1234 config server fixed"`, (*app).retry},
		{"lock show", "--tenant ID", "Show a tenant's lock: holder, lease left, fencing token.",
			"deployctl lock show --tenant t-042", (*app).lockShow},
		{"lock release", "--tenant ID --expected-fence N --reason R", "Break-glass: delete a tenant's lock if its fence is still N (read it with lock show).",
			`deployctl lock release --tenant t-042 --expected-fence 7 --reason "INC-1234 coord-b is gone"`, (*app).lockRelease},
		{"events", "[--follow] [--tenant ID] [--plan ID] [--type T] [--after CURSOR]", "Read the event feed; --follow long-polls forever, resuming from the last cursor (Ctrl-C ends it: exit 0, and the cursor to resume from on stderr).",
			"deployctl events --follow --type task.failed", (*app).events},
		{"task pause", "--tenant ID --reason R", "Ask a tenant's task to pause after its current stage.",
			`deployctl task pause --tenant t-042 --reason "hold for INC-9"`, taskAction("pause")},
		{"task resume", "--tenant ID --reason R", "Resume a tenant's paused task.",
			`deployctl task resume --tenant t-042 --reason "INC-9 over"`, taskAction("resume")},
		{"task cancel", "--tenant ID --reason R", "Cancel a tenant's task.",
			`deployctl task cancel --tenant t-042 --reason "tenant offboarded"`, taskAction("cancel")},
	}
}

// run is deployctl with its outside world passed in: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return runWithInput(ctx, args, os.Stdin, stdout, stderr, getenv)
}

// runWithInput is run reading "-" files from stdin.
func runWithInput(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{
		stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv, now: time.Now,
		g:   globals{output: outputTable, timeout: timeoutDefault},
		tty: isTerminal(stdout, getenv), stdinTTY: isTerminal(stdin, getenv),
	}
	return a.exit(a.main(ctx, args))
}

// isTerminal reports whether w (stdout or stdin) is a terminal: a
// character device that answers the terminal ioctl (/dev/null is a
// character device too, and no terminal).
func isTerminal(w any, getenv func(string) string) bool {
	f, ok := w.(*os.File)
	if !ok || getenv("TERM") == "dumb" {
		return false
	}
	return isatty.IsTerminal(f.Fd())
}

func (a *app) main(ctx context.Context, args []string) error {
	top := flag.NewFlagSet("deployctl", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	top.Usage = func() {}
	a.g.register(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			a.topUsage(a.stdout)
			return errHelp
		}
		return usagef("%v", err)
	}
	rest := top.Args()
	if len(rest) == 0 {
		a.topUsage(a.stderr)
		return usagef("no command given")
	}
	if rest[0] == "help" {
		if len(rest) == 1 {
			a.topUsage(a.stdout)
			return errHelp
		}
		rest = append(rest[1:], "-h")
	}
	cmds := commandTable()
	for _, c := range cmds {
		words := strings.Fields(c.name)
		if len(rest) >= len(words) && strings.Join(rest[:len(words)], " ") == c.name {
			fs := a.flagSet(c)
			return c.run(a, ctx, fs, rest[len(words):])
		}
	}
	// A group ("plan", "lock", "task") without a known subcommand.
	var subs []string
	for _, c := range cmds {
		if group, sub, ok := strings.Cut(c.name, " "); ok && group == rest[0] {
			subs = append(subs, sub)
		}
	}
	switch {
	case len(subs) > 0 && (len(rest) == 1 || rest[1] == "-h" || rest[1] == "--help" || rest[1] == "-help"):
		w, err := a.stderr, usagef("%s needs a subcommand: %s", rest[0], strings.Join(subs, ", "))
		if len(rest) > 1 {
			w, err = a.stdout, errHelp
		}
		fmt.Fprintf(w, "usage: deployctl %s {%s} ...\n\nRun 'deployctl %s SUBCOMMAND -h' for a subcommand's flags.\n", rest[0], strings.Join(subs, "|"), rest[0])
		return err
	case len(subs) > 0:
		return usagef("unknown command %q: deployctl %s takes %s", rest[0]+" "+rest[1], rest[0], strings.Join(subs, ", "))
	}
	return usagef("unknown command %q (deployctl -h lists the commands)", rest[0])
}

func (a *app) topUsage(w io.Writer) {
	fmt.Fprint(w, "usage: deployctl [global flags] COMMAND [flags]\n\ndeployctl drives a deploycoord server over its HTTP API.\n\ncommands:\n")
	for _, c := range commandTable() {
		summary, _, _ := strings.Cut(c.summary, ". ")
		fmt.Fprintf(w, "  %-13s %s\n", c.name, strings.TrimSuffix(summary, "."))
	}
	fmt.Fprint(w, "\nglobal flags (also accepted after the command):\n")
	fs := flag.NewFlagSet("deployctl", flag.ContinueOnError)
	fs.SetOutput(w)
	g := globals{output: outputTable, timeout: timeoutDefault}
	g.register(fs)
	fs.PrintDefaults()
	fmt.Fprint(w, `
exit codes: 0 ok, 1 error, 2 usage, 3 not found (404), 4 conflict (409), 5 unavailable (503: try again).
Run 'deployctl COMMAND -h' for a command's flags and an example.
`)
}

// flagSet returns the flag set of c: its usage prints the command's own
// flags, the global flags and an example.
func (a *app) flagSet(c command) *flag.FlagSet {
	fs := flag.NewFlagSet("deployctl "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// flag calls Usage on every parse error; parse prints help for -h only.
	fs.Usage = func() {}
	a.help = func() {
		w := a.stdout
		fmt.Fprintf(w, "usage: deployctl %s %s\n\n%s\n", c.name, c.synopsis, c.summary)
		own := flag.NewFlagSet(c.name, flag.ContinueOnError)
		own.SetOutput(w)
		n := 0
		fs.VisitAll(func(f *flag.Flag) {
			if !globalNames[f.Name] {
				own.Var(f.Value, f.Name, f.Usage)
				n++
			}
		})
		if n > 0 {
			fmt.Fprint(w, "\nflags:\n")
			own.PrintDefaults()
		}
		fmt.Fprintf(w, "\nglobal flags: --server, --token, -o table|wide|json, --timeout, -v (deployctl -h)\n\nexample:\n  %s\n", c.example)
	}
	return fs
}

// parse parses a command's flags (global ones included, anywhere among the
// arguments), checks the global settings and prepares the API client. It
// returns the positional arguments.
func (a *app) parse(fs *flag.FlagSet, args []string) ([]string, error) {
	a.g.register(fs)
	restore := onceOnly(fs)
	pos, err := parseInterspersed(fs, args)
	restore() // the help prints the flags' own types and defaults
	if errors.Is(err, flag.ErrHelp) {
		a.help()
		return nil, errHelp
	}
	if err != nil {
		return nil, usagef("%v (deployctl %s -h shows the flags)", err, strings.TrimPrefix(fs.Name(), "deployctl "))
	}
	if err := a.setup(); err != nil {
		return nil, err
	}
	return pos, nil
}

// onceOnly makes every flag of fs but the repeatable ones (listFlag,
// statusList) refuse
// a second value: `--status PAUSED --status RUNNING` is a usage error, not
// the last one silently (the API refuses a repeated parameter too).
// It returns the function that puts the flags' own values back, to call
// once parsing is done.
func onceOnly(fs *flag.FlagSet) (restore func()) {
	own := map[*flag.Flag]flag.Value{}
	fs.VisitAll(func(f *flag.Flag) {
		switch f.Value.(type) {
		case *listFlag, *statusList:
			return
		}
		own[f] = f.Value
		o := &onceValue{Value: f.Value}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			f.Value = onceBool{o}
			return
		}
		f.Value = o
	})
	return func() {
		for f, v := range own {
			f.Value = v
		}
	}
}

// onceValue is a flag value that may be set once.
type onceValue struct {
	flag.Value
	set bool
}

func (o *onceValue) Set(v string) error {
	if o.set {
		return errors.New("given more than once")
	}
	o.set = true
	return o.Value.Set(v)
}

// onceBool is an onceValue of a boolean flag (--flag without a value).
type onceBool struct{ *onceValue }

func (onceBool) IsBoolFlag() bool { return true }

// parseInterspersed parses flags found anywhere in args; "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		used := len(args) - len(rest)
		if used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// setup resolves the global flags against the environment and builds the
// client.
func (a *app) setup() error {
	g := &a.g
	if g.server == "" {
		g.server = a.getenv(envServer)
	}
	if g.server == "" {
		g.server = serverDefault
	}
	if g.token == "" {
		g.token = secret(a.getenv(envToken))
	}
	switch g.output {
	case outputTable, outputJSON, outputWide:
	default:
		return usagef("-o %q: want table, wide or json", g.output)
	}
	if g.timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	for _, c := range g.token {
		// Never echo the token: say what is wrong, not what it is.
		if c <= ' ' || c == 0x7f {
			return usagef("the token (--token or %s) holds spaces or control characters a header cannot carry", envToken)
		}
	}
	u, err := url.Parse(g.server)
	if err != nil {
		return usagef("--server is not a valid URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return usagef("--server %q: want http(s)://host[:port][/path]", u.Redacted())
	}
	var verbose io.Writer
	if g.verbose {
		verbose = a.stderr
	}
	a.cli = newClient(u, string(g.token), g.timeout, verbose, a.stderr)
	return nil
}

func (a *app) json() bool { return a.g.output == outputJSON }

// wide reports whether tables get their extra columns (-o wide).
func (a *app) wide() bool { return a.g.output == outputWide }

// exit prints err and returns the exit code it means.
func (a *app) exit(err error) int {
	var (
		usage   *usageError
		api     *apiError
		ended   *planEndedError
		skipped *skippedError
	)
	switch {
	case err == nil, errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, &usage):
		fmt.Fprintf(a.stderr, "error: %s\n", clean(usage.msg))
		return exitUsage
	case errors.As(err, &api):
		fmt.Fprintf(a.stderr, "error: %s\n", clean(api.Error()))
		if a.g.verbose && api.RequestID != "" {
			fmt.Fprintf(a.stderr, "request id: %s\n", clean(api.RequestID))
		}
		switch api.Status {
		case 404:
			return exitNotFound
		case 409:
			return exitConflict
		case 503:
			fmt.Fprintln(a.stderr, "the server could not answer: its Redis is not answering (or it is shutting down); "+
				"nothing was shown, which does not mean there is nothing: try again, or ask another instance")
			return exitUnavailable
		}
		return exitError
	case errors.As(err, &skipped):
		fmt.Fprintf(a.stderr, "error: %s\n", clean(skipped.Error()))
		return exitConflict
	case errors.As(err, &ended):
		fmt.Fprintf(a.stderr, "error: %s\n", clean(ended.Error()))
		return exitError
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(a.stderr, "error: interrupted")
		return exitError
	}
	fmt.Fprintf(a.stderr, "error: %s\n", clean(err.Error()))
	return exitError
}

// Client-side checks of arguments (exit 2 before any request).

func checkTenant(id string) error {
	if id == "" {
		return usagef("--tenant is required")
	}
	if !task.ValidTenantID(id) {
		return usagef("tenant id %s is not valid: it must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", task.Quote(id))
	}
	return nil
}

func checkPlanID(id string) error {
	if !plan.ValidID(id) {
		return usagef("plan id %s is not valid: want plan-<26 characters>, as plan create or plan list print it", task.Quote(id))
	}
	return nil
}

func checkReason(reason string) error {
	if reason == "" {
		return usagef("--reason is required: it goes into the timeline and the audit trail")
	}
	if err := plan.CheckReason(reason); err != nil {
		return usagef("--reason: %s", strings.TrimPrefix(err.Error(), plan.ErrInvalid.Error()+": reason: "))
	}
	return nil
}

// onePlanID returns the single positional plan id.
func onePlanID(pos []string) (string, error) {
	switch len(pos) {
	case 0:
		return "", usagef("a plan id is required")
	case 1:
		return pos[0], checkPlanID(pos[0])
	}
	return "", usagef("unexpected arguments %q: only one plan id is taken", pos[1:])
}

// parseNoArgs parses a command's flags and refuses positional arguments.
func (a *app) parseNoArgs(fs *flag.FlagSet, args []string) error {
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	return noArgs(pos)
}

// parseTenant is parseNoArgs for a command about one tenant (--tenant).
func (a *app) parseTenant(fs *flag.FlagSet, args []string, tenant *string) error {
	if err := a.parseNoArgs(fs, args); err != nil {
		return err
	}
	return checkTenant(*tenant)
}

func noArgs(pos []string) error {
	if len(pos) > 0 {
		return usagef("unexpected arguments %q", pos)
	}
	return nil
}

func checkLimit(n int) error {
	if n < 0 || n > plan.LimitMax {
		return usagef("--limit %d: want 1..%d", n, plan.LimitMax)
	}
	return nil
}
