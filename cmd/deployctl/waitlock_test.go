package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/task"
)

// orphanAPI answers for tenant t-o: its task RUNNING and orphaned while its
// lock is held (until frees), a retry refused TASK_RUNNING until then, as
// the server does in the moment between "orphaned" and the lock's end.
type orphanAPI struct {
	frees time.Time
	mu    sync.Mutex
	posts []time.Time
}

func (o *orphanAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	held := now.Before(o.frees)
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/tenants/t-o/task":
		d := httpapi.TaskDetail{Task: httpapi.Task{TaskID: "task-01JDQZV5X8M7R2K9C3B4N6P0QS", TenantID: "t-o",
			PlanID: "plan-01JDQZV5X8M7R2K9C3B4N6P0QS", Status: task.StatusRunning, Orphaned: true, Attempt: 1}}
		if held {
			at := o.frees
			d.LockExpiresAt = &at
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(d)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/tenants/t-o/retry":
		o.mu.Lock()
		o.posts = append(o.posts, now)
		o.mu.Unlock()
		if held {
			httpapi.WriteProblem(w, r, http.StatusConflict, httpapi.CodeTaskRunning, "task of tenant t-o is running: its lock is held for a moment more")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(httpapi.TaskDetail{Task: httpapi.Task{TaskID: "task-01JDQZV5X8M7R2K9C3B4N6P0QS", TenantID: "t-o",
			Status: task.StatusRunning, Attempt: 2}})
	default:
		http.NotFound(w, r)
	}
}

// TestRetryWaitLock: retry --wait-lock of an orphaned task whose lock is
// still held waits for lockExpiresAt and then retries (exit 0); without it
// the retry is refused TASK_RUNNING (exit 4).
func TestRetryWaitLock(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		wait bool
		code int
	}{{"ErrWithoutWait", false, exitConflict}, {"OKWaits", true, exitOK}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := &orphanAPI{frees: time.Now().Add(700 * time.Millisecond)}
			srv := httptest.NewServer(o)
			t.Cleanup(srv.Close)
			args := []string{"retry", "--tenant", "t-o", "--from-checkpoint", "--reason", "INC-5 take over"}
			if tt.wait {
				args = append(args, "--wait-lock")
			}
			r := runCLI(t, context.Background(), map[string]string{"DEPLOYCTL_SERVER": srv.URL}, "", args...)
			if r.code != tt.code {
				t.Fatalf("exit %d, want %d\n%s", r.code, tt.code, r)
			}
			o.mu.Lock()
			defer o.mu.Unlock()
			if len(o.posts) != 1 {
				t.Fatalf("%d retry requests, want 1", len(o.posts))
			}
			if tt.wait {
				if o.posts[0].Before(o.frees) {
					t.Errorf("retry sent at %s, before the lock freed at %s", o.posts[0].Format(time.StampMilli), o.frees.Format(time.StampMilli))
				}
				must(t, r, exitOK, "stderr", "waiting", "for the lock of tenant t-o to free")
				must(t, r, exitOK, "stdout", "retry accepted: tenant t-o")
			}
		})
	}
}
