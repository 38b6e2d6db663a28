package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptCost is Redis' CPU time per call of one kind of command, sent in
// pipelines so that the round trips' own cost is spread thin.
type scriptCost struct {
	what string
	per  time.Duration
}

// measureScripts measures what a Lua script costs Redis on this machine
// next to plain commands: the cost model behind the throughput figures
// (each of deploycoord's tasks runs three scripts and two counts moves; see
// docs/benchmarks.md). Each kind is sent rounds × 100 times in pipelines of
// 100 on a key prefix of its own; the CPU time is Redis' (INFO cpu) over
// the calls.
func (e *env) measureScripts(ctx context.Context, rounds int) ([]scriptCost, error) {
	prefix := newPrefix("scripts")
	defer func() { _ = e.reset(context.Background(), prefix) }()
	c := e.client
	ret1 := redis.NewScript("return 1")
	hset1 := redis.NewScript("redis.call('HSET', KEYS[1], 'a', ARGV[1]) return 1")
	hset10 := redis.NewScript("for i = 1, 10 do redis.call('HSET', KEYS[1], 'f' .. i, ARGV[1]) end return 1")
	for _, s := range []*redis.Script{ret1, hset1, hset10} {
		if err := s.Load(ctx, c).Err(); err != nil {
			return nil, err
		}
	}
	args40 := make([]any, 40)
	for i := range args40 {
		args40[i] = "value-" + strconv.Itoa(i)
	}
	key := func(i int) string { return prefix + "h:" + strconv.Itoa(i%1000) }
	kinds := []struct {
		what string
		add  func(p redis.Pipeliner, i int)
	}{
		{"GET (a plain read)", func(p redis.Pipeliner, i int) { p.Get(ctx, prefix+"k") }},
		{"HSET of one field", func(p redis.Pipeliner, i int) { p.HSet(ctx, key(i), "a", "1") }},
		{"EVALSHA of `return 1`", func(p redis.Pipeliner, i int) { ret1.EvalSha(ctx, p, nil) }},
		{"EVALSHA of `return 1` with 40 arguments", func(p redis.Pipeliner, i int) { ret1.EvalSha(ctx, p, nil, args40...) }},
		{"EVALSHA of a script making 1 HSET", func(p redis.Pipeliner, i int) { hset1.EvalSha(ctx, p, []string{key(i)}, "1") }},
		{"EVALSHA of a script making 10 HSETs", func(p redis.Pipeliner, i int) { hset10.EvalSha(ctx, p, []string{key(i)}, "1") }},
	}
	const per = 100
	var out []scriptCost
	for _, k := range kinds {
		c0 := e.cpuNow(ctx)
		for b := range rounds {
			p := c.Pipeline()
			for i := range per {
				k.add(p, b*per+i)
			}
			if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				return nil, fmt.Errorf("%s: %w", k.what, err)
			}
		}
		used := e.cpuNow(ctx).sub(c0).redis
		out = append(out, scriptCost{what: k.what, per: used / time.Duration(rounds*per)})
	}
	return out, nil
}
