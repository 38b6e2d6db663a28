package repository

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// eachStoreTimed runs f like eachStore, with advance moving the store's
// clock and Redis' expiry clock forward by d (miniredis fast-forwards, the
// real Redis sleeps).
func eachStoreTimed(t *testing.T, f func(t *testing.T, e *env, advance func(time.Duration))) {
	t.Helper()
	for _, b := range redistest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			c, prefix := b.New(t)
			e := newRedisEnv(t, c, prefix, Config{})
			advance := func(d time.Duration) {
				e.clock.Add(d)
				if b.Mini != nil {
					b.Mini(t).FastForward(d)
				} else {
					time.Sleep(d)
				}
			}
			f(t, e, advance)
		})
	}
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		e := newMemoryEnv(t)
		f(t, e, e.clock.Add)
	})
}

// roundTrips returns the round trips f made on a Redis env (-1 on memory).
func roundTrips(e *env, f func()) int64 {
	if e.counter == nil {
		f()
		return -1
	}
	return e.counter.Count(f)
}

func TestInstanceRegistry(t *testing.T) {
	t.Parallel()
	eachStoreTimed(t, func(t *testing.T, e *env, advance func(time.Duration)) {
		ctx := ctxT(t)
		a := task.Instance{ID: "coord-a", Addr: "10.0.0.1:8080", Version: "1.4.0", StartedAt: t0.Add(-time.Hour),
			LastSeen: e.clock.Now(), TasksRunning: 3, SingleInstance: true, StorageLayout: 1}
		if n := roundTrips(e, func() {
			if err := e.store.RegisterInstance(ctx, a, time.Second); err != nil {
				t.Fatalf("RegisterInstance: %v", err)
			}
		}); n != 1 && n != -1 {
			t.Errorf("RegisterInstance took %d round trips, want 1", n)
		}
		e.clock.Add(100 * time.Millisecond)
		// LastSeen zero: the store's clock.
		b := task.Instance{ID: "coord-b", Addr: "10.0.0.2:8080", Version: "1.4.1", StartedAt: t0}
		if err := e.store.RegisterInstance(ctx, b, time.Hour); err != nil {
			t.Fatal(err)
		}
		b.LastSeen = e.clock.Now()
		// The store stamps its own layout, whatever the caller says.
		a.StorageLayout, b.StorageLayout = StorageLayout, StorageLayout

		var got []task.Instance
		if n := roundTrips(e, func() {
			var err error
			if got, err = e.store.Instances(ctx); err != nil {
				t.Fatalf("Instances: %v", err)
			}
		}); n != 2 && n != -1 {
			t.Errorf("Instances took %d round trips, want 2", n)
		}
		if want := []task.Instance{b, a}; !reflect.DeepEqual(got, want) {
			t.Fatalf("Instances = %+v\nwant (newest first) %+v", got, want)
		}

		// a's record expires: it stays listed with its last-seen time only.
		advance(1200 * time.Millisecond)
		got, err := e.store.Instances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := []task.Instance{b, {ID: a.ID, LastSeen: a.LastSeen, Gone: true}}; !reflect.DeepEqual(got, want) {
			t.Fatalf("after a's record expired: %+v\nwant %+v", got, want)
		}

		// b shuts down cleanly: its record goes, its entry stays with the time it left.
		if err := e.store.DeregisterInstance(ctx, b.ID); err != nil {
			t.Fatalf("DeregisterInstance: %v", err)
		}
		left := e.clock.Now()
		got, _ = e.store.Instances(ctx)
		if want := []task.Instance{{ID: b.ID, LastSeen: left, Gone: true}, {ID: a.ID, LastSeen: a.LastSeen, Gone: true}}; !reflect.DeepEqual(got, want) {
			t.Fatalf("after b deregistered: %+v\nwant %+v", got, want)
		}
		if got[0].Alive(left, time.Hour) {
			t.Fatalf("a deregistered instance reported alive")
		}

		// A day later, a registration prunes both.
		e.clock.Add(InstancePruneAfter + time.Second)
		c := task.Instance{ID: "coord-c", LastSeen: e.clock.Now()}
		if err := e.store.RegisterInstance(ctx, c, time.Minute); err != nil {
			t.Fatal(err)
		}
		got, _ = e.store.Instances(ctx)
		if len(got) != 1 || got[0].ID != "coord-c" {
			t.Fatalf("after a day: %+v, want coord-c alone (the others pruned)", got)
		}
	})
}

func TestInstanceRegistryRefusesBadInput(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		tests := []struct {
			name string
			call func() error
		}{
			{"BraceID", func() error { return e.store.RegisterInstance(ctx, task.Instance{ID: "{coord}"}, time.Minute) }},
			{"EmptyID", func() error { return e.store.RegisterInstance(ctx, task.Instance{}, time.Minute) }},
			{"ZeroTTL", func() error { return e.store.RegisterInstance(ctx, task.Instance{ID: "coord-a"}, 0) }},
			{"DeregisterGlob", func() error { return e.store.DeregisterInstance(ctx, "coord*") }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if n := roundTrips(e, func() {
					if err := tt.call(); !errors.Is(err, task.ErrInvalid) {
						t.Errorf("err = %v, want task.ErrInvalid", err)
					}
				}); n > 0 {
					t.Errorf("%d round trips for bad input, want none", n)
				}
			})
		}
		if got, err := e.store.Instances(ctx); err != nil || len(got) != 0 {
			t.Fatalf("Instances after refused registrations: %+v, %v", got, err)
		}
	})
}
