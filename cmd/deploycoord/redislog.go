package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// redisLogger sends go-redis' own log lines (dial failures, pool trouble)
// to the server's structured log instead of stderr, at most a few a second:
// with Redis down go-redis logs every failed dial.
type redisLogger struct{ log zerolog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn().Msg(fmt.Sprintf(format, v...))
}

// setRedisLogger routes go-redis logging to log (process-wide: go-redis has
// one logger).
func setRedisLogger(log zerolog.Logger) {
	sampled := log.With().Str("component", "go-redis").Logger().
		Sample(&zerolog.BurstSampler{Burst: 5, Period: 10 * time.Second})
	redis.SetLogger(redisLogger{log: sampled})
}
