package redistest

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Failing is a go-redis hook that fails, while On, every command whose name
// Match accepts, and every pipeline holding one, with an error the stores
// take for an unreachable Redis ("connection refused"). It starts on.
type Failing struct {
	On    atomic.Bool
	Match func(name string) bool
}

// NewFailing returns a Failing hook for match, on.
func NewFailing(match func(name string) bool) *Failing {
	f := &Failing{Match: match}
	f.On.Store(true)
	return f
}

// FailingNames is NewFailing for the commands named (lower case, as go-redis
// names them: "hgetall", "evalsha").
func FailingNames(names ...string) *Failing {
	return NewFailing(func(name string) bool { return slices.Contains(names, name) })
}

func (f *Failing) fails(cmd redis.Cmder) bool { return f.On.Load() && f.Match(cmd.Name()) }

// errInjected is what a failed command answers.
var errInjected = errors.New("injected: connection refused")

// DialHook implements redis.Hook.
func (*Failing) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (f *Failing) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f.fails(cmd) {
			cmd.SetErr(errInjected)
			return errInjected
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (f *Failing) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, f.fails) {
			for _, c := range cmds {
				c.SetErr(errInjected)
			}
			return errInjected
		}
		return next(ctx, cmds)
	}
}
