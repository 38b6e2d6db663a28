package repository

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// CommandFunc is told about one round trip to Redis: the command's name (a
// bounded set, see CommandHook), how long it took and whether it failed.
type CommandFunc func(command string, d time.Duration, failed bool)

// CommandHook is a go-redis hook (client.AddHook) that reports every round
// trip to a CommandFunc, for the Redis metrics, without exposing go-redis
// errors: a command sent alone is reported under its lower-case name, a
// pipeline (or MULTI/EXEC block) once as "pipeline", whatever it holds.
// Names outside the commands deploycoord and its libraries send are
// reported as "other", so a metric labelled by name stays bounded.
//
// A round trip failed when the connection failed, timed out or Redis
// answered with an error (a NOSCRIPT the store then handles included).
// redis.Nil (a missing key, a blocking read that found nothing) is no
// failure, nor is the caller's cancellation (a long poll whose client went
// away). Handshake commands of a new connection are not reported.
type CommandHook struct {
	report CommandFunc
}

// NewCommandHook returns a hook reporting to f.
func NewCommandHook(f CommandFunc) *CommandHook { return &CommandHook{report: f} }

var _ redis.Hook = (*CommandHook)(nil)

// knownCommands are the commands the repository, tenantlock, redsync and
// the server send; anything else is reported as "other".
var knownCommands = map[string]bool{
	"get": true, "set": true, "setnx": true, "del": true, "unlink": true, "exists": true,
	"expire": true, "pexpire": true, "pttl": true, "ttl": true, "incr": true, "mget": true,
	"hset": true, "hget": true, "hgetall": true, "hmget": true, "hdel": true, "hincrby": true,
	"zadd": true, "zrem": true, "zrange": true, "zrevrange": true, "zrangebyscore": true,
	"zrevrangebyscore": true, "zremrangebyscore": true, "zcard": true, "zscore": true,
	"lpush": true, "rpush": true, "lrange": true, "llen": true, "ltrim": true,
	"xadd": true, "xread": true, "xrange": true, "xrevrange": true, "xlen": true,
	"eval": true, "evalsha": true, "script": true, "ping": true, "info": true, "config": true,
	"scan": true,
}

func commandName(cmd redis.Cmder) string {
	name := strings.ToLower(cmd.Name())
	if knownCommands[name] {
		return name
	}
	return "other"
}

// handshake reports whether go-redis sends cmd while it sets up a new
// connection (HELLO, AUTH, SELECT, READONLY, CLIENT SETNAME/SETINFO/...;
// deploycoord sends no other CLIENT command).
func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "auth", "select", "readonly", "client":
		return true
	}
	return false
}

// commandFailed reports whether err is a failure worth counting.
func commandFailed(err error) bool {
	return err != nil && !errors.Is(err, redis.Nil) && !errors.Is(err, context.Canceled)
}

// DialHook implements redis.Hook.
func (h *CommandHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *CommandHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if handshake(cmd) {
			return next(ctx, cmd)
		}
		start := time.Now()
		err := next(ctx, cmd)
		h.report(commandName(cmd), time.Since(start), commandFailed(err))
		return err
	}
}

// ProcessPipelineHook implements redis.Hook: one report per pipeline, failed
// when the pipeline or any command in it failed.
func (h *CommandHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		real := false
		for _, cmd := range cmds {
			real = real || !handshake(cmd)
		}
		if !real {
			return next(ctx, cmds)
		}
		start := time.Now()
		err := next(ctx, cmds)
		failed := commandFailed(err)
		for _, cmd := range cmds {
			failed = failed || commandFailed(cmd.Err())
		}
		h.report("pipeline", time.Since(start), failed)
		return err
	}
}
