package httpapi

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/jsonenc/jsonenctest"
	"github.com/deploycoord/deploycoord/task"
)

// hostileStrings are values the hand-written encoder must quote exactly as
// encoding/json does.
var hostileStrings = jsonenctest.Hostile

func sampleDetail() *TaskDetail {
	at := time.Date(2026, 11, 28, 11, 4, 5, 123456789, time.UTC)
	later := at.Add(1500 * time.Millisecond)
	return &TaskDetail{
		Task: Task{
			TaskID: "01JDQ8Z3K4M5N6P7Q8R9S0T1V2", TenantID: "tenant-7", PlanID: "01JDQ8Z3K4M5N6P7Q8R9S0T1V3",
			Status: task.StatusRunning, Orphaned: true, PauseRequested: true, Attempt: 3,
			CurrentStageIndex: 2, CurrentStage: "migrate", TotalStages: 5, StageStartedAt: &later,
			LastError: "stage migrate: HTTP 503", Reason: "operator", Owner: "host-a/1234", HeartbeatAt: &later,
			Fence: 1 << 40, Params: map[string]any{"version": "1.2.3", "n": 3.5, "list": []any{"a", true, nil}},
			CreatedAt: &at, StartedAt: &at, UpdatedAt: &later,
		},
		HasCheckpoint: true,
		Checkpoint: &CheckpointSummary{
			LastCompletedStageIndex: 1, CompletedStages: []string{"a", "b"}, SkippedStages: []string{},
			SavedAt: &later, Attempt: 3, Fence: -2,
		},
		LockExpiresAt: &later,
	}
}

func checkSameAsMarshal(t *testing.T, d *TaskDetail) {
	t.Helper()
	want, wantErr := json.Marshal(d)
	got, ok := d.appendJSON(nil)
	if wantErr != nil {
		if ok {
			t.Fatalf("json.Marshal refuses (%v) but appendJSON answered %s", wantErr, got)
		}
		return
	}
	if !ok {
		// A fallback is always correct, but not for the values the query
		// answers every day.
		t.Fatalf("appendJSON fell back for a value json.Marshal encodes: %s", want)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("appendJSON differs from json.Marshal\n got: %s\nwant: %s", got, want)
	}
}

