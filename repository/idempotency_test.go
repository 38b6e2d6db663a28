package repository

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/internal/redistest"
)

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	k, _ := NewKeys("prod:executor:")
	sum := sha256.Sum256([]byte("create-plan-42"))
	tests := []struct {
		name, scope, key, want string
		err                    bool
	}{
		{"OK", "ci-bot", "create-plan-42", "prod:executor:idem:ci-bot:{" + hex.EncodeToString(sum[:]) + "}", false},
		{"HostileKeyHashedOK", "ci-bot", "a}{b*? \n", "", false},
		{"ErrEmptyScope", "", "k", "", true},
		{"ErrScopeWithBrace", "ci{bot}", "k", "", true},
		{"ErrScopeWithColon", "ci:bot", "k", "", true},
		{"ErrEmptyKey", "ci-bot", "", "", true},
		{"ErrLongKey", "ci-bot", strings.Repeat("k", IdempotencyKeyMax+1), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := k.Idempotency(tt.scope, tt.key)
			if tt.err {
				if !errors.Is(err, ErrIdempotencyInvalid) {
					t.Fatalf("Idempotency(%q, %q) = %q, %v; want ErrIdempotencyInvalid", tt.scope, tt.key, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want != "" && got != tt.want {
				t.Errorf("key = %q, want %q", got, tt.want)
			}
			if strings.Contains(got, tt.key) || strings.Count(got, "{") != 1 || strings.ContainsAny(got, " \n*?") {
				t.Errorf("key %q carries the raw client key", got)
			}
		})
	}
}

func TestIdempotencyProtocol(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		s := e.redis.Idempotency()
		claimA, claimB := []byte("claim-a"), []byte("claim-b")
		// An answer is opaque bytes: newlines and NULs survive.
		answer := []byte("{\"state\":\"done\"}\n\x00{\"planId\":\"p\"}\n")

		if held, err := s.Begin(ctx, "alice", "k1", claimA, time.Minute); err != nil || held != nil {
			t.Fatalf("first Begin = %q, %v; want a claim", held, err)
		}
		if held, err := s.Begin(ctx, "alice", "k1", claimB, time.Minute); err != nil || string(held) != string(claimA) {
			t.Fatalf("Begin while running = %q, %v; want the first claim", held, err)
		}
		if held, err := s.Begin(ctx, "bob", "k1", claimB, time.Minute); err != nil || held != nil {
			t.Fatalf("Begin in another scope = %q, %v; want a claim of its own", held, err)
		}
		if err := s.Complete(ctx, "alice", "k1", claimB, answer, time.Hour); !errors.Is(err, ErrIdempotencyLost) {
			t.Fatalf("Complete with another's claim = %v, want ErrIdempotencyLost", err)
		}
		if err := s.Abandon(ctx, "alice", "k1", claimB); !errors.Is(err, ErrIdempotencyLost) {
			t.Fatalf("Abandon with another's claim = %v, want ErrIdempotencyLost", err)
		}
		if err := s.Complete(ctx, "alice", "k1", claimA, answer, time.Hour); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		key, _ := e.redis.Keys().Idempotency("alice", "k1")
		if ttl := e.client.PTTL(ctx, key).Val(); ttl <= time.Minute || ttl > time.Hour {
			t.Errorf("TTL after Complete = %s, want the answer's hour", ttl)
		}
		n := e.counter.Count(func() {
			held, err := s.Begin(ctx, "alice", "k1", claimB, time.Minute)
			if err != nil || string(held) != string(answer) {
				t.Errorf("Begin after Complete = %q, %v; want the answer", held, err)
			}
		})
		if n != 1 {
			t.Errorf("Begin took %d round trips, want 1", n)
		}
		if err := s.Abandon(ctx, "alice", "k1", claimA); !errors.Is(err, ErrIdempotencyLost) {
			t.Errorf("Abandon of a completed key = %v, want ErrIdempotencyLost", err)
		}

		// Abandon frees the key for a retry.
		if held, _ := s.Begin(ctx, "alice", "k2", claimA, time.Minute); held != nil {
			t.Fatal("k2 taken")
		}
		if err := s.Abandon(ctx, "alice", "k2", claimA); err != nil {
			t.Fatalf("Abandon: %v", err)
		}
		if held, err := s.Begin(ctx, "alice", "k2", claimB, time.Minute); err != nil || held != nil {
			t.Fatalf("Begin after Abandon = %q, %v; want a new claim", held, err)
		}
	})
}

