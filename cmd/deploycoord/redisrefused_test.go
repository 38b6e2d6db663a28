package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
)

// TestRedisRefusesConfiguration: a Redis that answers but refuses the
// configuration (a database number it does not have, a wrong or missing
// password) is a configuration error — the binary exits
// 2 at start with Redis' reason — not "unreachable, serving anyway".
func TestRedisRefusesConfiguration(t *testing.T) {
	t.Parallel()
	open := redistest.StartServer(t)
	locked := redistest.StartServer(t)
	// redistest waits for a PING answered without a password: set it after.
	if err := locked.Client().ConfigSet(context.Background(), "requirepass", "right-pass-0123").Err(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, url, want string
	}{
		{"ErrDBOutOfRange", "redis://" + open.Addr + "/99", "DB index is out of range"},
		{"ErrWrongPassword", "redis://:wrong-pass-0123@" + locked.Addr + "/0", "WRONGPASS"},
		{"ErrNoPassword", "redis://" + locked.Addr + "/0", "NOAUTH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := runMain(t, "-redis-url", tt.url)
			var ce *configError
			if !errors.As(err, &ce) || exitCode(err) != 2 || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run with %s: %v, want a configuration error (exit 2) saying %q", tt.name, err, tt.want)
			}
			if strings.Contains(err.Error(), "pass-0123") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
	t.Run("BinaryExits2", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(binary(t))
		cmd.Env = append(cleanEnv(), "DEPLOYCOORD_REDIS_URL=redis://"+open.Addr+"/99", "DEPLOYCOORD_LISTEN=127.0.0.1:0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Errorf("exit: %v, want status 2", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Fatal("deploycoord with redis://.../99 still runs after 30s; want exit 2 at start")
		}
		if !strings.Contains(stderr.String(), "DB index is out of range") || !strings.Contains(stderr.String(), "refuses this configuration") {
			t.Errorf("stderr %q does not give the reason", stderr.String())
		}
	})
	t.Run("OKUnreachableStillServes", func(t *testing.T) {
		t.Parallel()
		if refused(errors.New("dial tcp 127.0.0.1:1: connect: connection refused")) {
			t.Error("a connection refused by the network counts as a configuration error")
		}
	})
}
