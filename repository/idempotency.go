package repository

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Limits of the idempotency store.
const (
	// IdempotencyKeyMax is the longest idempotency key accepted, in bytes.
	IdempotencyKeyMax = 256
	// IdempotencyValueMax is the largest claim or answer stored, in bytes.
	IdempotencyValueMax = 2 << 20
)

var (
	// ErrIdempotencyInvalid is returned for a scope, key or value the
	// idempotency store refuses (nothing is sent to Redis).
	ErrIdempotencyInvalid = errors.New("repository: invalid idempotency scope, key or value")
	// ErrIdempotencyLost is returned by Complete and Abandon when the key no
	// longer holds the caller's claim: it expired (and was perhaps claimed
	// by another request) before the first request finished.
	ErrIdempotencyLost = errors.New("repository: idempotency claim lost")
)

// Idempotency keeps the first answer to requests sent with an idempotency
// key (HTTP header Idempotency-Key), in Redis, so a repeat sent to any
// instance gets the first answer instead of doing the work again. It stores
// opaque byte strings: the caller (package httpapi) decides what a claim and
// an answer hold and compares request fingerprints itself.
//
// The protocol, one round trip each:
//
//	Begin     SET NX PX the caller's claim; if the key is taken, return what
//	          it holds (another request's claim, or a finished answer)
//	Complete  replace the claim by the answer, with the answer's TTL
//	Abandon   delete the claim, so a retry runs again (the request failed)
//
// Complete and Abandon act only while the key still holds the caller's claim
// (compare-and-set in Lua), so a claim that expired and was taken by another
// request is never overwritten. It is safe for concurrent use by any number
// of instances sharing one Redis.
type Idempotency struct {
	r *Redis
}

// Idempotency returns the idempotency store sharing r's client, key prefix
// and scripts.
func (r *Redis) Idempotency() *Idempotency { return &Idempotency{r: r} }

func (s *Idempotency) key(scope, key string) (string, error) {
	return s.r.keys.Idempotency(scope, key)
}

func checkIdempotencyValue(what string, v []byte) error {
	if len(v) == 0 || len(v) > IdempotencyValueMax {
		return fmt.Errorf("%w: %s of %d bytes, want 1..%d", ErrIdempotencyInvalid, what, len(v), IdempotencyValueMax)
	}
	return nil
}

func ttlMillis(ttl time.Duration) (int64, error) {
	ms := ttl.Milliseconds()
	if ms < 1 {
		return 0, fmt.Errorf("%w: TTL %s, want at least 1ms", ErrIdempotencyInvalid, ttl)
	}
	return ms, nil
}

// Begin claims key in scope for a first request: when the key is free it
// stores claim with a TTL of ttl and returns nil. When the key is taken it
// stores nothing and returns what the key holds: the claim of a request
// still running, or the answer a finished one stored with Complete.
// Returns ErrIdempotencyInvalid, or an *UnavailableError when Redis cannot
// answer.
func (s *Idempotency) Begin(ctx context.Context, scope, key string, claim []byte, ttl time.Duration) ([]byte, error) {
	k, err := s.key(scope, key)
	if err != nil {
		return nil, err
	}
	if err := checkIdempotencyValue("claim", claim); err != nil {
		return nil, err
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return nil, err
	}
	const op = "claim idempotency key"
	v, err := s.r.run(ctx, claimIdempotencyScript, []string{k}, claim, ms)
	if err != nil {
		return nil, wrapErr(ctx, op, err)
	}
	reply, err := replySlice(op, v)
	if err != nil || len(reply) == 0 {
		return nil, fmt.Errorf("%s: unexpected script reply %v", op, v)
	}
	if replyInt(reply[0]) == 1 {
		return nil, nil
	}
	if len(reply) < 2 {
		return nil, fmt.Errorf("%s: unexpected script reply %v", op, v)
	}
	held := replyStr(reply[1])
	if held == "" {
		// The key cannot be empty: both scripts refuse empty values.
		return nil, fmt.Errorf("%s: %w: the key holds an empty value", op, ErrCorrupt)
	}
	return []byte(held), nil
}

// Complete replaces the caller's claim with answer, kept for ttl. Returns
// ErrIdempotencyLost when the key no longer holds claim (nothing written),
// ErrIdempotencyInvalid, or an *UnavailableError.
func (s *Idempotency) Complete(ctx context.Context, scope, key string, claim, answer []byte, ttl time.Duration) error {
	if err := checkIdempotencyValue("answer", answer); err != nil {
		return err
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return err
	}
	return s.finish(ctx, "complete idempotency key", scope, key, claim, answer, ms)
}

// Abandon deletes the caller's claim so that a repeat of the request runs
// again. Returns ErrIdempotencyLost when the key no longer holds claim
// (nothing deleted), ErrIdempotencyInvalid, or an *UnavailableError.
func (s *Idempotency) Abandon(ctx context.Context, scope, key string, claim []byte) error {
	return s.finish(ctx, "abandon idempotency key", scope, key, claim, nil, 0)
}

func (s *Idempotency) finish(ctx context.Context, op, scope, key string, claim, answer []byte, ms int64) error {
	k, err := s.key(scope, key)
	if err != nil {
		return err
	}
	if err := checkIdempotencyValue("claim", claim); err != nil {
		return err
	}
	if answer == nil {
		answer = []byte{}
	}
	v, err := s.r.run(ctx, finishIdempotencyScript, []string{k}, claim, answer, ms)
	if err != nil {
		return wrapErr(ctx, op, err)
	}
	if replyInt(v) != 1 {
		return fmt.Errorf("%s: %w", op, ErrIdempotencyLost)
	}
	return nil
}
