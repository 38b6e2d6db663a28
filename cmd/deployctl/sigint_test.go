package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestEventsFollowSIGINT runs the built deployctl: events --follow ended by
// SIGINT (Ctrl-C) exits 0 and prints the cursor to resume from on stderr,
// as the README promises.
func TestEventsFollowSIGINT(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "deployctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f := newFeed(t)
	f.add(event("task.failed", "t-1", nil), event("task.failed", "t-2", nil))
	cmd := exec.Command(bin, "events", "--follow", "--wait", "5s")
	cmd.Env = append(os.Environ(), "DEPLOYCTL_SERVER="+f.url, "DEPLOYCTL_TOKEN="+testToken)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	})
	eventually(t, func() error {
		if strings.Count(stdout.String(), "task.failed") < 2 {
			return errors.New("the two events are not printed yet: " + stdout.String())
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("deployctl events --follow after SIGINT: %v, want exit 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("deployctl events --follow did not end within 10s of SIGINT")
	}
	if e := stderr.String(); !strings.HasSuffix(e, "next: --after 2-0\n") {
		t.Errorf("stderr after SIGINT = %q, want next: --after 2-0", e)
	}
}
