package repository

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/task"
)

// layout1 reads as instances of storage layout 1 do: a tenant's current
// task from the index STRING, a task's tenant from the taskref STRING.
type layout1 struct {
	e *env
}

func (l layout1) current(ctx context.Context, tenantID string) (string, error) {
	return l.e.client.Get(ctx, l.e.prefix+"index:tenant:{"+tenantID+"}").Result()
}

func (l layout1) tenantOf(ctx context.Context, taskID string) (string, error) {
	return l.e.client.Get(ctx, l.e.prefix+"taskref:{"+taskID+"}").Result()
}

// checkLayout1 fails unless an instance of layout 1 finds fx's tasks: the
// current task of each tenant and each task's tenant, both keys with the
// store's TTL.
func (l layout1) check(t *testing.T, fx fixture) {
	t.Helper()
	ctx := ctxT(t)
	for _, tk := range fx.tasks {
		if id, err := l.current(ctx, tk.TenantID); err != nil || id != tk.ID {
			t.Fatalf("layout 1: current task of %s = %q, %v; want %s", tk.TenantID, id, err, tk.ID)
		}
		if tn, err := l.tenantOf(ctx, tk.ID); err != nil || tn != tk.TenantID {
			t.Fatalf("layout 1: tenant of %s = %q, %v; want %s", tk.ID, tn, err, tk.TenantID)
		}
		for _, k := range []string{l.e.prefix + "index:tenant:{" + tk.TenantID + "}", l.e.prefix + "taskref:{" + tk.ID + "}"} {
			if ttl := l.e.client.PTTL(ctx, k).Val(); ttl <= 0 || ttl > TTLDefault {
				t.Fatalf("layout 1: %s has TTL %s, want (0, %s]", k, ttl, TTLDefault)
			}
		}
	}
}

// none fails if a layout-1 key names fx's tasks: a tenant index STRING
// (one an earlier creation wrote may name an earlier task) or a taskref
// STRING.
func (l layout1) none(t *testing.T, fx fixture) {
	t.Helper()
	ctx := ctxT(t)
	for _, tk := range fx.tasks {
		if id, err := l.current(ctx, tk.TenantID); id == tk.ID {
			t.Fatalf("the layout-1 index of %s names %s (%v) while legacy keys are off", tk.TenantID, id, err)
		}
		if n := l.e.client.Exists(ctx, l.e.prefix+"taskref:{"+tk.ID+"}").Val(); n != 0 {
			t.Fatalf("the layout-1 taskref of %s was written while legacy keys are off", tk.ID)
		}
	}
}

// With LegacyKeysOn, a plan's creation writes what instances of layout 1
// read, so that they name a tenant's newest task and find a task by id;
// and the store itself reads as before.
func TestLegacyKeysOn(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{LegacyKeys: LegacyKeysOn}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		old := layout1{e}
		fills := watchBackfills(e)
		first := createPlan(t, e, 3, 0)
		old.check(t, first)
		second := createPlan(t, e, 2, 0) // tenants 0 and 1 again, in the same millisecond
		old.check(t, second)
		if id, _ := old.current(ctx, first.tasks[2].TenantID); id != first.tasks[2].ID {
			t.Fatalf("tenant 2's index moved to %q", id)
		}
		if got, _, err := e.store.TaskByTenant(ctx, second.tasks[0].TenantID); err != nil || got.ID != second.tasks[0].ID {
			t.Fatalf("TaskByTenant = %v, %v; want %s", got, err, second.tasks[0].ID)
		}
		if !e.redis.LegacyKeysOn() {
			t.Fatal("LegacyKeysOn() = false with LegacyKeysOn")
		}
		// A listing without any older instance does not turn "on" off; the
		// first one backfills (what was created before, while off), once.
		if _, err := e.store.Instances(ctx); err != nil || !e.redis.LegacyKeysOn() {
			t.Fatalf("after a listing: on = %v, %v", e.redis.LegacyKeysOn(), err)
		}
		if got := backfilled(t, fills); got.err != nil || got.Skipped || got.Tenants != 0 || got.Tasks != 5 {
			t.Fatalf("backfill %+v; want no index to move and the 5 taskrefs", got)
		}
		if _, err := e.store.Instances(ctx); err != nil {
			t.Fatal(err)
		}
		noBackfill(t, fills)
	})
}