func TestTaskDetailJSONEqualsMarshal(t *testing.T) {
	t.Run("sample", func(t *testing.T) { checkSameAsMarshal(t, sampleDetail()) })
	t.Run("empty", func(t *testing.T) { checkSameAsMarshal(t, &TaskDetail{}) })
	t.Run("pending", func(t *testing.T) {
		d := sampleDetail()
		d.Status, d.Params, d.Checkpoint, d.HasCheckpoint, d.LockExpiresAt = task.StatusPending, map[string]any{}, nil, false, nil
		d.StageStartedAt, d.HeartbeatAt, d.StartedAt = nil, nil, nil
		checkSameAsMarshal(t, d)
	})
	t.Run("nil stage lists", func(t *testing.T) {
		d := sampleDetail()
		d.Checkpoint.CompletedStages, d.Checkpoint.SkippedStages, d.Checkpoint.SavedAt = nil, nil, nil
		checkSameAsMarshal(t, d)
	})
	t.Run("hostile strings", func(t *testing.T) {
		for _, s := range hostileStrings {
			d := sampleDetail()
			d.TaskID, d.TenantID, d.PlanID, d.Status = s, s, s, task.Status(s)
			d.CurrentStage, d.LastError, d.Reason, d.Owner = s, s, s, s
			d.Params = map[string]any{s: s}
			d.Checkpoint.CompletedStages = []string{s, s}
			d.Checkpoint.SkippedStages = []string{s}
			checkSameAsMarshal(t, d)
		}
	})
	t.Run("times", func(t *testing.T) {
		zones := []*time.Location{
			time.UTC, time.FixedZone("IST", 5*3600+1800), time.FixedZone("neg", -(9*3600 + 30*60)),
			time.FixedZone("secs", 3600+17), time.FixedZone("far", 24*3600), time.FixedZone("farneg", -24*3600-60),
		}
		years := []int{0, 1, 999, 2026, 9999, 10000, -1}
		for _, z := range zones {
			for _, y := range years {
				for _, ns := range []int{0, 1, 500_000_000, 999_999_999} {
					at := time.Date(y, 12, 31, 23, 59, 59, ns, z)
					d := sampleDetail()
					d.CreatedAt = &at
					checkSameAsMarshalOrFallback(t, d)
				}
			}
		}
	})
	t.Run("params json refuses", func(t *testing.T) {
		d := sampleDetail()
		d.Params = map[string]any{"ch": make(chan int)}
		checkSameAsMarshal(t, d)
	})
	t.Run("random", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(12, 28))
		alphabet := []string{"a", "Z", "0", "-", "{", "}", ":", "*", "<", ">", "&", "\"", "\\", "\x00", "\x1f", "\x7f", "\n", "é", "✓", "🚀", "\u2028", "\xff", "\xc3", "\xed\xa0\x80"}
		str := func() string {
			var sb strings.Builder
			for range rng.IntN(12) {
				sb.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			return sb.String()
		}
		for range 3000 {
			at := time.Unix(rng.Int64N(1<<35), rng.Int64N(1e9)).UTC()
			d := &TaskDetail{Task: Task{
				TaskID: str(), TenantID: str(), PlanID: str(), Status: task.Status(str()),
				Orphaned: rng.IntN(2) == 0, CancelRequested: rng.IntN(2) == 0, Attempt: rng.IntN(100) - 5,
				CurrentStageIndex: rng.IntN(20) - 1, CurrentStage: str(), TotalStages: rng.IntN(20),
				LastError: str(), Reason: str(), Owner: str(), Fence: rng.Int64() - rng.Int64(),
				Degraded: rng.IntN(2) == 0,
			}}
			if rng.IntN(2) == 0 {
				d.CreatedAt, d.FinishedAt = &at, &at
			}
			if rng.IntN(2) == 0 {
				d.Params = map[string]any{str(): str(), str(): float64(rng.IntN(1000)) / 8}
			}
			if rng.IntN(2) == 0 {
				d.HasCheckpoint = true
				d.Checkpoint = &CheckpointSummary{CompletedStages: []string{str()}, SavedAt: &at, Fence: rng.Int64()}
			}
			checkSameAsMarshal(t, d)
		}
	})
}

// TestTaskDetailJSONCoversEveryField fills every field of TaskDetail (and
// of the types it holds) by reflection: a field added to the view and not
// to the hand encoder fails here, whatever its type or omitempty.
func TestTaskDetailJSONCoversEveryField(t *testing.T) {
	at := time.Date(2026, 11, 28, 11, 30, 0, 5, time.UTC)
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			v.SetString("s-" + v.Type().Name())
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int, reflect.Int64, reflect.Int32:
			v.SetInt(7)
		case reflect.Float64:
			v.SetFloat(1.5)
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem())
		case reflect.Slice:
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
			fill(v.Index(0))
		case reflect.Map:
			m := reflect.MakeMap(v.Type())
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k)
			if e.Kind() == reflect.Interface {
				e.Set(reflect.ValueOf("v"))
			} else {
				fill(e)
			}
			m.SetMapIndex(k, e)
			v.Set(m)
		case reflect.Struct:
			if v.Type() == reflect.TypeFor[time.Time]() {
				v.Set(reflect.ValueOf(at))
				return
			}
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					fill(v.Field(i))
				}
			}
		default:
			t.Fatalf("fill: a field of kind %s: teach this test and the hand encoder about it", v.Kind())
		}
	}
	d := &TaskDetail{}
	fill(reflect.ValueOf(d).Elem())
	checkSameAsMarshal(t, d)
	checkSameAsMarshal(t, &TaskDetail{})
}

