package repository

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrUnavailable is matched by every *UnavailableError.
	ErrUnavailable = errors.New("repository: redis unavailable")
	// ErrPlanExists is returned by CreatePlan when the plan id is taken.
	ErrPlanExists = errors.New("repository: plan already exists")
	// ErrCorrupt is wrapped by errors about a stored record that cannot be
	// read (a malformed field); the message names the key. Its method
	// Malformed returns true (facade.IsMalformed looks for it).
	ErrCorrupt error = malformedError{}
)

// malformedError is ErrCorrupt: comparable, so errors.Is matches it, and
// with a method that facade.IsMalformed finds without importing this
// package.
type malformedError struct{}

func (malformedError) Error() string { return "repository: malformed record" }

// Malformed reports true: a stored record could not be read.
func (malformedError) Malformed() bool { return true }

// UnavailableError reports that Redis could not answer: the connection
// failed or timed out, the context deadline passed while talking to it, or
// it answered that it cannot serve (LOADING, MASTERDOWN, ...). Its method
// Unavailable returns true (facade.IsUnavailable looks for it);
// errors.Is(err, context.DeadlineExceeded) holds when a deadline was the cause.
type UnavailableError struct {
	// Op says what the store was doing.
	Op string
	// msg is the client's description; go-redis errors do not leave the package.
	msg   string
	cause error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%s: redis unavailable: %s", e.Op, e.msg)
}

// Unavailable reports true: the backend could not be reached.
func (e *UnavailableError) Unavailable() bool { return true }

// Is makes errors.Is(err, ErrUnavailable) match.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns context.DeadlineExceeded when the deadline was the cause.
func (e *UnavailableError) Unwrap() error { return e.cause }

// unavailableReplies are Redis error replies that mean "cannot serve now".
var unavailableReplies = []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "BUSY", "NOREPLICAS"}

// isReply reports whether err is an error reply from Redis (redis.Nil included)
// rather than a transport failure.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// wrapErr turns a go-redis error into one of this package: an
// *UnavailableError for transport failures (matching the context's error
// when its deadline passed), context.Canceled kept matchable, the text of
// anything else. It never returns a go-redis type.
func wrapErr(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if isReply(err) {
		msg := err.Error()
		for _, p := range unavailableReplies {
			if strings.HasPrefix(msg, p) {
				return &UnavailableError{Op: op, msg: msg}
			}
		}
		return fmt.Errorf("%s: redis: %s", op, msg)
	}
	if errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("%s: %w", op, context.Canceled)
	}
	u := &UnavailableError{Op: op, msg: err.Error()}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		u.cause = context.DeadlineExceeded
	}
	return u
}

// IsUnavailable reports whether err says the backend could not be reached.
func IsUnavailable(err error) bool {
	var u interface{ Unavailable() bool }
	return errors.As(err, &u) && u.Unavailable()
}