// registerLayout1 writes an instance record as versions of layout 1 did:
// no storageLayout field.
func registerLayout1(t *testing.T, e *env, id string, ttl time.Duration) {
	t.Helper()
	ctx := ctxT(t)
	k, err := e.redis.keys.Instance(id)
	if err != nil {
		t.Fatal(err)
	}
	now := e.clock.Now()
	e.client.HSet(ctx, k, fID, id, fAddr, "10.0.0.9:8080", fVersion, "v0.9.0", fStartedAt, formatTime(now),
		fLastSeen, formatTime(now), fTasksRunning, "0", fSingle, "0")
	e.client.PExpire(ctx, k, ttl)
	e.client.ZAdd(ctx, e.redis.keys.Instances(), redis.Z{Score: float64(now.UnixMilli()), Member: id})
}

// With LegacyKeysAuto the store writes the keys of layout 1 from its start
// until a listing of instances shows none of layout 1 alive, and again
// while one is.
func TestLegacyKeysAuto(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{LegacyKeys: LegacyKeysAuto}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		old := layout1{e}
		fills := watchBackfills(e)
		if !e.redis.LegacyKeysOn() {
			t.Fatal("off before the first listing of instances")
		}
		old.check(t, createPlan(t, e, 2, 0))

		if err := e.store.RegisterInstance(ctx, task.Instance{ID: "coord-new"}, time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Instances(ctx); err != nil || e.redis.LegacyKeysOn() {
			t.Fatalf("alone with its own layout: on = %v, %v; want off", e.redis.LegacyKeysOn(), err)
		}
		offPlan := createPlan(t, e, 2, 0)
		old.none(t, offPlan)
		noBackfill(t, fills)

		// An instance of layout 1 joins (a rolling upgrade, or a
		// downgrade's first old instance): the keys are turned on, and the
		// tasks created while they were off get them (a backfill).
		registerLayout1(t, e, "coord-old", time.Hour)
		insts, err := e.store.Instances(ctx)
		if err != nil || !e.redis.LegacyKeysOn() {
			t.Fatalf("with coord-old alive: on = %v, %v; want on", e.redis.LegacyKeysOn(), err)
		}
		if got := backfilled(t, fills); got.err != nil || got.Skipped || got.Tenants != 2 || got.Tasks != 4 {
			t.Fatalf("backfill %+v; want 2 tenant indexes (the plan made while off) and 4 taskrefs", got)
		}
		old.check(t, offPlan)
		if _, err := e.store.Instances(ctx); err != nil {
			t.Fatal(err)
		}
		noBackfill(t, fills) // once per turning on
		layouts := map[string]int{}
		for _, in := range insts {
			layouts[in.ID] = in.StorageLayout
		}
		if layouts["coord-old"] != 1 || layouts["coord-new"] != StorageLayout {
			t.Fatalf("listed layouts %v, want coord-old 1, coord-new %d", layouts, StorageLayout)
		}
		withOld := createPlan(t, e, 2, 0)
		old.check(t, withOld)

		// A listing that fails leaves the mode as it was (on: an empty
		// listing would turn it off).
		broken := redistest.Clone(t, e.client)
		broken.AddHook(failAll())
		rb, _ := NewRedis(broken, Config{Prefix: e.prefix, LegacyKeys: LegacyKeysAuto})
		if _, err := rb.Instances(ctx); err == nil || !rb.LegacyKeysOn() {
			t.Fatalf("a failed listing: %v, on = %v; want an error and still on", err, rb.LegacyKeysOn())
		}

		// It stops (deregisters: its record goes, its entry stays): off.
		if err := e.store.DeregisterInstance(ctx, "coord-old"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Instances(ctx); err != nil || e.redis.LegacyKeysOn() {
			t.Fatalf("coord-old gone: on = %v, %v; want off", e.redis.LegacyKeysOn(), err)
		}
		after := createPlan(t, e, 2, 0)
		old.none(t, after)
		// What was written while it was alive stays readable for it.
		if tn, err := old.tenantOf(ctx, withOld.tasks[1].ID); err != nil || tn != withOld.tasks[1].TenantID {
			t.Fatalf("taskref STRING of %s: %q, %v", withOld.tasks[1].ID, tn, err)
		}

		// It comes back within the backfill gap: on again, and the backfill
		// is left to the one that ran (its marker stands).
		registerLayout1(t, e, "coord-old", time.Hour)
		if _, err := e.store.Instances(ctx); err != nil || !e.redis.LegacyKeysOn() {
			t.Fatalf("coord-old back: on = %v, %v", e.redis.LegacyKeysOn(), err)
		}
		if got := backfilled(t, fills); got.err != nil || !got.Skipped {
			t.Fatalf("second backfill within the gap: %+v, want skipped", got)
		}
	})
}