func TestIdempotencyClaimExpires(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			c, prefix := b.New(t)
			e := newRedisEnv(t, c, prefix, Config{})
			ctx := ctxT(t)
			s := e.redis.Idempotency()
			if held, err := s.Begin(ctx, "alice", "k", []byte("first"), 50*time.Millisecond); err != nil || held != nil {
				t.Fatalf("Begin = %q, %v", held, err)
			}
			if b.Mini != nil {
				b.Mini(t).FastForward(time.Second)
			} else {
				time.Sleep(150 * time.Millisecond)
			}
			// The first request's instance died: a repeat runs, and the
			// first one's late Complete does not overwrite the new claim.
			if held, err := s.Begin(ctx, "alice", "k", []byte("second"), time.Minute); err != nil || held != nil {
				t.Fatalf("Begin after the claim expired = %q, %v; want a new claim", held, err)
			}
			if err := s.Complete(ctx, "alice", "k", []byte("first"), []byte("late"), time.Hour); !errors.Is(err, ErrIdempotencyLost) {
				t.Fatalf("late Complete = %v, want ErrIdempotencyLost", err)
			}
			if held, _ := s.Begin(ctx, "alice", "k", []byte("third"), time.Minute); string(held) != "second" {
				t.Fatalf("key holds %q, want the second claim", held)
			}
		})
	}
}

func TestIdempotencyOneClaimWins(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		s := e.redis.Idempotency()
		const n = 16
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			wins int
		)
		for i := range n {
			wg.Go(func() {
				held, err := s.Begin(ctx, "alice", "race", []byte{'c', byte('a' + i)}, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if held == nil {
					mu.Lock()
					wins++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("%d of %d concurrent Begins claimed the key, want 1", wins, n)
		}
	})
}

func TestIdempotencyRefusesBadInput(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		s := e.redis.Idempotency()
		big := make([]byte, IdempotencyValueMax+1)
		tests := []struct {
			name string
			call func() error
		}{
			{"BadScope", func() error { _, err := s.Begin(ctx, "a b", "k", []byte("c"), time.Minute); return err }},
			{"EmptyClaim", func() error { _, err := s.Begin(ctx, "alice", "k", nil, time.Minute); return err }},
			{"ZeroTTL", func() error { _, err := s.Begin(ctx, "alice", "k", []byte("c"), 0); return err }},
			{"AnswerTooBig", func() error { return s.Complete(ctx, "alice", "k", []byte("c"), big, time.Minute) }},
			{"EmptyAnswer", func() error { return s.Complete(ctx, "alice", "k", []byte("c"), nil, time.Minute) }},
			{"AbandonBadScope", func() error { return s.Abandon(ctx, "", "k", []byte("c")) }},
		}
		for _, tt := range tests {
			n := e.counter.Count(func() {
				if err := tt.call(); !errors.Is(err, ErrIdempotencyInvalid) {
					t.Errorf("%s: err = %v, want ErrIdempotencyInvalid", tt.name, err)
				}
			})
			if n != 0 {
				t.Errorf("%s: %d round trips, want none", tt.name, n)
			}
		}
	})
}

func TestIdempotencyUnavailable(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	r, err := NewRedis(c, Config{Prefix: "t:"})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = r.Idempotency().Begin(ctx, "alice", "k", []byte("c"), time.Minute)
	if !IsUnavailable(err) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Begin with Redis down = %v, want an *UnavailableError", err)
	}
}
