package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Callgrind is a throwaway redis-server run under valgrind's callgrind
// tool, which counts the instructions the server executes: the Redis work
// of a piece of code as a figure that does not move with the machine's
// load. INFO's CPU time moves by a third between runs of the same code on
// a shared machine; the count moves only by what batching changes (the
// same writes sharing fewer or more pipelines and script calls), a few
// percent. It counts the server's user-space work — commands, scripts,
// the event loop, its cron, the allocator — not the kernel's (system
// calls, TCP). Redis runs some 50 times slower under it: for measurements,
// not for every test.
type Callgrind struct {
	Addr string
	p    *proc
	out  string // the dump files' directory
}

// StartCallgrind starts redis-server under callgrind on a free port, like
// StartServer, and stops it when the test ends. Without valgrind and
// callgrind_control (Debian: valgrind) it skips the test, or fails it when
// real Redis is Required, as StartServer does without redis-server.
func StartCallgrind(t testing.TB, args ...string) *Callgrind {
	t.Helper()
	if why := binaries(false); why != "" {
		unreachable(t, why)
	}
	for _, b := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(b); err != nil {
			unreachable(t, fmt.Sprintf("no %s on the PATH (Debian package valgrind; .ci/run installs it)", b))
		}
	}
	c, err := NewCallgrind(t.TempDir(), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// NewCallgrind starts redis-server under callgrind on a free port, with
// its files under dir and extra config args; Close stops it.
func NewCallgrind(dir string, args ...string) (*Callgrind, error) {
	p, err := newProc(dir, append([]string{"--save", "", "--appendonly", "no"}, args...)...)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(p.dir, "callgrind")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	p.wrap = []string{"valgrind", "--tool=callgrind", "--callgrind-out-file=" + filepath.Join(out, "callgrind.out"),
		"--log-file=" + filepath.Join(out, "valgrind.log")}
	if err := p.start(); err != nil {
		return nil, err
	}
	return &Callgrind{Addr: p.Addr, p: p, out: out}, nil
}

// Close stops the server (SIGKILL).
func (c *Callgrind) Close() { c.p.kill() }

// Instructions runs f and returns how many instructions the server
// executed meanwhile.
func (c *Callgrind) Instructions(f func()) (int64, error) {
	if err := c.Zero(); err != nil {
		return 0, err
	}
	f()
	return c.Dump()
}

// Zero starts counting from 0 (callgrind_control -z).
func (c *Callgrind) Zero() error {
	pid := c.pid()
	if pid == 0 {
		return fmt.Errorf("callgrind: the server is not running")
	}
	if out, err := exec.Command("callgrind_control", "-z", strconv.Itoa(pid)).CombinedOutput(); err != nil {
		return fmt.Errorf("callgrind_control -z: %v: %s", err, out)
	}
	return nil
}

// Dump returns the instructions executed since the last Zero or Dump
// (callgrind_control -d, which starts from 0 again).
func (c *Callgrind) Dump() (int64, error) {
	pid := c.pid()
	if pid == 0 {
		return 0, fmt.Errorf("callgrind: the server is not running")
	}
	before, err := c.dumps()
	if err != nil {
		return 0, err
	}
	if out, err := exec.Command("callgrind_control", "-d", strconv.Itoa(pid)).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("callgrind_control -d: %v: %s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		after, err := c.dumps()
		if err != nil {
			return 0, err
		}
		for name := range after {
			if before[name] {
				continue
			}
			// The dump is complete once its last line, the totals, is written.
			if n, ok := dumpTotal(filepath.Join(c.out, name)); ok {
				_ = os.Remove(filepath.Join(c.out, name))
				return n, nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("callgrind: no complete dump in %s within 30s", c.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Callgrind) pid() int {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.p.cmd == nil || c.p.cmd.Process == nil {
		return 0
	}
	return c.p.cmd.Process.Pid
}

// dumps lists the dump files written so far (callgrind.out.<part>).
func (c *Callgrind) dumps() (map[string]bool, error) {
	ents, err := os.ReadDir(c.out)
	if err != nil {
		return nil, err
	}
	m := map[string]bool{}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "callgrind.out.") {
			m[e.Name()] = true
		}
	}
	return m, nil
}

var totalsLine = regexp.MustCompile(`(?m)^totals: (\d+)$`)

// dumpTotal reads a dump's instruction total (its last line, "totals:").
func dumpTotal(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	m := totalsLine.FindSubmatch(b)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(string(m[1]), 10, 64)
	return n, err == nil
}
