package repository

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/internal/jsonenc"
	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// randString returns a string of random runes, with the characters JSON
// escapes and invalid UTF-8 among them.
func randString(r *rand.Rand) string {
	pieces := []string{"a", "Z", "0", " ", "-", `"`, `\`, "<", ">", "&", "\n", "\x00", "\x1f", "é", "µ", "\u2028", "\xff", "{", "}", "日本"}
	var b strings.Builder
	for range r.IntN(6) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

func randTime(r *rand.Rand) time.Time {
	zones := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+1800), time.FixedZone("y", -7*3600), time.Local}
	switch r.IntN(8) {
	case 0:
		return time.Time{}
	case 1:
		return time.Date(10000+r.IntN(5), 1, 1, 0, 0, 0, 0, time.UTC) // out of JSON's range
	case 2:
		return time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("z", 25*3600))
	}
	return time.Unix(r.Int64N(4e9), r.Int64N(1e9)).In(zones[r.IntN(len(zones))])
}

func randValue(r *rand.Rand, depth int) any {
	switch n := r.IntN(9); {
	case n == 0:
		return nil
	case n == 1:
		return r.IntN(2) == 0
	case n == 2:
		return r.NormFloat64() * 1e6
	case n == 3:
		return randString(r)
	case n == 4 && depth < 3:
		m := map[string]any{}
		for range r.IntN(4) {
			m[randString(r)] = randValue(r, depth+1)
		}
		return m
	case n == 5 && depth < 3:
		s := make([]any, r.IntN(4))
		for i := range s {
			s[i] = randValue(r, depth+1)
		}
		return s
	case n == 6:
		switch r.IntN(4) {
		case 0:
			return r.IntN(1000)
		case 1:
			return int64(r.Int64N(1 << 62))
		case 2:
			return []string{randString(r), randString(r)}
		}
		return math.Ldexp(r.Float64(), r.IntN(160)-80) * float64(1-2*r.IntN(2))
	case n == 7 && r.IntN(10) == 0:
		return math.Inf(1)
	}
	return "x"
}

func TestEncodersMatchEncodingJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 11))
	for i := range 4000 {
		ev := task.Event{At: randTime(r), Type: task.EventType(randString(r)), Stage: randString(r)}
		if r.IntN(2) == 0 {
			idx := r.IntN(3)
			ev.StageIndex = &idx
		}
		ev.Attempt, ev.StageAttempt = r.IntN(3), r.IntN(3)-1
		ev.Delay, ev.Duration = task.Duration(r.Int64N(3)*int64(time.Millisecond)+r.Int64N(2)*1500), task.Duration(r.Int64N(2)*int64(time.Hour))
		ev.Reason, ev.Actor, ev.Role, ev.RequestID, ev.Instance = randString(r), randString(r), randString(r), randString(r), randString(r)
		ev.Fence = r.Int64N(3) - 1
		if r.IntN(3) == 0 {
			ev.Data, _ = randValue(r, 2).(map[string]any)
			if ev.Data == nil && r.IntN(2) == 0 {
				ev.Data = map[string]any{"k": randValue(r, 1)}
			}
		}
		want, wantErr := json.Marshal(ev)
		got, gotErr := appendEvent(nil, ev)
		if (wantErr != nil) != (gotErr != nil) || (wantErr == nil && string(got) != string(want)) {
			t.Fatalf("event %d %+v:\n got %s (%v)\nwant %s (%v)", i, ev, got, gotErr, want, wantErr)
		}

		ck := checkpoint.Checkpoint{LastCompletedStageIndex: r.IntN(4) - 1, SavedAt: randTime(r), Attempt: r.IntN(3), Fence: r.Int64N(5)}
		if r.IntN(4) > 0 {
			for range r.IntN(3) {
				ck.CompletedStages = append(ck.CompletedStages, randString(r))
			}
		}
		if r.IntN(3) == 0 {
			ck.SkippedStages = []string{randString(r)}
		}
		if r.IntN(3) > 0 {
			ck.ContextData, _ = randValue(r, 2).(map[string]any)
			if r.IntN(2) == 0 {
				ck.ContextData = map[string]any{randString(r): randValue(r, 1)}
			}
		}
		wantC, wantErr := ck.Marshal()
		gotC, gotErr := marshalCheckpoint(&ck)
		if (wantErr != nil) != (gotErr != nil) || (wantErr == nil && gotC != string(wantC)) {
			t.Fatalf("checkpoint %d %+v:\n got %s (%v)\nwant %s (%v)", i, ck, gotC, gotErr, wantC, wantErr)
		}
		if gotErr == nil {
			b := []byte(gotC)
			if r.IntN(2) == 0 {
				b[r.IntN(len(b))] = "{}[],:\"0-9 aZ\\\x00é"[r.IntN(16)]
			}
			if r.IntN(4) == 0 {
				b = b[:r.IntN(len(b)+1)]
			}
			want, wantErr := checkpoint.Unmarshal(b)
			got, gotErr := unmarshalCheckpoint(b)
			if (wantErr != nil) != (gotErr != nil) || (wantErr == nil && !reflect.DeepEqual(got, want)) {
				t.Fatalf("reading checkpoint %s:\n got %#v (%v)\nwant %#v (%v)", b, got, gotErr, want, wantErr)
			}
		}

		v := randValue(r, 0)
		wantV, wantErr := json.Marshal(v)
		gotV, gotErr := jsonenc.Value(nil, v)
		if (wantErr != nil) != (gotErr != nil) || (wantErr == nil && string(gotV) != string(wantV)) {
			t.Fatalf("value %#v:\n got %s (%v)\nwant %s (%v)", v, gotV, gotErr, wantV, wantErr)
		}
		if err := checkJSON(v); (err != nil) != (func() bool { _, err := json.Marshal(v); return err != nil }()) {
			t.Fatalf("checkJSON(%#v) = %v", v, err)
		}
		if json.Valid(must(json.Marshal(v))) {
			c, ok := copyJSON(v, 0)
			n, err := normalize(v)
			if ok && (err != nil || !reflect.DeepEqual(c, n)) {
				t.Fatalf("copyJSON(%#v) = %#v, a JSON round trip gives %#v (%v)", v, c, n, err)
			}
		}
	}
}

func must(b []byte, _ error) []byte { return b }

func TestValidFeedTypeMatchesItsRegexp(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 9))
	alpha := []byte("az09_.-A{ \x00\xff")
	for range 10000 {
		b := make([]byte, r.IntN(70))
		for i := range b {
			b[i] = alpha[r.IntN(len(alpha))]
		}
		if s := string(b); validFeedType(s) != feedTypeRe.MatchString(s) {
			t.Fatalf("validFeedType(%q) = %v", s, validFeedType(s))
		}
	}
}

// TestCopyParamsIsDeep: the memory store's copy of params shares nothing
// with the caller's.
func TestCopyParamsIsDeep(t *testing.T) {
	t.Parallel()
	in := map[string]any{"a": map[string]any{"b": []any{"c", 1.5}}, "n": 3, "nil": map[string]any(nil)}
	out, err := copyParams(in)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := normalize(in)
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("copyParams = %#v, want %#v", out, want)
	}
	in["a"].(map[string]any)["b"].([]any)[0] = "changed"
	if out["a"].(map[string]any)["b"].([]any)[0] != "c" {
		t.Fatal("the copy shares a slice with the original")
	}
	if p, err := copyParams(nil); p != nil || err != nil {
		t.Fatalf("copyParams(nil) = %v, %v", p, err)
	}
}

// TestIDValidatorsMatchTheirRegexps checks the hand-written validators of
// task and plan ids against the regular expressions they replace.
func TestIDValidatorsMatchTheirRegexps(t *testing.T) {
	t.Parallel()
	name := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	taskRe := regexp.MustCompile(`^task-[0-9A-HJKMNP-TV-Z]{26}$`)
	planRe := regexp.MustCompile(`^plan-[0-9A-HJKMNP-TV-Z]{26}$`)
	alpha := []byte("taskpln-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabz._{}: \\n\x00\xff")
	r := rand.New(rand.NewPCG(3, 5))
	check := func(s string) {
		if task.ValidTenantID(s) != name.MatchString(s) || task.ValidInstanceID(s) != name.MatchString(s) ||
			task.ValidID(s) != taskRe.MatchString(s) || plan.ValidID(s) != planRe.MatchString(s) {
			t.Fatalf("%q: tenant %v, task %v, plan %v disagree with the regexps", s, task.ValidTenantID(s), task.ValidID(s), plan.ValidID(s))
		}
	}
	for range 15000 {
		b := make([]byte, r.IntN(135))
		for j := range b {
			b[j] = alpha[r.IntN(len(alpha))]
		}
		check(string(b))
		id := []byte(task.NewID(t0))
		if r.IntN(2) == 0 {
			copy(id, "plan-")
		}
		id[r.IntN(len(id))] = byte(r.IntN(256))
		check(string(id))
		check(string(id[:len(id)-1]))
		check(string(id) + "\n")
	}
	for c := range 256 {
		check(string([]byte{byte(c)}))
		check("a" + string([]byte{byte(c)}))
		check(strings.Repeat("a", 127) + string([]byte{byte(c)}))
	}
}

// TestCheckpointPlainForm: the checkpoints of stages without outputs are
// read without encoding/json, into exactly what checkpoint.Unmarshal gives.
func TestCheckpointPlainForm(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 1, 2, 3, 456789000, time.UTC)
	tests := []struct {
		name  string
		ck    checkpoint.Checkpoint
		plain bool
	}{
		{"Empty", checkpoint.Empty(), true},
		{"TwoStages", func() checkpoint.Checkpoint {
			c, _ := checkpoint.Empty().Complete(0, "push-config", nil)
			c, _ = c.Skip(1, "migrate", nil)
			return c.Stamp(at, 2, 77)
		}(), true},
		{"ContextData", func() checkpoint.Checkpoint {
			c, _ := checkpoint.Empty().Complete(0, "push-config", map[string]any{"v": 1.0})
			return c.Stamp(at, 1, 1)
		}(), false},
		{"OneStage", func() checkpoint.Checkpoint {
			c, _ := checkpoint.Empty().Complete(0, "s", nil)
			return c.Stamp(at, 1, 1)
		}(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := marshalCheckpoint(&tt.ck)
			if err != nil {
				t.Fatal(err)
			}
			_, plain := parseCheckpoint([]byte(s))
			want, _ := checkpoint.Unmarshal([]byte(s))
			got, err := unmarshalCheckpoint([]byte(s))
			if plain != tt.plain || err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: plain %v, read %#v (%v), want %#v", s, plain, got, err, want)
			}
		})
	}
	// Not what marshalCheckpoint writes: read by checkpoint.Unmarshal.
	for _, s := range []string{
		`{"lastCompletedStageIndex":0,"completedStages":["a"],"contextData":{},"savedAt":"2026-11-22T01:02:03+01:00","attempt":1,"fence":1}`,
		`{"lastCompletedStageIndex":01,"completedStages":["a"],"contextData":{},"savedAt":"2026-11-22T01:02:03Z","attempt":1,"fence":1}`,
		`{"lastCompletedStageIndex":1,"completedStages":["a"],"contextData":{},"savedAt":"2026-11-22T01:02:03Z","attempt":1,"fence":1}`,
		`{"lastCompletedStageIndex":0, "completedStages":["a"],"contextData":{},"savedAt":"2026-11-22T01:02:03Z","attempt":1,"fence":1}`,
		`{"lastCompletedStageIndex":0,"completedStages":["a\u0041"],"contextData":{},"savedAt":"2026-11-22T01:02:03Z","attempt":1,"fence":1}`,
	} {
		if _, plain := parseCheckpoint([]byte(s)); plain {
			t.Errorf("%s read as the plain form", s)
		}
		want, wantErr := checkpoint.Unmarshal([]byte(s))
		got, gotErr := unmarshalCheckpoint([]byte(s))
		if (wantErr != nil) != (gotErr != nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %#v (%v), want %#v (%v)", s, got, gotErr, want, wantErr)
		}
	}
}

// TestHandWrittenCodeKnowsEveryField: appendEvent, marshalCheckpoint, the
// task record's fields (mutableFields, fixedOf) and sameShape name the
// fields of task.Event, checkpoint.Checkpoint and task.Task one by one. A
// field added to one of them would be silently left out of Redis (or, for
// sameShape, replaced by the template's value): this test fails first, so
// that the code above and this list are updated together.
func TestHandWrittenCodeKnowsEveryField(t *testing.T) {
	t.Parallel()
	known := map[reflect.Type][]string{
		reflect.TypeFor[task.Event](): {"At", "Type", "Stage", "StageIndex", "Attempt", "StageAttempt", "Delay", "Duration",
			"Reason", "Actor", "Role", "RequestID", "Instance", "Fence", "Data"},
		reflect.TypeFor[checkpoint.Checkpoint](): {"LastCompletedStageIndex", "CompletedStages", "SkippedStages", "ContextData",
			"SavedAt", "Attempt", "Fence"},
		reflect.TypeFor[task.Task](): {"ID", "TenantID", "PlanID", "Status", "Params", "PauseRequested", "CancelRequested",
			"Attempt", "StageIndex", "StageName", "TotalStages", "StageStartedAt", "LastError", "Reason", "Owner", "HeartbeatAt", "Fence", "Seq",
			"CreatedAt", "StartedAt", "FinishedAt", "UpdatedAt"},
	}
	for ty, want := range known {
		var got []string
		for i := range ty.NumField() {
			got = append(got, ty.Field(i).Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s has fields %v; the hand-written encoders know %v", ty, got, want)
		}
	}
}