func TestTenantsStatusJSONEqualsMarshal(t *testing.T) {
	check := func(t *testing.T, s TenantsStatus) {
		t.Helper()
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := s.appendJSON(nil)
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("appendJSON (ok %v) differs from json.Marshal\n got: %s\nwant: %s", ok, got, want)
		}
	}
	t.Run("nil map", func(t *testing.T) { check(t, TenantsStatus{}) })
	t.Run("empty", func(t *testing.T) { check(t, TenantsStatus{Tasks: map[string]*TaskDetail{}}) })
	t.Run("mixed", func(t *testing.T) {
		tasks := map[string]*TaskDetail{"t-b": sampleDetail(), "t-a": nil, "T-c": {}}
		for _, s := range hostileStrings {
			d := sampleDetail()
			d.TenantID = s
			tasks[s] = d
			tasks[s+"-none"] = nil
		}
		check(t, TenantsStatus{Tasks: tasks})
	})
	t.Run("fallback", func(t *testing.T) {
		d := sampleDetail()
		far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
		d.CreatedAt = &far
		if _, ok := (TenantsStatus{Tasks: map[string]*TaskDetail{"a": sampleDetail(), "b": d}}).appendJSON(nil); ok {
			t.Fatal("a task json.Marshal refuses did not make the bulk answer fall back")
		}
	})
}

// TestMarshal: the body writeJSON and writeCacheable send, by hand or not,
// is json.Marshal's with a newline; a value json.Marshal refuses is an
// error either way.
func TestMarshal(t *testing.T) {
	for _, v := range []any{sampleDetail(), TenantsStatus{Tasks: map[string]*TaskDetail{"a": sampleDetail(), "b": nil}}, map[string]int{"x": 1}} {
		want, _ := json.Marshal(v)
		for range 3 { // the second and third use a pooled buffer
			body, err := marshal(v)
			if err != nil || !bytes.Equal(body.b, append(want, '\n')) {
				t.Fatalf("marshal(%T) = %s, %v; want %s", v, body.b, err, want)
			}
			body.release()
		}
	}
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	d := sampleDetail()
	d.CreatedAt = &far
	if _, err := marshal(d); err == nil {
		t.Fatal("marshal of a time json.Marshal refuses: no error")
	}
}

// checkSameAsMarshalOrFallback allows a fallback (ok false) for times
// MarshalJSON encodes but the encoder leaves to it (zone offsets in seconds).
func checkSameAsMarshalOrFallback(t *testing.T, d *TaskDetail) {
	t.Helper()
	want, wantErr := json.Marshal(d)
	got, ok := d.appendJSON(nil)
	switch {
	case wantErr != nil && ok:
		t.Fatalf("json.Marshal refuses (%v) but appendJSON answered %s", wantErr, got)
	case wantErr == nil && ok && !bytes.Equal(got, want):
		t.Fatalf("appendJSON differs from json.Marshal\n got: %s\nwant: %s", got, want)
	case wantErr == nil && !ok && d.CreatedAt.Location() == time.UTC:
		t.Fatalf("appendJSON fell back for a UTC time json.Marshal encodes: %s", want)
	}
}

func FuzzTaskDetailJSON(f *testing.F) {
	for _, s := range hostileStrings {
		f.Add(s, int64(0))
	}
	f.Fuzz(func(t *testing.T, s string, n int64) {
		d := sampleDetail()
		d.TenantID, d.LastError, d.Fence = s, s, n
		d.Params = map[string]any{s: n}
		checkSameAsMarshal(t, d)
	})
}

// BenchmarkTaskDetailJSON: the tenant query's answer encoded by
// encoding/json and by hand, side by side.
func BenchmarkTaskDetailJSON(b *testing.B) {
	d := sampleDetail()
	d.Params = map[string]any{"version": "1.2.3"}
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(d); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 2048)
		for b.Loop() {
			var ok bool
			if buf, ok = d.appendJSON(buf[:0]); !ok {
				b.Fatal("fell back")
			}
		}
	})
}

// BenchmarkTenantsStatusJSON: the answer of POST /v1/tenants:status for
// 1 000 tenants (MaxStatusTenants), encoding/json and by hand.
func BenchmarkTenantsStatusJSON(b *testing.B) {
	s := TenantsStatus{Tasks: make(map[string]*TaskDetail, 1000)}
	for i := range 1000 {
		d := sampleDetail()
		d.TenantID = "tenant-" + strconv.Itoa(i)
		d.Params = map[string]any{"version": "1.2.3"}
		s.Tasks[d.TenantID] = d
	}
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			var ok bool
			if buf, ok = s.appendJSON(buf[:0]); !ok {
				b.Fatal("fell back")
			}
		}
	})
}
