package redistest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ReplyError is an error reply from Redis, as a hook injects it: it has
// go-redis's RedisError marker, so the client takes it for Redis' answer
// (TRYAGAIN and LOADING prefixes read as "unavailable" by the store).
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

// RedisError marks ReplyError as a reply of Redis (go-redis' proto.RedisError).
func (ReplyError) RedisError() {}

// Arg is a command argument as sent: the store passes some by pointer.
func Arg(v any) string {
	switch p := v.(type) {
	case string:
		return p
	case *string:
		return *p
	case *int:
		return fmt.Sprint(*p)
	case *int64:
		return fmt.Sprint(*p)
	}
	return fmt.Sprint(v)
}

// IsCountsMove reports whether c is a call of move_plan_counts.lua: a
// script whose first key is a plan's counts hash.
func IsCountsMove(c redis.Cmder) bool {
	args := c.Args()
	if (c.Name() != "evalsha" && c.Name() != "eval") || len(args) < 4 {
		return false
	}
	if n, err := strconv.Atoi(Arg(args[2])); err != nil || n < 1 {
		return false
	}
	return strings.HasSuffix(Arg(args[3]), ":counts")
}
