package facade_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/internal/redistest"
)

// An instance lists itself with its own address, version and start time
// even when its registry record lapsed between two heartbeats (a slow
// machine), leaving only its entry in the instances index.
func TestInstancesSelfWhenRecordLapsed(t *testing.T) {
	forBackends(t, func(t *testing.T, be redistest.Backend) {
		b := setup(t, be, withConfig(func(c *facade.Config) {
			c.Addr, c.Version, c.Heartbeat = "10.0.0.1:8080", "1.2.3", time.Hour
		}))
		ctx := context.Background()
		key, err := b.store.Keys().Instance("coord-a")
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, func() error {
			if b.client.Exists(ctx, key).Val() == 0 {
				return errors.New("coord-a never registered")
			}
			return nil
		})
		b.client.Del(ctx, key) // lapsed: the index keeps its last-seen time
		views, err := b.coord.Instances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(views) != 1 {
			t.Fatalf("instances %+v, want coord-a alone", views)
		}
		v := views[0]
		if v.ID != "coord-a" || !v.Alive || v.Gone || v.Addr != "10.0.0.1:8080" || v.Version != "1.2.3" || v.StartedAt.IsZero() || v.LastSeen.IsZero() {
			t.Fatalf("coord-a = %+v, want itself alive with its address, version, start and last-seen times", v)
		}
	})
}
