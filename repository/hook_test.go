package repository

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/internal/redistest"
)

// commandLog records what a CommandHook reports.
type commandLog struct {
	mu  sync.Mutex
	got []string
}

func (l *commandLog) report(cmd string, d time.Duration, failed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, fmt.Sprintf("%s failed=%t", cmd, failed))
	if d < 0 {
		l.got = append(l.got, "negative duration")
	}
}

func (l *commandLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.got
	l.got = nil
	return out
}

func TestCommandHook(t *testing.T) {
	t.Parallel()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			client, prefix := b.New(t)
			log := &commandLog{}
			client.AddHook(NewCommandHook(log.report))
			ctx := context.Background()
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			tests := []struct {
				name string
				do   func()
				want []string
			}{
				{"SetOK", func() { client.Set(ctx, prefix+"k", "v", time.Minute) }, []string{"set failed=false"}},
				{"MissingKeyOK", func() { client.Get(ctx, prefix+"missing") }, []string{"get failed=false"}},
				{"BlockingReadEmptyOK", func() {
					client.XRead(ctx, &redis.XReadArgs{Streams: []string{prefix + "events", "$"}, Block: 20 * time.Millisecond})
				}, []string{"xread failed=false"}},
				{"PipelineOnce", func() {
					pp := client.Pipeline()
					pp.Get(ctx, prefix+"k")
					pp.Get(ctx, prefix+"missing")
					_, _ = pp.Exec(ctx)
				}, []string{"pipeline failed=false"}},
				{"ErrorReplyFailed", func() { client.EvalSha(ctx, "0000000000000000000000000000000000000000", nil) },
					[]string{"evalsha failed=true"}},
				{"ErrorInPipelineFailed", func() {
					pp := client.Pipeline()
					pp.Get(ctx, prefix+"k")
					pp.EvalSha(ctx, "0000000000000000000000000000000000000000", nil)
					_, _ = pp.Exec(ctx)
				}, []string{"pipeline failed=true"}},
				{"UnknownCommandOther", func() { client.Echo(ctx, "hi") }, []string{"other failed=false"}},
				{"CancelledNotFailed", func() { client.Get(cancelled, prefix+"k") }, []string{"get failed=false"}},
			}
			for _, tt := range tests {
				// Sequential: the log is the client's.
				log.take()
				tt.do()
				if got := log.take(); !slices.Equal(got, tt.want) {
					t.Errorf("%s: reported %q, want %q", tt.name, got, tt.want)
				}
			}
		})
	}
	t.Run("UnreachableFailed", func(t *testing.T) {
		t.Parallel()
		m, client := redistest.Mini(t)
		log := &commandLog{}
		client.AddHook(NewCommandHook(log.report))
		m.Close()
		_ = client.Ping(context.Background()).Err()
		if got := log.take(); !slices.Equal(got, []string{"ping failed=true"}) {
			t.Errorf("reported %q, want a failed ping", got)
		}
	})
}