type fill struct {
	LegacyBackfill
	err error
}

// watchBackfills reports the backfills e's store runs by itself.
func watchBackfills(e *env) <-chan fill {
	ch := make(chan fill, 8)
	e.redis.cfg.OnLegacyBackfill = func(b LegacyBackfill, err error) { ch <- fill{b, err} }
	return ch
}

func backfilled(t *testing.T, fills <-chan fill) fill {
	t.Helper()
	select {
	case f := <-fills:
		return f
	case <-time.After(20 * time.Second):
		t.Fatal("no backfill reported")
	}
	return fill{}
}

// noBackfill fails if a backfill is reported within a moment (one started
// by the calls before it reports within milliseconds on a test's store).
func noBackfill(t *testing.T, fills <-chan fill) {
	t.Helper()
	select {
	case f := <-fills:
		t.Fatalf("unexpected backfill %+v", f)
	case <-time.After(300 * time.Millisecond):
	}
}

// BackfillLegacyKeys gives every task the store holds the keys of layout
// 1, whatever the mode was at their creation, and nothing of another
// prefix; it can run again.
func TestBackfillLegacyKeys(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		other := newRedisEnv(t, e.client, e.prefix+"other:", Config{})
		first := createPlan(t, e, 3, 0)
		second := createPlan(t, e, 2, 0) // tenants 0 and 1 again
		elsewhere := createPlan(t, other, 2, 0)
		old := layout1{e}
		old.none(t, first)
		old.none(t, second)
		// A bucket field that is not a task id is not copied.
		bucket, _ := e.redis.keys.TaskRef(first.tasks[0].ID)
		e.client.HSet(ctx, bucket, "junk{*}", "t-00000")

		got, err := e.redis.BackfillLegacyKeys(ctx)
		if err != nil || got != (LegacyBackfill{Tenants: 3, Tasks: 5}) {
			t.Fatalf("BackfillLegacyKeys = %+v, %v; want 3 tenant indexes, 5 taskrefs", got, err)
		}
		old.check(t, second)
		for _, tk := range first.tasks {
			if tn, err := old.tenantOf(ctx, tk.ID); err != nil || tn != tk.TenantID {
				t.Fatalf("taskref of %s: %q, %v", tk.ID, tn, err)
			}
		}
		if id, _ := old.current(ctx, first.tasks[2].TenantID); id != first.tasks[2].ID {
			t.Fatalf("index of %s = %q, want %s", first.tasks[2].TenantID, id, first.tasks[2].ID)
		}
		layout1{other}.none(t, elsewhere)
		if n := e.client.Exists(ctx, e.prefix+"taskref:{junk{*}}").Val(); n != 0 {
			t.Fatal("a bucket field that is not a task id was copied")
		}

		again, err := e.redis.BackfillLegacyKeys(ctx)
		if err != nil || again != (LegacyBackfill{Tenants: 0, Tasks: 5}) {
			t.Fatalf("a second backfill = %+v, %v; want no index to move, the 5 taskrefs again", again, err)
		}
	})
}

