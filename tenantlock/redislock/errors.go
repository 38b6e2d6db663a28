package redislock

import "fmt"

// RedisError is returned when a call to Redis failed or its context ended
// before Redis answered: the lock's state is unknown. It carries the cause's
// text; it unwraps only to context.Canceled or context.DeadlineExceeded, so
// no go-redis or redsync error leaves the package.
type RedisError struct {
	// Op is what failed: "acquire", "view", "force-release", "release",
	// "extend" or "reacquire".
	Op       string
	TenantID string
	// Cause is the text of the underlying error.
	Cause       string
	unavailable bool
	ctxErr      error
}

func (e *RedisError) Error() string {
	return fmt.Sprintf("tenantlock: %s tenant %s: %s", e.Op, e.TenantID, e.Cause)
}

// Unavailable reports whether Redis was unreachable, too slow or not ready
// (connection refused or reset, timeout, deadline exceeded, LOADING, ...),
// as opposed to refusing the command or the caller cancelling.
func (e *RedisError) Unavailable() bool { return e.unavailable }

// Unwrap returns context.Canceled or context.DeadlineExceeded when the call
// ended with its context, else nil.
func (e *RedisError) Unwrap() error { return e.ctxErr }
