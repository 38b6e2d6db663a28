package checkpoint_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
)

var (
	stages = []string{"build", "migrate", "deploy", "verify"}
	at     = time.Date(2025, 5, 1, 9, 30, 0, 123456789, time.FixedZone("UTC-5", -5*3600))
)

// progress returns a checkpoint with build done, migrate skipped (operator
// outputs) and deploy done.
func progress(t *testing.T) checkpoint.Checkpoint {
	t.Helper()
	c, err := checkpoint.Empty().Complete(0, "build", map[string]any{"image": "app:1.2"})
	if err != nil {
		t.Fatal(err)
	}
	if c, err = c.Skip(1, "migrate", map[string]any{"version": "42"}); err != nil {
		t.Fatal(err)
	}
	if c, err = c.Complete(2, "deploy", map[string]any{"url": "https://acme.example"}); err != nil {
		t.Fatal(err)
	}
	return c.Stamp(at, 2, 17)
}

// snapshot is an independent deep copy used to detect changes to a value's
// maps and slices.
func snapshot(t *testing.T, c checkpoint.Checkpoint) string {
	t.Helper()
	b, err := json.Marshal(struct {
		checkpoint.Checkpoint
		Lens [2]int
	}{c, [2]int{len(c.CompletedStages), len(c.SkippedStages)}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEmpty(t *testing.T) {
	t.Parallel()
	c := checkpoint.Empty()
	if !c.IsEmpty() || c.LastCompletedStageIndex != checkpoint.None || c.NextStageIndex() != 0 {
		t.Errorf("Empty() = %+v: IsEmpty %v, next %d", c, c.IsEmpty(), c.NextStageIndex())
	}
	if c.CompletedStages == nil || len(c.CompletedStages) != 0 || c.ContextData == nil || len(c.ContextData) != 0 {
		t.Errorf("Empty() = %#v, want empty non-nil stages and context data", c)
	}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"lastCompletedStageIndex":-1,"completedStages":[],"contextData":{},"savedAt":"0001-01-01T00:00:00Z","attempt":0,"fence":0}`; string(b) != want {
		t.Errorf("Empty().Marshal() = %s, want %s", b, want)
	}
}

func TestAdvance(t *testing.T) {
	t.Parallel()
	c := progress(t)
	want := checkpoint.Checkpoint{
		LastCompletedStageIndex: 2,
		CompletedStages:         []string{"build", "migrate", "deploy"},
		SkippedStages:           []string{"migrate"},
		ContextData: map[string]any{
			"build":   map[string]any{"image": "app:1.2"},
			"migrate": map[string]any{"version": "42"},
			"deploy":  map[string]any{"url": "https://acme.example"},
		},
		SavedAt: at.UTC(), Attempt: 2, Fence: 17,
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("after three stages:\n got %#v\nwant %#v", c, want)
	}
	if c.IsEmpty() || c.NextStageIndex() != 3 {
		t.Errorf("IsEmpty %v, NextStageIndex %d; want false, 3", c.IsEmpty(), c.NextStageIndex())
	}

	t.Run("OK/NilOutputsRecordNothing", func(t *testing.T) {
		t.Parallel()
		n, err := progress(t).Complete(3, "verify", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := n.ContextData["verify"]; ok {
			t.Errorf("ContextData has an entry for a stage without outputs: %v", n.ContextData)
		}
		if n.LastCompletedStageIndex != 3 || n.CompletedStages[3] != "verify" {
			t.Errorf("got %+v", n)
		}
		s, err := progress(t).Skip(3, "verify", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := s.ContextData["verify"]; ok || !reflect.DeepEqual(s.SkippedStages, []string{"migrate", "verify"}) {
			t.Errorf("Skip without outputs: %+v", s)
		}
	})

	outOfOrder := []struct {
		name  string
		base  func(*testing.T) checkpoint.Checkpoint
		index int
	}{
		{"Err/EmptySkipsAhead", func(*testing.T) checkpoint.Checkpoint { return checkpoint.Empty() }, 1},
		{"Err/EmptyNegative", func(*testing.T) checkpoint.Checkpoint { return checkpoint.Empty() }, -1},
		{"Err/Repeat", progress, 2},
		{"Err/Backwards", progress, 0},
		{"Err/Gap", progress, 4},
	}
	for _, tt := range outOfOrder {
		for _, skip := range []bool{false, true} {
			name := tt.name + "/Complete"
			if skip {
				name = tt.name + "/Skip"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				base := tt.base(t)
				before := snapshot(t, base)
				var (
					got checkpoint.Checkpoint
					err error
				)
				if skip {
					got, err = base.Skip(tt.index, "x", map[string]any{"a": 1})
				} else {
					got, err = base.Complete(tt.index, "x", map[string]any{"a": 1})
				}
				if err == nil {
					t.Fatalf("stage %d accepted after last %d", tt.index, base.LastCompletedStageIndex)
				}
				if !strings.Contains(err.Error(), "out of order") {
					t.Errorf("error %q does not say out of order", err)
				}
				if snapshot(t, got) != before || snapshot(t, base) != before {
					t.Errorf("refused advance changed the checkpoint")
				}
			})
		}
	}
}

func TestImmutability(t *testing.T) {
	t.Parallel()
	ops := []struct {
		name string
		do   func(checkpoint.Checkpoint) (checkpoint.Checkpoint, error)
	}{
		{"Complete", func(c checkpoint.Checkpoint) (checkpoint.Checkpoint, error) {
			return c.Complete(3, "verify", map[string]any{"ok": true})
		}},
		{"Skip", func(c checkpoint.Checkpoint) (checkpoint.Checkpoint, error) {
			return c.Skip(3, "verify", map[string]any{"ok": true})
		}},
		{"TruncateBefore0", func(c checkpoint.Checkpoint) (checkpoint.Checkpoint, error) { return c.TruncateBefore(0, stages) }},
		{"TruncateBefore1", func(c checkpoint.Checkpoint) (checkpoint.Checkpoint, error) { return c.TruncateBefore(1, stages) }},
		{"TruncateBefore3", func(c checkpoint.Checkpoint) (checkpoint.Checkpoint, error) { return c.TruncateBefore(3, stages) }},
		{"Clone", func(c checkpoint.Checkpoint) (checkpoint.Checkpoint, error) { return c.Clone(), nil }},
	}
	for _, o := range ops {
		t.Run("Untouched/"+o.name, func(t *testing.T) {
			t.Parallel()
			c := progress(t)
			before := snapshot(t, c)
			n, err := o.do(c)
			if err != nil {
				t.Fatal(err)
			}
			if snapshot(t, c) != before {
				t.Fatalf("%s changed its receiver", o.name)
			}
			// Whatever is done to the result must not reach the receiver.
			n.ContextData["intruder"] = 1
			delete(n.ContextData, "build")
			for i := range n.CompletedStages {
				n.CompletedStages[i] = "changed"
			}
			for i := range n.SkippedStages {
				n.SkippedStages[i] = "changed"
			}
			n.CompletedStages = append(n.CompletedStages, "appended")
			n.SkippedStages = append(n.SkippedStages, "appended")
			if snapshot(t, c) != before {
				t.Errorf("changing the result of %s changed its receiver", o.name)
			}
			// Two results of the same receiver are independent of each other.
			a, _ := c.Complete(3, "a", nil)
			b, _ := c.Skip(3, "b", nil)
			if a.CompletedStages[3] != "a" || b.CompletedStages[3] != "b" || len(a.SkippedStages) != 1 {
				t.Errorf("sibling results share storage: %v / %v", a.CompletedStages, b.CompletedStages)
			}
		})
	}
	t.Run("Untouched/SiblingsAfterTruncate", func(t *testing.T) {
		t.Parallel()
		tr, err := progress(t).TruncateBefore(1, stages)
		if err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, tr)
		x, _ := tr.Complete(1, "x", nil)
		y, _ := tr.Skip(1, "y", nil)
		if x.CompletedStages[1] != "x" || y.CompletedStages[1] != "y" || snapshot(t, tr) != before {
			t.Errorf("results of a truncated checkpoint share storage: %v / %v / %v", x.CompletedStages, y.CompletedStages, tr.CompletedStages)
		}
	})
	t.Run("Untouched/Stamp", func(t *testing.T) {
		t.Parallel()
		c := progress(t)
		before := snapshot(t, c)
		s := c.Stamp(at.Add(time.Hour), 5, 99)
		if snapshot(t, c) != before {
			t.Error("Stamp changed its receiver")
		}
		if !s.SavedAt.Equal(at.Add(time.Hour)) || s.SavedAt.Location() != time.UTC || s.Attempt != 5 || s.Fence != 99 {
			t.Errorf("Stamp = saved %v attempt %d fence %d", s.SavedAt, s.Attempt, s.Fence)
		}
		if !reflect.DeepEqual(s.CompletedStages, c.CompletedStages) || !reflect.DeepEqual(s.ContextData, c.ContextData) {
			t.Error("Stamp changed the progress")
		}
	})
}

func TestTruncateBefore(t *testing.T) {
	t.Parallel()
	build := map[string]any{"image": "app:1.2"}
	migrate := map[string]any{"version": "42"}
	deploy := map[string]any{"url": "https://acme.example"}
	tests := []struct {
		name      string
		index     int
		last      int
		completed []string
		skipped   []string
		data      map[string]any
	}{
		{"OK/FromStart", 0, -1, []string{}, []string{}, map[string]any{}},
		{"OK/BeforeSkippedStage", 1, 0, []string{"build"}, []string{}, map[string]any{"build": build}},
		{"OK/AfterSkippedStage", 2, 1, []string{"build", "migrate"}, []string{"migrate"}, map[string]any{"build": build, "migrate": migrate}},
		{"OK/NextStageKeepsAll", 3, 2, []string{"build", "migrate", "deploy"}, []string{"migrate"},
			map[string]any{"build": build, "migrate": migrate, "deploy": deploy}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := progress(t)
			got, err := c.TruncateBefore(tt.index, stages)
			if err != nil {
				t.Fatal(err)
			}
			if got.LastCompletedStageIndex != tt.last || got.NextStageIndex() != tt.index {
				t.Errorf("last = %d, next = %d; want %d, %d", got.LastCompletedStageIndex, got.NextStageIndex(), tt.last, tt.index)
			}
			if !reflect.DeepEqual(got.CompletedStages, tt.completed) {
				t.Errorf("CompletedStages = %#v, want %#v", got.CompletedStages, tt.completed)
			}
			if len(got.SkippedStages) != len(tt.skipped) || (len(tt.skipped) > 0 && !reflect.DeepEqual(got.SkippedStages, tt.skipped)) {
				t.Errorf("SkippedStages = %#v, want %#v", got.SkippedStages, tt.skipped)
			}
			if !reflect.DeepEqual(got.ContextData, tt.data) {
				t.Errorf("ContextData = %#v, want %#v", got.ContextData, tt.data)
			}
			if got.IsEmpty() != (tt.index == 0) {
				t.Errorf("IsEmpty = %v", got.IsEmpty())
			}
			// The result is a consistent checkpoint: it survives a round trip
			// and goes on from the truncation point.
			b, err := got.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := checkpoint.Unmarshal(b); err != nil {
				t.Errorf("truncated checkpoint does not decode: %v (%s)", err, b)
			}
			if _, err := got.Complete(tt.index, stages[tt.index], nil); err != nil {
				t.Errorf("cannot continue after truncation: %v", err)
			}
		})
	}
	for _, idx := range []int{-1, 4, 5, 100} {
		t.Run(fmt.Sprintf("Err/NotCovered/%d", idx), func(t *testing.T) {
			t.Parallel()
			c := progress(t)
			before := snapshot(t, c)
			got, err := c.TruncateBefore(idx, stages)
			if err == nil {
				t.Fatalf("TruncateBefore(%d) accepted on a checkpoint up to stage 2", idx)
			}
			if !strings.Contains(err.Error(), "not covered") {
				t.Errorf("error %q does not say not covered", err)
			}
			if snapshot(t, got) != before || snapshot(t, c) != before {
				t.Error("refused truncation changed the checkpoint")
			}
		})
	}
	t.Run("OK/EmptyFromStart", func(t *testing.T) {
		t.Parallel()
		got, err := checkpoint.Empty().TruncateBefore(0, stages)
		if err != nil || !got.IsEmpty() || len(got.CompletedStages) != 0 || len(got.ContextData) != 0 {
			t.Errorf("TruncateBefore(0) of Empty = %+v, %v", got, err)
		}
	})
}

func TestMarshalRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		c    checkpoint.Checkpoint
	}{
		{"Empty", checkpoint.Empty()},
		{"EmptyStamped", checkpoint.Empty().Stamp(at, 1, 3)},
		{"Progress", func() checkpoint.Checkpoint {
			c, _ := checkpoint.Empty().Complete(0, "build", map[string]any{
				"image": "app:1.2", "n": 3.5, "ok": true, "none": nil,
				"list": []any{"a", 1.0}, "nested": map[string]any{"k": "v\n\"x\""},
			})
			c, _ = c.Skip(1, "migrate", nil)
			return c.Stamp(at, 4, 1<<40)
		}()},
	}
	for _, tt := range tests {
		t.Run("OK/"+tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := tt.c.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			got, err := checkpoint.Unmarshal(b)
			if err != nil {
				t.Fatalf("Unmarshal(%s): %v", b, err)
			}
			if !reflect.DeepEqual(got, tt.c) {
				t.Errorf("round trip:\n got %#v\nwant %#v", got, tt.c)
			}
		})
	}
	t.Run("OK/NilMapsWrittenEmpty", func(t *testing.T) {
		t.Parallel()
		b, err := checkpoint.Checkpoint{LastCompletedStageIndex: checkpoint.None}.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"completedStages":[]`) || !strings.Contains(string(b), `"contextData":{}`) {
			t.Errorf("Marshal = %s, want [] and {} rather than null", b)
		}
	})
}

