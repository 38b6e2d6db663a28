package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one redis-server process (a plain server, a cluster node or a
// sentinel) on a fixed port: it can be started again on the same port
// after a kill. Its methods return errors instead of failing a test, so a
// server shared by a whole test binary (SharedCluster) can use it too.
type proc struct {
	Addr string
	Port int
	dir  string
	args []string
	// wrap runs the server under another program (valgrind: Callgrind).
	wrap []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// newProc prepares a redis-server on a free port with its own directory
// under dir (its log is <dir>/redis-<port>.log). args come after the port,
// bind, dir and log file settings.
func newProc(dir string, args ...string) (*proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &proc{Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: filepath.Join(dir, strconv.Itoa(port))}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return nil, err
	}
	p.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", p.dir,
		"--logfile", p.logFile()}, args...)
	return p, nil
}

func (p *proc) logFile() string { return filepath.Join(p.dir, "redis.log") }

// log returns the end of the server's log file (for error messages).
func (p *proc) log() string {
	b, _ := os.ReadFile(p.logFile())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// start starts the process (with prefix before the args: a config file for
// a sentinel) and waits until it answers PING.
func (p *proc) start(prefix ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	argv := append(append(append([]string{}, p.wrap...), "redis-server"), prefix...)
	cmd := exec.Command(argv[0], append(argv[1:], p.args...)...)
	if err := spawn(cmd); err != nil {
		return fmt.Errorf("start redis-server on %s: %w", p.Addr, err)
	}
	p.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping(p.Addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer PING within 10s: %v\n%s", p.Addr, err, p.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill stops the process with SIGKILL and waits for it to exit.
func (p *proc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// ping sends PING on a fresh connection (RESP, no client library: it must
// work before any client exists) and wants +PONG.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if !strings.HasPrefix(string(buf[:n]), "+PONG") {
		return fmt.Errorf("PING answered %q (%v)", buf[:n], err)
	}
	return nil
}

// freePort returns a TCP port nothing listens on right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// binaries reports why the servers cannot be started ("" when they can):
// redis-server, and redis-cli when cli is true (cluster creation).
func binaries(cli bool) string {
	need := []string{"redis-server"}
	if cli {
		need = append(need, "redis-cli")
	}
	var missing []string
	for _, b := range need {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return strings.Join(missing, " and ") + " not installed"
}

// run runs a command (redis-cli) and returns its combined output, failing
// with it when the command fails.
func run(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// spawner starts every child process from one goroutine locked to its OS
// thread that never exits: on Linux the children get SIGKILL when that
// thread dies (Pdeathsig), i.e. when the test binary exits however it
// exits (a panic, a -timeout, a kill), so no redis-server outlives it.
var (
	spawnOnce sync.Once
	spawnReq  chan spawnJob
)

type spawnJob struct {
	cmd  *exec.Cmd
	done chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReq = make(chan spawnJob)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for j := range spawnReq {
				setDeathSignal(j.cmd)
				j.done <- j.cmd.Start()
			}
		}()
	})
	j := spawnJob{cmd: cmd, done: make(chan error, 1)}
	spawnReq <- j
	return <-j.done
}
