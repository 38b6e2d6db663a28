package repository

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/derive_plan.lua
	deriveLua string
	//go:embed scripts/write_task.lua
	writeTaskLua string
	//go:embed scripts/write_lock.lua
	writeLockLua string
	//go:embed scripts/start_lock.lua
	startLockLua string
	//go:embed scripts/move_plan_counts.lua
	movePlanCountsLua string
	//go:embed scripts/correct_plan_counts.lua
	correctPlanCountsLua string
	//go:embed scripts/repair_plan_counts.lua
	repairPlanCountsLua string
	//go:embed scripts/request_task.lua
	requestTaskLua string
	//go:embed scripts/beat_task.lua
	beatTaskLua string
	//go:embed scripts/update_plan.lua
	updatePlanLua string
	//go:embed scripts/create_plan.lua
	createPlanLua string
	//go:embed scripts/push_plan_tasks.lua
	pushPlanTasksLua string
	//go:embed scripts/list_plan_tasks.lua
	listPlanTasksLua string
	//go:embed scripts/claim_idempotency.lua
	claimIdempotencyLua string
	//go:embed scripts/finish_idempotency.lua
	finishIdempotencyLua string
	//go:embed scripts/append_events.lua
	appendEventsLua string
	//go:embed scripts/legacy_index.lua
	legacyIndexLua string
)

// script is one Lua script, run with EVALSHA and, when Redis does not know
// it (NOSCRIPT, e.g. after a restart), with EVAL, which caches it again.
type script struct {
	name string
	src  string
	sha  string
}

func newScript(name string, src ...string) *script {
	var all string
	for i, s := range src {
		if i > 0 {
			all += "\n"
		}
		all += s
	}
	sum := sha1.Sum([]byte(all))
	return &script{name: name, src: all, sha: hex.EncodeToString(sum[:])}
}

// The scripts; those that move plan counts carry the derive_plan.lua library,
// the task writes the lock handling of their kind.
var (
	writeTaskScript         = newScript("write_task", writeLockLua, writeTaskLua)
	startTaskScript         = newScript("start_task", startLockLua, writeTaskLua)
	movePlanCountsScript    = newScript("move_plan_counts", deriveLua, movePlanCountsLua)
	correctPlanCountsScript = newScript("correct_plan_counts", deriveLua, correctPlanCountsLua)
	repairPlanCountsScript  = newScript("repair_plan_counts", deriveLua, repairPlanCountsLua)
	requestTaskScript       = newScript("request_task", requestTaskLua)
	beatTaskScript          = newScript("beat_task", beatTaskLua)
	updatePlanScript        = newScript("update_plan", updatePlanLua)
	createPlanScript        = newScript("create_plan", createPlanLua)
	pushPlanTasksScript     = newScript("push_plan_tasks", pushPlanTasksLua)
	listPlanTasksScript     = newScript("list_plan_tasks", listPlanTasksLua)
	claimIdempotencyScript  = newScript("claim_idempotency", claimIdempotencyLua)
	finishIdempotencyScript = newScript("finish_idempotency", finishIdempotencyLua)
	appendEventsScript      = newScript("append_events", appendEventsLua)
	legacyIndexScript       = newScript("legacy_index", legacyIndexLua)

	allScripts = []*script{
		writeTaskScript, startTaskScript, movePlanCountsScript, correctPlanCountsScript, repairPlanCountsScript,
		requestTaskScript, beatTaskScript, updatePlanScript, createPlanScript, pushPlanTasksScript,
		listPlanTasksScript, claimIdempotencyScript, finishIdempotencyScript,
		appendEventsScript, searchPlanTasksScript, searchPruneScript, reindexPlanScript, legacyIndexScript,
	}
)

// ScriptNames returns the name of every script of the store (write_task,
// start_task, move_plan_counts, ...) by the SHA1 that EVALSHA sends, to
// read a profile of the Redis server (the benchmark command's -scriptstats).
func ScriptNames() map[string]string {
	m := make(map[string]string, len(allScripts))
	for _, s := range allScripts {
		m[s.sha] = s.name
	}
	return m
}

