package repository

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/redistest"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

func TestKeysLayout(t *testing.T) {
	t.Parallel()
	const planID, taskID, tenant = "plan-01JD0000000000000000000000", "task-01JD0000000000000000000001", "t-001"
	tests := []struct {
		prefix string
		want   map[string]string
	}{
		{"executor:", map[string]string{
			"plan":       "executor:plan:{" + planID + "}",
			"planTasks":  "executor:plan:{" + planID + "}:tasks",
			"planCounts": "executor:plan:{" + planID + "}:counts",
			"plans":      "executor:plans",
			"task":       "executor:task:{t-001}:" + taskID,
			"timeline":   "executor:task:{t-001}:" + taskID + ":timeline",
			"ckpt":       "executor:ckpt:{t-001}:" + taskID,
			"taskref":    "executor:taskrefs:{481095.1}", // the hour of 01JD000000 (Unix ms 1731945562112), the shard of its last digit 1
			"history":    "executor:index:tenant:{t-001}:history",
			"lock":       "executor:lock:tenant:{t-001}",
			"fence":      "executor:fence:tenant:{t-001}",
			"events":     "executor:events",
			"instances":  "executor:instances",
			"instance":   "executor:instance:{coord-a}",
			"idem":       "executor:idem:api-1:{2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae}",
		}},
		{"prod:executor:", map[string]string{
			"plan":  "prod:executor:plan:{" + planID + "}",
			"task":  "prod:executor:task:{t-001}:" + taskID,
			"lock":  "prod:executor:lock:tenant:{t-001}",
			"plans": "prod:executor:plans",
		}},
		{"", map[string]string{"history": "index:tenant:{t-001}:history", "events": "events"}},
	}
	for _, tt := range tests {
		k, err := NewKeys(tt.prefix)
		if err != nil {
			t.Fatalf("NewKeys(%q): %v", tt.prefix, err)
		}
		must := func(s string, err error) string {
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		got := map[string]string{
			"plan":       must(k.Plan(planID)),
			"planTasks":  must(k.PlanTasks(planID)),
			"planCounts": must(k.PlanCounts(planID)),
			"plans":      k.Plans(),
			"task":       must(k.Task(tenant, taskID)),
			"timeline":   must(k.Timeline(tenant, taskID)),
			"ckpt":       must(k.Checkpoint(tenant, taskID)),
			"taskref":    must(k.TaskRef(taskID)),
			"history":    must(k.History(tenant)),
			"lock":       must(k.Lock(tenant)),
			"fence":      must(k.Fence(tenant)),
			"events":     k.Events(),
			"instances":  k.Instances(),
			"instance":   must(k.Instance("coord-a")),
			"idem":       must(k.Idempotency("api-1", "foo")),
		}
		// The grouped keys the scripts get (one allocation each) are the
		// same keys.
		pk, err := k.planKeys(planID)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := k.taskKeys(tenant, taskID)
		if err != nil {
			t.Fatal(err)
		}
		grouped := map[string]string{
			"plan": pk.plan, "planTasks": pk.tasks, "planCounts": pk.counts,
			"task": tk.task, "timeline": tk.timeline, "ckpt": tk.ckpt, "lock": tk.lock, "fence": tk.fence,
			"history": tk.history, "taskref": tk.ref,
		}
		for name, g := range grouped {
			if g != got[name] {
				t.Errorf("prefix %q: grouped %s key = %q, single %q", tt.prefix, name, g, got[name])
			}
		}
		if k.plan(planID) != got["plan"] || k.history(tenant) != got["history"] {
			t.Errorf("prefix %q: unchecked plan/history keys %q %q", tt.prefix, k.plan(planID), k.history(tenant))
		}
		for name, want := range tt.want {
			if got[name] != want {
				t.Errorf("prefix %q: %s key = %q, want %q", tt.prefix, name, got[name], want)
			}
		}
	}
}

// hostile are ids that must never reach a key.
var hostile = []string{
	"", "{t-001}", "t:001", "t*", "t?", "t 001", "t\n001", "t[1]", strings.Repeat("a", 200), "-t", "t\x00",
}

func TestKeysRefuseHostileIDs(t *testing.T) {
	t.Parallel()
	k, _ := NewKeys("executor:")
	const planID, taskID = "plan-01JD0000000000000000000000", "task-01JD0000000000000000000001"
	for _, id := range hostile {
		for name, f := range map[string]func() (string, error){
			"Task tenant":   func() (string, error) { return k.Task(id, taskID) },
			"Task id":       func() (string, error) { return k.Task("t-001", id) },
			"Timeline":      func() (string, error) { return k.Timeline(id, taskID) },
			"Checkpoint":    func() (string, error) { return k.Checkpoint("t-001", id) },
			"TaskRef":       func() (string, error) { return k.TaskRef(id) },
			"TaskRefString": func() (string, error) { return k.TaskRefString(id) },
			"History":       func() (string, error) { return k.History(id) },
			"Lock":          func() (string, error) { return k.Lock(id) },
			"Fence":         func() (string, error) { return k.Fence(id) },
			"Plan":          func() (string, error) { return k.Plan(id) },
			"PlanTasks":     func() (string, error) { return k.PlanTasks(id) },
			"PlanCounts":    func() (string, error) { return k.PlanCounts(id) },
			"Plan task id":  func() (string, error) { return k.Plan(taskID) },
			"Instance":      func() (string, error) { return k.Instance(id) },
		} {
			key, err := f()
			if err == nil {
				t.Errorf("%s(%q) = %q, want an error", name, id, key)
				continue
			}
			if !errors.Is(err, task.ErrInvalid) && !errors.Is(err, plan.ErrInvalid) {
				t.Errorf("%s(%q): %v does not wrap task.ErrInvalid or plan.ErrInvalid", name, id, err)
			}
			if strings.ContainsAny(err.Error(), "\n\x00") {
				t.Errorf("%s(%q): error %q carries control characters", name, id, err)
			}
		}
	}
}

func TestNewKeysRefusesBadPrefix(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"{x}:", "a*", "a b", "a?", "a\n", strings.Repeat("p", 65)} {
		if _, err := NewKeys(p); !errors.Is(err, ErrConfig) {
			t.Errorf("NewKeys(%q) = %v, want ErrConfig", p, err)
		}
	}
}

