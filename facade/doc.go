// Package facade holds the use cases of deploycoord: create, start, pause,
// resume and cancel plans; run their tasks; query plans, tasks, checkpoints,
// timelines and locks; retry a tenant's task from its checkpoint; break a
// tenant lock. The HTTP API (package httpapi) is a thin layer over it, and a
// Go program can use it directly as a library, with its own stage kinds.
//
// # Using it from Go
//
// A Coordinator needs a Store (package repository: NewRedis, or NewDual over
// a Memory and a Redis as the server does), a Locker (package
// tenantlock/redislock, over the same Redis client and the repository's lock
// and fence keys) and a
// stage Registry (package task/stage) where the program registers its own
// kinds next to noop, sleep, http and exec:
//
//	store, _ := repository.NewRedis(client, repository.Config{Prefix: "prod:executor:"})
//	keys := store.Keys()
//	locks, _ := redislock.New(client, redislock.Config{Lease: time.Minute,
//		LockKey:  func(t string) string { k, _ := keys.Lock(t); return k },
//		FenceKey: func(t string) string { k, _ := keys.Fence(t); return k }})
//	stages := stage.NewRegistry(stage.Options{})
//	_ = stages.Register("migrate", myMigrateKind)
//	coord, _ := facade.New(store, locks, facade.Config{Instance: "deployer-1",
//		Lease: time.Minute, Stages: stages, Pipelines: pipelines})
//	defer coord.Shutdown(ctx)
//
// Config.Lease must be the Locker's lease: it is also the orphan threshold.
// The go-redis client must be made with ContextTimeoutEnabled (see package
// redislock). Every instance sharing a Redis and a key prefix sees the same
// plans and tasks; Instance must be unique among them. See the Example.
//
// # What runs where
//
// The instance that creates (or starts, or resumes) a plan owns it: a plan
// run on that instance starts its PENDING tasks, at most MaxConcurrency at a
// time, and re-reads the plan record every Config.PlanPoll to see pauses,
// resumes, cancels and takeovers made on other instances. A task runs on one
// instance from its first stage to its last (or until it stops): a retry or
// a task resume runs on the instance that received it, whoever owns the
// plan. Queries read the store, so any instance answers for any task.
//
// Requests reach a running task between two stages: pause and cancel are
// stored on the task record (and handed at once to a run on this instance);
// the runner reads them back with every write and honours them at the next
// stage boundary. A stage that is running is never interrupted by a request.
//
// # The runner
//
// The runner lives here rather than in package task because it needs the
// store, the tenant lock and the stage registry together, and package task
// may import only the standard library and package checkpoint.
//
// A task run holds a Lease for its whole life. Before each stage
// it checks that the lease has enough time left, then honours a cancel, a
// pause or the instance's shutdown; then it runs the stage's attempts under
// the stage's timeout and retry policy, recording each retry (and its delay)
// in the timeline. After each stage it writes status, checkpoint and the
// pending timeline entries in one fenced write (Store.WriteTask: one round
// trip); the final write (COMPLETED, FAILED, PAUSED, CANCELLED) also deletes
// the lock. A heartbeat refreshes the task's heartbeatAt every Lease/3.
//
// When the lease is lost the running stage's context is cancelled and no
// later stage starts. If another holder has the tenant — the lock holds
// another value or was force-released, or the store refuses a write or a
// heartbeat because a newer fence wrote the task — the run stops without
// writing anything more: the new holder's writes are the ones that count, and
// a task nobody took over shows as orphaned until a person retries it. If the
// lease only lapsed (Redis did not confirm a renewal in time), the run waits
// for Redis and asks the Locker to take the lock back with the same fence,
// which it does only if nobody took the tenant meanwhile; then the cut-short
// stage runs again.
//
// A RUNNING task is orphaned when its heartbeat is older than the lease, or
// when its owner instance stopped registering itself in the store for longer
// than the lease (each coordinator registers every Config.Heartbeat).
//
// A checkpoint write that fails fails the task (seed §11.1). A task whose
// tenant is locked by another task fails at once with TENANT_LOCKED naming
// the holder, or waits up to the plan's lockWait ("onTenantLocked": "wait").
//
// Nothing restarts by itself. Shutdown stops taking work, lets running
// stages finish within its context (the grace period), interrupts the rest,
// leaves every unfinished task PAUSED with reason "instance shutdown" and
// its lock released, and pauses the plans this instance was running, so
// that a person can resume them on any instance (ResumePlan).
//
// # Errors
//
// Every use case returns nil or an error matching (errors.Is) one of
// ErrInvalid, ErrNotFound, ErrTaskRunning, ErrTaskCompleted, ErrTaskPending,
// ErrAttemptMismatch, ErrPlanFinished, ErrInvalidState, ErrLockMismatch,
// ErrTenantLocked, ErrUnavailable or ErrShuttingDown (or a context error);
// package httpapi maps them to statuses and stable codes in one table. The
// error's message is the detail shown to the caller: it names the task,
// tenant, plan, holder or instance concerned.
package facade