// scriptLoader loads every script once per store (on first use) so EVALSHA
// hits, and again after Redis answered NOSCRIPT.
type scriptLoader struct {
	loaded atomic.Bool
}

// load sends SCRIPT LOAD for every script: one pipeline on a single Redis,
// a broadcast per script on a cluster (go-redis sends it to every shard).
func (l *scriptLoader) load(ctx context.Context, c redis.UniversalClient) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		for _, s := range allScripts {
			if err := cc.ScriptLoad(ctx, s.src).Err(); err != nil {
				return err
			}
		}
	} else {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, s := range allScripts {
				p.ScriptLoad(ctx, s.src)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	l.loaded.Store(true)
	return nil
}

func (l *scriptLoader) ensure(ctx context.Context, c redis.UniversalClient) error {
	if l.loaded.Load() {
		return nil
	}
	return l.load(ctx, c)
}

// evalCmd is a script queued on a pipeline.
type evalCmd struct {
	s    *script
	keys []string
	args []any
	cmd  *redis.Cmd
}

// pipe is a pipeline that may hold scripts; exec re-sends the scripts Redis
// did not know as EVAL.
type pipe struct {
	r     *Redis
	p     redis.Pipeliner
	evals []*evalCmd
	cmds  []redis.Cmder
}

func (r *Redis) pipeline() *pipe { return &pipe{r: r, p: r.c.Pipeline()} }

func (p *pipe) eval(ctx context.Context, s *script, keys []string, args ...any) *evalCmd {
	e := &evalCmd{s: s, keys: keys, args: args, cmd: evalShaCmd(ctx, s, keys, args)}
	_ = p.p.Process(ctx, e.cmd)
	p.evals = append(p.evals, e)
	return e
}

// evalShaCmd is EVALSHA of s as go-redis' EvalSha builds it, with the sha
// and the keys by pointer: a string stored in an interface is an allocation
// each (go-redis writes a *string, and routes by it on a cluster, as the
// string). keys must not change until the command is sent.
func evalShaCmd(ctx context.Context, s *script, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, "evalsha", &s.sha, len(keys))
	for i := range keys {
		a = append(a, &keys[i])
	}
	cmd := redis.NewCmd(ctx, append(a, args...)...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// exec sends the pipeline and returns a transport error (nil when Redis
// answered every command, whatever the answers: callers read each one).
// Scripts answered with NOSCRIPT are sent again with EVAL in a second round trip.
func (p *pipe) exec(ctx context.Context) error {
	if len(p.evals) > 0 {
		if err := p.r.loader.ensure(ctx, p.r.c); err != nil {
			return err
		}
	}
	cmds, err := p.p.Exec(ctx)
	p.cmds = cmds
	if err := transportErr(cmds, err); err != nil {
		return err
	}
	var retry []*evalCmd
	for _, e := range p.evals {
		if isNoScript(e.cmd.Err()) {
			retry = append(retry, e)
		}
	}
	if len(retry) == 0 {
		return nil
	}
	p.r.loader.loaded.Store(false)
	again := p.r.c.Pipeline()
	for _, e := range retry {
		e.cmd = again.Eval(ctx, e.s.src, e.keys, e.args...)
	}
	cmds, err = again.Exec(ctx)
	return transportErr(cmds, err)
}

// transportErr returns err unless every command got an answer from Redis.
func transportErr(cmds []redis.Cmder, err error) error {
	if err == nil {
		return nil
	}
	if len(cmds) == 0 {
		return err
	}
	for _, c := range cmds {
		if e := c.Err(); e != nil && !isReply(e) {
			return e
		}
	}
	return nil
}

// run runs one script in one round trip (two after NOSCRIPT).
func (r *Redis) run(ctx context.Context, s *script, keys []string, args ...any) (any, error) {
	if err := r.loader.ensure(ctx, r.c); err != nil {
		return nil, err
	}
	cmd := evalShaCmd(ctx, s, keys, args)
	_ = r.c.Process(ctx, cmd)
	v, err := cmd.Result()
	if isNoScript(err) {
		r.loader.loaded.Store(false)
		v, err = r.c.Eval(ctx, s.src, keys, args...).Result()
	}
	return v, err
}
