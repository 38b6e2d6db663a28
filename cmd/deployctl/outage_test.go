package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task/stage"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// outageAPI serves the real API over the store the server uses (memory
// mirroring Redis) on a Redis at addr, with http stages allowed to
// 127.0.0.1. It returns the API's URL and the coordinator.
func outageAPI(t *testing.T, addr string) (string, *facade.Coordinator) {
	t.Helper()
	client := redistest.NewClient(t, addr)
	rs, err := repository.NewRedis(client, repository.Config{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	keys := rs.Keys()
	locks, err := redislock.New(client, redislock.Config{
		Lease:    5 * time.Second,
		LockKey:  func(id string) string { k, _ := keys.Lock(id); return k },
		FenceKey: func(id string) string { k, _ := keys.Fence(id); return k },
	})
	if err != nil {
		t.Fatal(err)
	}
	store := repository.NewDual(repository.NewMemory(repository.MemoryConfig{}), rs)
	coord, err := facade.New(store, locks, facade.Config{
		Instance: "coord-a", Lease: 5 * time.Second, Stages: stage.NewRegistry(stage.Options{InlineHTTPHosts: []string{"127.0.0.1"}}),
		PlanPoll: 50 * time.Millisecond, QueryTimeout: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(coord, httpapi.Config{}))
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = coord.Shutdown(ctx)
	})
	return srv.URL, coord
}

// TestOutage: while the server's Redis does not answer, deployctl says so —
// a list from memory prints the DEGRADED warning, an answer the server
// cannot give exits 5 with a sentence saying that nothing shown is not
// nothing there (it used to print an empty table and exit 0).
func TestOutage(t *testing.T) {
	t.Parallel()
	t.Run("RedisPaused", func(t *testing.T) {
		t.Parallel()
		srv := redistest.StartServer(t)
		hold := make(chan struct{})
		target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(func() { close(hold); target.Close() })
		url, coord := outageAPI(t, srv.Addr)
		var spec plan.Spec
		if err := json.Unmarshal([]byte(fmt.Sprintf(`{"name":"outage","stages":[{"name":"push","kind":"http","timeout":"30s","http":{"method":"POST","url":%q}}],"tenants":[{"tenantId":"o-1"}]}`,
			target.URL+"/push")), &spec); err != nil {
			t.Fatal(err)
		}
		v, err := coord.CreatePlan(context.Background(), spec, facade.Actor{Name: "test"})
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{"DEPLOYCTL_SERVER": url}
		srv.Stop()
		t.Cleanup(srv.Cont)
		r := runCLI(t, context.Background(), env, "", "plan", "list")
		must(t, r, 0, "stdout", v.ID, "RUNNING")
		must(t, r, 0, "stderr", "warning: DEGRADED", "holds only what that instance runs")
		r = runCLI(t, context.Background(), env, "", "plan", "list", "--status", "COMPLETED")
		must(t, r, exitUnavailable, "stderr", "error: UNAVAILABLE", "does not mean there is nothing")
	})
	t.Run("NoRedis", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		url, _ := outageAPI(t, addr)
		env := map[string]string{"DEPLOYCTL_SERVER": url}
		for _, args := range [][]string{
			{"plan", "list"},
			{"plan", "tasks", "plan-01JDQZV5X8M7R2K9C3B4N6P0QS"},
		} {
			r := runCLI(t, context.Background(), env, "", args...)
			must(t, r, exitUnavailable, "stderr", "error: UNAVAILABLE", "try again")
			if r.stdout != "" {
				t.Errorf("deployctl %v printed %q on stdout while the server could not answer", args, r.stdout)
			}
		}
	})
}
