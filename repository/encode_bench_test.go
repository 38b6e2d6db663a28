package repository

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/internal/jsonenc"
	"github.com/deploycoord/deploycoord/task"
)

// The hand-written encoders of encode.go against encoding/json on the
// values a task write carries (the issue asks that they stay only where a
// benchmark shows they pay): go test ./repository/ -run XXX -bench Codec
// -benchmem. Each pair encodes (or decodes) the same value to the same
// bytes (TestHandWrittenCodeKnowsEveryField and the encode tests check it).

func benchEvent() task.Event {
	i := 4
	return task.Event{At: time.Date(2026, 11, 27, 14, 0, 0, 123456789, time.UTC), Type: task.EventStageSucceeded,
		Stage: "push-config", StageIndex: &i, Attempt: 1, StageAttempt: 1, Duration: task.Duration(1500 * time.Millisecond),
		Instance: "coord-a", Fence: 1795787592168}
}

func benchCheckpoint(withData bool) checkpoint.Checkpoint {
	c := checkpoint.Empty()
	for i, name := range []string{"drain", "push-config", "restart", "verify", "undrain"} {
		var out map[string]any
		if withData {
			out = map[string]any{"revision": "r-42", "replicas": 3}
		}
		c, _ = c.Complete(i, name, out)
	}
	return c.Stamp(time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC), 1, 1795787592168)
}

func BenchmarkCodecEvent(b *testing.B) {
	// A stage transition's two events, as a write encodes them.
	started, done := benchEvent(), benchEvent()
	started.Type, started.Duration = task.EventStageStarted, 0
	evs := []task.Event{started, done}
	b.Run("hand-written", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := encodeEvents(evs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			out := make([]string, len(evs))
			for i := range evs {
				js, err := json.Marshal(evs[i])
				if err != nil {
					b.Fatal(err)
				}
				out[i] = string(js)
			}
		}
	})
}

func BenchmarkCodecCheckpointEncode(b *testing.B) {
	for _, data := range []bool{false, true} {
		c := benchCheckpoint(data)
		name := "plain"
		if data {
			name = "contextData"
		}
		b.Run(name+"/hand-written", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := marshalCheckpoint(&c); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := c.Marshal(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkCodecCheckpointDecode(b *testing.B) {
	for _, data := range []bool{false, true} {
		c := benchCheckpoint(data)
		js, err := marshalCheckpoint(&c)
		if err != nil {
			b.Fatal(err)
		}
		raw := []byte(js)
		name := "plain"
		if data {
			name = "contextData" // the hand-written reader hands these to encoding/json
		}
		b.Run(name+"/hand-written", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := unmarshalCheckpoint(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := checkpoint.Unmarshal(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkCodecParams(b *testing.B) {
	params := map[string]any{"version": "1.2.3", "image": "registry.example.com/team/service:1.2.3", "replicas": 3,
		"canary": true, "regions": []any{"eu-west-1", "us-east-1"}}
	b.Run("hand-written", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := jsonenc.Value(nil, params); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := json.Marshal(params); err != nil {
				b.Fatal(err)
			}
		}
	})
}
