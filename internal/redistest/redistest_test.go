package redistest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/internal/redistest"
)

// TestCounterSkipsHandshake: the first command of a client dials a
// connection (HELLO, CLIENT SETINFO, ...), and only the command is counted.
func TestCounterSkipsHandshake(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			c, prefix := b.New(t)
			counter := &redistest.Counter{}
			c.AddHook(counter)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if n := counter.Count(func() { _ = c.Set(ctx, prefix+"k", "v", time.Minute).Err() }); n != 1 {
				t.Errorf("first command on a new connection: %d round trips, want 1", n)
			}
			if n := counter.Count(func() {
				_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
					p.Get(ctx, prefix+"k")
					p.Del(ctx, prefix+"k")
					return nil
				})
			}); n != 1 {
				t.Errorf("pipeline of 2: %d round trips, want 1", n)
			}
			if n := counter.Count(func() { _ = c.Do(ctx, "client", "setname", "named").Err() }); n != 0 {
				t.Errorf("CLIENT SETNAME: %d round trips, want 0 (a handshake command)", n)
			}
			if n := counter.Count(func() { _ = c.ClientList(ctx).Err() }); n != 1 {
				t.Errorf("CLIENT LIST: %d round trips, want 1", n)
			}
			if got := counter.Commands(); got != 4 {
				t.Errorf("Commands = %d, want 4 (SET, GET, DEL, CLIENT LIST)", got)
			}
		})
	}
}

// TestCallgrindCountsInstructions: twice the commands, about twice the
// instructions; nothing done, next to nothing.
func TestCallgrindCountsInstructions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs redis-server under valgrind")
	}
	s := redistest.StartCallgrind(t)
	c := redistest.NewClient(t, s.Addr)
	ctx := context.Background()
	sets := func(n int) func() {
		return func() {
			p := c.Pipeline()
			for i := range n {
				p.Set(ctx, fmt.Sprintf("k%d", i), "v", 0)
			}
			if _, err := p.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	one, err := s.Instructions(sets(2000))
	if err != nil {
		t.Fatal(err)
	}
	two, err := s.Instructions(sets(4000))
	if err != nil {
		t.Fatal(err)
	}
	idle, err := s.Instructions(func() {})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("2000 SETs: %d instructions, 4000: %d, nothing: %d", one, two, idle)
	if r := float64(two) / float64(one); r < 1.6 || r > 2.4 {
		t.Errorf("4000 SETs cost %.2f× 2000 SETs, want about 2×", r)
	}
	if idle*10 > one {
		t.Errorf("nothing cost %d instructions, 2000 SETs %d", idle, one)
	}
}
