package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/facade"
)

// planRun is the outcome of one plan run: create, then run to COMPLETED.
type planRun struct {
	create time.Duration // CreatePlan (validation, records, pipelines)
	run    time.Duration // from CreatePlan's return until the coordinator is idle
	total  time.Duration
	cpu    cpuUse
	// cmds is the commands Redis ran from CreatePlan until idle.
	cmds cmdCounts
	// instr is the instructions Redis executed meanwhile (-callgrind), else 0.
	instr int64
}

// runPlan creates a plan of n tenants × stages noop stages on a fresh prefix,
// waits until the coordinator is idle and checks the plan COMPLETED.
func (e *env) runPlan(ctx context.Context, n, stages int) (planRun, error) {
	prefix := newPrefix("plan")
	defer func() { _ = e.reset(context.Background(), prefix) }()
	in, err := e.newInstance(e.client, prefix)
	if err != nil {
		return planRun{}, err
	}
	defer in.shutdown()
	if err := in.settled(ctx); err != nil {
		return planRun{}, err
	}
	spec := planSpec(0, n, stages, e.cfg.Concurrency, true)
	stop, err := e.meterRedis(ctx)
	if err != nil {
		return planRun{}, err
	}
	start := time.Now()
	pv, err := in.coord.CreatePlan(ctx, spec, facade.Actor{Name: "bench"})
	if err != nil {
		return planRun{}, fmt.Errorf("create plan: %w", err)
	}
	created := time.Now()
	if err := in.coord.Idle(ctx); err != nil {
		return planRun{}, fmt.Errorf("wait for plan %s: %w", pv.ID, err)
	}
	done := time.Now()
	use, err := stop(ctx)
	if err != nil {
		return planRun{}, err
	}
	if err := verifyCompleted(ctx, in, pv.ID, 0, n, stages); err != nil {
		return planRun{}, err
	}
	return planRun{create: created.Sub(start), run: done.Sub(created), total: done.Sub(start), cpu: use.cpu, cmds: use.cmds, instr: use.instr}, nil
}

// runPlanOnCluster is runPlan's plan of n tenants × 1 noop stage on the
// Redis Cluster of -topology cluster: the same coordinator, its keys spread
// over the three masters by their hash tags. The cluster is flushed after
// the run (it is the command's own).
func (e *env) runPlanOnCluster(ctx context.Context, n int) (planRun, error) {
	prefix := newPrefix("cluster")
	defer func() {
		_ = e.cclient.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
			return c.FlushAll(ctx).Err()
		})
	}()
	in, err := e.newInstance(e.cclient, prefix)
	if err != nil {
		return planRun{}, err
	}
	defer in.shutdown()
	spec := planSpec(0, n, 1, e.cfg.Concurrency, true)
	stop, err := meter(ctx, e.cclient)
	if err != nil {
		return planRun{}, err
	}
	start := time.Now()
	pv, err := in.coord.CreatePlan(ctx, spec, facade.Actor{Name: "bench"})
	if err != nil {
		return planRun{}, fmt.Errorf("create plan on the cluster: %w", err)
	}
	created := time.Now()
	if err := in.coord.Idle(ctx); err != nil {
		return planRun{}, fmt.Errorf("wait for plan %s on the cluster: %w", pv.ID, err)
	}
	done := time.Now()
	use, err := stop(ctx)
	if err != nil {
		return planRun{}, err
	}
	if err := verifyCompleted(ctx, in, pv.ID, 0, n, 1); err != nil {
		return planRun{}, fmt.Errorf("on the cluster: %w", err)
	}
	return planRun{create: created.Sub(start), run: done.Sub(created), total: done.Sub(start), cpu: use.cpu, cmds: use.cmds}, nil
}

// asynqRun is the outcome of one asynq run: enqueue, then process.
type asynqRun struct {
	enqueue time.Duration
	process time.Duration // from Server.Start until every task is acknowledged
	total   time.Duration
	cpu     cpuUse
	cmds    cmdCounts
	instr   int64 // Redis instructions (-callgrind), else 0
}

// quietLogger is an asynq.Logger that drops everything.
type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}

// runAsynq enqueues n no-op tasks on a fresh queue of asynq (in Redis
// database -asynq-db of the same server), with -asynq-enqueuers goroutines,
// then starts an asynq server with concurrency -concurrency and waits until
// every task is processed and acknowledged (no task pending or active).
// It checks that asynq counted n processed tasks and no failure.
func (e *env) runAsynq(ctx context.Context, n int) (asynqRun, error) {
	queue := "bench-" + randHex(3)
	opt := asynq.RedisClientOpt{Addr: e.opts.Addr, Username: e.opts.Username, Password: e.opts.Password, DB: e.cfg.AsynqDB}
	client := asynq.NewClient(opt)
	defer client.Close()
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	defer func() { _ = insp.DeleteQueue(queue, true) }()

	stop, err := e.meterRedis(ctx)
	if err != nil {
		return asynqRun{}, err
	}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, e.cfg.AsynqEnqueuers)
	for range e.cfg.AsynqEnqueuers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				// The payload names the tenant, as our task records do.
				t := asynq.NewTask("noop", []byte(tenantID(i)))
				if _, err := client.EnqueueContext(ctx, t, asynq.Queue(queue)); err != nil {
					errs <- fmt.Errorf("asynq enqueue: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return asynqRun{}, err
	}
	enqueued := time.Now()

	var processed atomic.Int64
	all := make(chan struct{})
	srv := asynq.NewServer(opt, asynq.Config{
		Concurrency: e.cfg.Concurrency,
		Queues:      map[string]int{queue: 1},
		Logger:      quietLogger{},
		LogLevel:    asynq.FatalLevel,
	})
	handler := asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if processed.Add(1) == int64(n) {
			close(all)
		}
		return nil
	})
	startSrv := time.Now()
	if err := srv.Start(handler); err != nil {
		return asynqRun{}, fmt.Errorf("asynq server: %w", err)
	}
	defer srv.Shutdown()
	select {
	case <-all:
	case <-ctx.Done():
		return asynqRun{}, fmt.Errorf("asynq: %d of %d processed: %w", processed.Load(), n, ctx.Err())
	}
	// The handler has run for every task; wait for the acknowledgements
	// (asynq's "done" script) as our run waits for the final writes.
	var info *asynq.QueueInfo
	for {
		var err error
		if info, err = insp.GetQueueInfo(queue); err != nil {
			return asynqRun{}, fmt.Errorf("asynq queue info: %w", err)
		}
		if info.Active == 0 && info.Pending == 0 {
			break
		}
		if ctx.Err() != nil {
			return asynqRun{}, ctx.Err()
		}
		time.Sleep(time.Millisecond)
	}
	done := time.Now()
	use, err := stop(ctx)
	if err != nil {
		return asynqRun{}, err
	}
	if info.Processed != n || info.Failed != 0 || info.Retry != 0 || info.Archived != 0 {
		return asynqRun{}, fmt.Errorf("asynq: queue %s shows %d processed, %d failed, %d retry, %d archived; want %d processed only",
			queue, info.Processed, info.Failed, info.Retry, info.Archived, n)
	}
	return asynqRun{enqueue: enqueued.Sub(start), process: done.Sub(startSrv), total: enqueued.Sub(start) + done.Sub(startSrv), cpu: use.cpu, cmds: use.cmds, instr: use.instr}, nil
}