// A backfill that fails (here its index pipelines) is tried again at the
// next listing of instances, and its marker does not hold the others off.
func TestLegacyBackfillRetried(t *testing.T) {
	t.Parallel()
	eachRedis(t, Config{}, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		c := redistest.Clone(t, e.client)
		hook := newFailing(func(name string) bool { return name == "evalsha" || name == "eval" })
		c.AddHook(hook)
		r, err := NewRedis(c, Config{Prefix: e.prefix, LegacyKeys: LegacyKeysOn})
		if err != nil {
			t.Fatal(err)
		}
		fills := make(chan fill, 8)
		r.cfg.OnLegacyBackfill = func(b LegacyBackfill, err error) { fills <- fill{b, err} }
		fx := createPlan(t, e, 2, 0)
		if _, err := r.Instances(ctx); err != nil {
			t.Fatal(err)
		}
		if got := backfilled(t, fills); got.err == nil || !strings.Contains(got.err.Error(), "injected") {
			t.Fatalf("backfill with its scripts failing: %+v, want their error", got)
		}
		if n := e.client.Exists(ctx, e.redis.keys.LegacyBackfill()).Val(); n != 0 {
			t.Fatal("a failed backfill left its marker")
		}
		hook.On.Store(false)
		if _, err := r.Instances(ctx); err != nil {
			t.Fatal(err)
		}
		if got := backfilled(t, fills); got.err != nil || got.Skipped || got.Tasks != 2 {
			t.Fatalf("backfill at the next listing: %+v, want the 2 tasks", got)
		}
		layout1{e}.check(t, fx)
	})
}

// failing fails, while On, every command whose name Match accepts (see
// redistest.Failing).
type failing = redistest.Failing

func newFailing(match func(name string) bool) *failing { return redistest.NewFailing(match) }

// failAll is a Redis that answers nothing.
func failAll() *failing { return newFailing(func(string) bool { return true }) }

// With LegacyKeysOff nothing of layout 1 is written, whoever is alive.
func TestLegacyKeysOff(t *testing.T) {
	t.Parallel()
	for name, mode := range map[string]LegacyKeys{"zero": "", "off": LegacyKeysOff} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			eachRedis(t, Config{LegacyKeys: mode}, func(t *testing.T, e *env) {
				registerLayout1(t, e, "coord-old", time.Hour)
				if _, err := e.store.Instances(ctxT(t)); err != nil || e.redis.LegacyKeysOn() {
					t.Fatalf("mode %q with coord-old alive: on = %v, %v; want off", mode, e.redis.LegacyKeysOn(), err)
				}
				layout1{e}.none(t, createPlan(t, e, 2, 0))
			})
		})
	}
}

func TestParseLegacyKeys(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"auto", "on", "off"} {
		if m, err := ParseLegacyKeys(ok); err != nil || string(m) != ok {
			t.Errorf("ParseLegacyKeys(%q) = %q, %v", ok, m, err)
		}
	}
	for _, bad := range []string{"", "On", "true", "1", " auto", "auto\n", "{on}", "o*", "off:on", "\x00"} {
		if _, err := ParseLegacyKeys(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseLegacyKeys(%q): %v, want ErrConfig", bad, err)
		}
		if bad == "" {
			continue // the zero Config value: off
		}
		if _, err := NewRedis(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), Config{LegacyKeys: LegacyKeys(bad)}); !errors.Is(err, ErrConfig) {
			t.Errorf("NewRedis with LegacyKeys %q: %v, want ErrConfig", bad, err)
		}
	}
}