func TestUnmarshal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		wantErr bool
		want    checkpoint.Checkpoint
	}{
		{name: "OK/EmptyObject", in: `{}`,
			want: checkpoint.Checkpoint{LastCompletedStageIndex: checkpoint.None, ContextData: map[string]any{}}},
		{name: "OK/NullContextData", in: `{"lastCompletedStageIndex":0,"completedStages":["a"],"contextData":null}`,
			want: checkpoint.Checkpoint{LastCompletedStageIndex: 0, CompletedStages: []string{"a"}, ContextData: map[string]any{}}},
		{name: "OK/UnknownFieldIgnored", in: `{"lastCompletedStageIndex":-1,"completedStages":[],"contextData":{},"future":1}`,
			want: checkpoint.Checkpoint{LastCompletedStageIndex: checkpoint.None, CompletedStages: []string{}, ContextData: map[string]any{}}},
		{name: "Err/Garbage", in: `not json`, wantErr: true},
		{name: "Err/Truncated", in: `{"lastCompletedStageIndex":1,`, wantErr: true},
		{name: "Err/Array", in: `[]`, wantErr: true},
		{name: "Err/String", in: `"checkpoint"`, wantErr: true},
		{name: "Err/Empty", in: ``, wantErr: true},
		{name: "Err/IndexWrongType", in: `{"lastCompletedStageIndex":"1","completedStages":["a","b"]}`, wantErr: true},
		{name: "Err/StagesWrongType", in: `{"lastCompletedStageIndex":0,"completedStages":"a"}`, wantErr: true},
		{name: "Err/ContextDataArray", in: `{"lastCompletedStageIndex":-1,"completedStages":[],"contextData":[]}`, wantErr: true},
		{name: "Err/TooFewStages", in: `{"lastCompletedStageIndex":2,"completedStages":["a","b"],"contextData":{}}`, wantErr: true},
		{name: "Err/TooManyStages", in: `{"lastCompletedStageIndex":0,"completedStages":["a","b"],"contextData":{}}`, wantErr: true},
		{name: "Err/StagesWithoutIndex", in: `{"completedStages":["a"]}`, wantErr: true},
		{name: "Err/IndexWithoutStages", in: `{"lastCompletedStageIndex":0}`, wantErr: true},
		{name: "Err/IndexBelowNone", in: `{"lastCompletedStageIndex":-2,"completedStages":[]}`, wantErr: true},
		{name: "Err/IndexVeryNegative", in: `{"lastCompletedStageIndex":-9223372036854775808,"completedStages":[]}`, wantErr: true},
		{name: "Err/SavedAtBad", in: `{"lastCompletedStageIndex":-1,"completedStages":[],"savedAt":"yesterday"}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := checkpoint.Unmarshal([]byte(tt.in))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Unmarshal(%s) = %+v, want an error", tt.in, got)
				}
				if !strings.HasPrefix(err.Error(), "checkpoint: decode") {
					t.Errorf("error %q lacks the package context", err)
				}
				if !reflect.DeepEqual(got, checkpoint.Checkpoint{}) {
					t.Errorf("Unmarshal returned %+v with its error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Unmarshal(%s): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Unmarshal(%s):\n got %#v\nwant %#v", tt.in, got, tt.want)
			}
			// A decoded checkpoint can always go on.
			if _, err := got.Complete(got.NextStageIndex(), "next", nil); err != nil {
				t.Errorf("cannot advance a decoded checkpoint: %v", err)
			}
		})
	}
}
