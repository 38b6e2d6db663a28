package facade_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
)

// TestOldRunForgetKeepsNewRun: a run (attempt 1) on coord-a loses its
// lease while its stage does not honour the cancel; coord-b takes the task
// over and it fails there; an operator retries it on coord-a (attempt 3, a
// new run registered here). When the old run's stage finally returns, its
// refused write / lost lease forgets its copy of the task in coord-a's
// memory — and must leave the NEW run's copy (it dropped it: a review).
// The Dual does not hold the plan (SharedWork: it only then forgets).
func TestOldRunForgetKeepsNewRun(t *testing.T) {
	be := redistest.Backends()[1] // real redis
	b := setup(t, be, withConfig(func(c *facade.Config) { c.Lease = time.Second }))
	b.stopDefault()
	oldStage := make(chan struct{})
	entered := make(chan int, 10)
	reg := stage.NewRegistry(stage.Options{InlineKinds: []string{"stubborn", "noop"}})
	if err := reg.Register("stubborn", stage.KindFunc(func(task.StageSpec, stage.Env) (stage.Runnable, error) {
		return stage.RunFunc(func(ctx context.Context, in stage.Input) task.Result {
			entered <- in.Attempt
			switch in.Attempt {
			case 1:
				<-oldStage // ignores ctx
				return task.Success(nil)
			case 2:
				return task.Failure("fails on coord-b", false)
			default:
				<-ctx.Done()
				return task.Failure("stopped", false)
			}
		}), nil
	})); err != nil {
		t.Fatal(err)
	}
	var logged syncLog // the old run's end is seen in the log
	log := zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), &logged)).Level(zerolog.ErrorLevel)
	mod := func(c *facade.Config) { c.Stages = reg; c.Logger = &log }
	dual := repository.NewDual(repository.NewMemory(repository.MemoryConfig{DropFinished: true}), b.store,
		repository.DualConfig{SharedWork: true})
	a := newCoordinator(t, b, dual, b.locks, "coord-a", mod)
	other := newCoordinator(t, b, b.store, b.locks, "coord-b", mod)
	ctx := context.Background()
	tenant := "fg-1"
	if _, err := a.CreatePlan(ctx, spec([]task.StageSpec{{Name: "hold", Kind: "stubborn"}, {Name: "after", Kind: "noop"}}, tenant), anyone); err != nil {
		t.Fatal(err)
	}
	if got := <-entered; got != 1 {
		t.Fatalf("attempt %d entered", got)
	}
	key, _ := b.store.Keys().Lock(tenant)
	if err := b.client.Del(ctx, key).Err(); err != nil { // coord-a's lease is lost
		t.Fatal(err)
	}
	// coord-b takes the orphaned task over once its heartbeat is stale; it fails there.
	eventually(t, 15*time.Second, func() error {
		_, err := other.Retry(ctx, tenant, facade.RetryRequest{Reason: "take over"}, anyone)
		return err
	})
	eventually(t, 15*time.Second, func() error {
		v, err := other.TaskByTenant(ctx, tenant)
		if err != nil || v.Task.Status != task.StatusFailed {
			return fmt.Errorf("task %v %v", v.Task, err)
		}
		return nil
	})
	// The operator retries on coord-a: a new run of the same task here.
	res, err := a.Retry(ctx, tenant, facade.RetryRequest{Reason: "again"}, anyone)
	if err != nil {
		t.Fatal(err)
	}
	taskID := res.Task.Task.ID
	for got := range entered {
		if got == 3 {
			break
		}
	}
	if tk, _, err := dual.Memory().Task(ctx, taskID); err != nil || tk.Attempt != 3 {
		t.Fatalf("new run not in memory before: %v %v", tk, err)
	}
	close(oldStage) // the old run's stage returns at last
	eventually(t, 10*time.Second, func() error {
		if s := logged.String(); !strings.Contains(s, "lease lost") && !strings.Contains(s, "fenced write refused") {
			return fmt.Errorf("the old run has not stopped yet")
		}
		return nil
	})
	tk, _, err := dual.Memory().Task(ctx, taskID)
	if err != nil {
		t.Fatalf("coord-a's memory dropped the task its new run (attempt 3) is running: %v", err)
	}
	t.Logf("memory: %s attempt %d owner %s", tk.Status, tk.Attempt, tk.Owner)
}

// syncLog is a log sink safe to read while the coordinator writes it.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