func TestNewRedisConfig(t *testing.T) {
	t.Parallel()
	_, c := redistest.Mini(t)
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"OK defaults", Config{}, true},
		{"OK custom", Config{Prefix: "prod:executor:", TTL: time.Hour, TimelineMax: 10, Batch: 50}, true},
		{"ErrConfig prefix", Config{Prefix: "{p}"}, false},
		{"ErrConfig negative TTL", Config{TTL: -time.Second}, false},
		{"ErrConfig negative batch", Config{Batch: -1}, false},
		{"ErrConfig negative timeline", Config{TimelineMax: -1}, false},
		{"ErrConfig negative events max", Config{EventsMax: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRedis(c, tt.cfg)
			if tt.ok != (err == nil) {
				t.Fatalf("NewRedis(%+v) = %v", tt.cfg, err)
			}
			if !tt.ok && !errors.Is(err, ErrConfig) {
				t.Fatalf("err %v does not wrap ErrConfig", err)
			}
			if tt.ok && tt.cfg.Prefix == "" && r.Keys().Prefix() != PrefixDefault {
				t.Fatalf("prefix %q, want the default %q", r.Keys().Prefix(), PrefixDefault)
			}
		})
	}
	if _, err := NewRedis(nil, Config{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("NewRedis(nil) = %v, want ErrConfig", err)
	}
}

// TestKeysOneAllocation: a task's keys and a plan's keys are each built in
// one allocation (they are made for every write and query), whatever the
// lengths of the ids.
func TestKeysOneAllocation(t *testing.T) {
	k, err := NewKeys("dc:")
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"a", "tenant-with-a-rather-long-name-0123456789", strings.Repeat("t", task.MaxTenantIDLen)} {
		if n := testing.AllocsPerRun(100, func() { _, _ = k.taskKeys(tenant, "task-01JD0000000000000000000000") }); n != 1 {
			t.Errorf("taskKeys(%d-byte tenant): %v allocations, want 1", len(tenant), n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = k.planKeys("plan-01JD0000000000000000000000") }); n != 1 {
		t.Errorf("planKeys: %v allocations, want 1", n)
	}
}
