package facade_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/repository"
	"github.com/deploycoord/deploycoord/task"
	"github.com/deploycoord/deploycoord/task/stage"
	"github.com/deploycoord/deploycoord/tenantlock/redislock"
)

// greetConfig is the config of the example's "greet" stage kind:
// {"greet": {"greeting": "hello"}}.
type greetConfig struct {
	Greeting string `json:"greeting"`
}

// compileGreet compiles a "greet" stage: it succeeds with the outputs
// {"message": "<greeting>, <tenant>"}, which go into the task's checkpoint.
func compileGreet(spec task.StageSpec, _ stage.Env) (stage.Runnable, error) {
	var c greetConfig
	if err := stage.DecodeConfig(spec, &c); err != nil {
		return nil, err
	}
	if c.Greeting == "" {
		c.Greeting = "hello"
	}
	return stage.RunFunc(func(ctx context.Context, in stage.Input) task.Result {
		return task.Success(map[string]any{"message": c.Greeting + ", " + in.TenantID})
	}), nil
}

// Example embeds a coordinator in a Go program with a stage kind of its own,
// runs a plan over two tenants and reads the result back.
func Example() {
	ctx := context.Background()

	// An in-process Redis keeps the example self-contained; a program dials
	// its real Redis here (with ContextTimeoutEnabled, see redislock).
	mini, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mini.Close()
	client := redis.NewClient(&redis.Options{Addr: mini.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()

	store, err := repository.NewRedis(client, repository.Config{Prefix: "example:"})
	if err != nil {
		log.Fatal(err)
	}
	keys := store.Keys()
	const lease = 30 * time.Second
	locks, err := redislock.New(client, redislock.Config{
		Lease:    lease,
		LockKey:  func(t string) string { k, _ := keys.Lock(t); return k },
		FenceKey: func(t string) string { k, _ := keys.Fence(t); return k },
	})
	if err != nil {
		log.Fatal(err)
	}

	stages := stage.NewRegistry(stage.Options{})
	if err := stages.Register("greet", stage.KindFunc(compileGreet)); err != nil {
		log.Fatal(err)
	}
	coord, err := facade.New(store, locks, facade.Config{
		Instance: "example-1",
		Lease:    lease,
		Stages:   stages,
		// Operator-defined pipelines may use every registered kind; inline
		// stages only the kinds listed in stage.Options.InlineKinds.
		Pipelines: map[string][]task.StageSpec{
			"greeting": {
				{Name: "greet", Kind: "greet", Config: json.RawMessage(`{"greeting": "hello"}`)},
				{Name: "done", Kind: "noop"},
			},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = coord.Shutdown(ctx) }()

	created, err := coord.CreatePlan(ctx, plan.Spec{
		Name:     "example-rollout",
		Pipeline: "greeting",
		Tenants:  []plan.TenantSpec{{TenantID: "t-1"}, {TenantID: "t-2"}},
	}, facade.Actor{Name: "example"})
	if err != nil {
		log.Fatal(err)
	}

	// Idle waits until this instance runs nothing (for tests and examples; a
	// real program polls the plan, or serves the HTTP API).
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := coord.Idle(wctx); err != nil {
		log.Fatal(err)
	}

	p, err := coord.Plan(ctx, created.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("plan:", p.Status, p.Counts[task.StatusCompleted], "of", p.TotalTasks, "completed")

	t2, err := coord.TaskByTenant(ctx, "t-2")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("t-2:", t2.Status, t2.Checkpoint.CompletedStages, t2.Checkpoint.ContextData["greet"])

	// Output:
	// plan: COMPLETED 2 of 2 completed
	// t-2: COMPLETED [greet done] map[message:hello, t-2]
}
