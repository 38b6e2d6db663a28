package repository

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/internal/jsonenc"
	"github.com/deploycoord/deploycoord/task"
)

// Hand-written JSON encoders of the values every task write stores: the
// timeline events and the checkpoint, built on internal/jsonenc. They
// produce exactly the bytes encoding/json produces (tests compare them on
// many values) without its reflection; free-form values (event data,
// checkpoint context data) of other than the common JSON kinds go through
// encoding/json (jsonenc.Value). Each pays for
// itself in encode_bench_test.go (BenchmarkCodec*: 2–5× faster, fewer
// allocations; figures in docs/benchmarks.md, "Third round").

// appendEvent appends ev as json.Marshal(ev) writes it.
func appendEvent(b []byte, ev task.Event) ([]byte, error) {
	var err error
	b = append(b, `{"at":`...)
	if b, err = jsonenc.Time(b, ev.At); err != nil {
		return b, fmt.Errorf("timeline event %s: %w", ev.Type, err)
	}
	b = append(b, `,"type":`...)
	b = jsonenc.String(b, string(ev.Type))
	if ev.Stage != "" {
		b = jsonenc.String(append(b, `,"stage":`...), ev.Stage)
	}
	if ev.StageIndex != nil {
		b = strconv.AppendInt(append(b, `,"stageIndex":`...), int64(*ev.StageIndex), 10)
	}
	if ev.Attempt != 0 {
		b = strconv.AppendInt(append(b, `,"attempt":`...), int64(ev.Attempt), 10)
	}
	if ev.StageAttempt != 0 {
		b = strconv.AppendInt(append(b, `,"stageAttempt":`...), int64(ev.StageAttempt), 10)
	}
	if ev.Delay != 0 {
		b = jsonenc.String(append(b, `,"delay":`...), ev.Delay.D().String())
	}
	if ev.Duration != 0 {
		b = jsonenc.String(append(b, `,"duration":`...), ev.Duration.D().String())
	}
	for _, f := range [...]struct{ name, v string }{
		{`,"reason":`, ev.Reason}, {`,"actor":`, ev.Actor}, {`,"role":`, ev.Role},
		{`,"requestId":`, ev.RequestID}, {`,"instance":`, ev.Instance},
	} {
		if f.v != "" {
			b = jsonenc.String(append(b, f.name...), f.v)
		}
	}
	if ev.Fence != 0 {
		b = strconv.AppendInt(append(b, `,"fence":`...), ev.Fence, 10)
	}
	if len(ev.Data) > 0 {
		if b, err = jsonenc.Value(append(b, `,"data":`...), ev.Data); err != nil {
			return b, fmt.Errorf("timeline event %s: %w", ev.Type, err)
		}
	}
	return append(b, '}'), nil
}

// encodeEvents returns the JSON form of each event, as json.Marshal writes
// it; the strings share one allocation.
func encodeEvents(evs []task.Event) ([]string, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	b := make([]byte, 0, 160*len(evs))
	ends := make([]int, len(evs))
	for i, ev := range evs {
		var err error
		if b, err = appendEvent(b, ev); err != nil {
			return nil, err
		}
		ends[i] = len(b)
	}
	s := string(b)
	out := make([]string, len(evs))
	start := 0
	for i, end := range ends {
		out[i] = s[start:end]
		start = end
	}
	return out, nil
}

// marshalCheckpoint returns c's stored JSON form, as c.Marshal() writes it.
func marshalCheckpoint(c *checkpoint.Checkpoint) (string, error) {
	b := make([]byte, 0, 256)
	b = strconv.AppendInt(append(b, `{"lastCompletedStageIndex":`...), int64(c.LastCompletedStageIndex), 10)
	completed := c.CompletedStages
	if completed == nil {
		completed = []string{}
	}
	b = jsonenc.Strings(append(b, `,"completedStages":`...), completed)
	if len(c.SkippedStages) > 0 {
		b = jsonenc.Strings(append(b, `,"skippedStages":`...), c.SkippedStages)
	}
	b = append(b, `,"contextData":`...)
	if len(c.ContextData) == 0 {
		b = append(b, "{}"...)
	} else {
		var err error
		if b, err = jsonenc.Value(b, c.ContextData); err != nil {
			// The error encoding/json reports for the whole value.
			_, err = c.Marshal()
			return "", err
		}
	}
	b = append(b, `,"savedAt":`...)
	b, err := jsonenc.Time(b, c.SavedAt)
	if err != nil {
		_, err = c.Marshal()
		return "", err
	}
	b = strconv.AppendInt(append(b, `,"attempt":`...), int64(c.Attempt), 10)
	b = strconv.AppendInt(append(b, `,"fence":`...), c.Fence, 10)
	b = append(b, '}')
	return string(b), nil
}

// unmarshalCheckpoint returns checkpoint.Unmarshal(b). The form
// marshalCheckpoint writes with no context data (every checkpoint of stages
// without outputs) is read here without reflection; anything else —
// context data, an escaped or non-ASCII string, another key order or
// spacing — goes to checkpoint.Unmarshal.
func unmarshalCheckpoint(b []byte) (checkpoint.Checkpoint, error) {
	// A checkpoint with context data is not in the plain form: the reader
	// would read its stages for nothing (BenchmarkCodecCheckpointDecode:
	// 73 allocations instead of encoding/json's 64 without this check).
	if bytes.Contains(b, emptyContextData) {
		if c, ok := parseCheckpoint(b); ok {
			return c, nil
		}
	}
	return checkpoint.Unmarshal(b)
}

var emptyContextData = []byte(`,"contextData":{},`)

// parseCheckpoint reads the plain form of a checkpoint; false when b is in
// any other form (or invalid).
func parseCheckpoint(b []byte) (checkpoint.Checkpoint, bool) {
	p := plainParser{b: b}
	var c checkpoint.Checkpoint
	var ok bool
	if !p.lit(`{"lastCompletedStageIndex":`) {
		return c, false
	}
	if c.LastCompletedStageIndex, ok = p.int(); !ok || !p.lit(`,"completedStages":`) {
		return c, false
	}
	if c.CompletedStages, ok = p.strings(); !ok {
		return c, false
	}
	if p.lit(`,"skippedStages":`) {
		if c.SkippedStages, ok = p.strings(); !ok {
			return c, false
		}
	}
	if !p.lit(`,"contextData":{},"savedAt":"`) {
		return c, false
	}
	at, ok := p.str()
	if !ok || len(at) == 0 || at[len(at)-1] != 'Z' || c.SavedAt.UnmarshalText([]byte(at)) != nil || !p.lit(`,"attempt":`) {
		return c, false
	}
	if c.Attempt, ok = p.int(); !ok || !p.lit(`,"fence":`) {
		return c, false
	}
	fence, ok := p.int()
	if !ok || !p.lit("}") || p.i != len(b) {
		return c, false
	}
	c.Fence = int64(fence)
	c.ContextData = map[string]any{}
	if c.LastCompletedStageIndex < checkpoint.None || len(c.CompletedStages) != c.LastCompletedStageIndex+1 {
		return c, false // checkpoint.Unmarshal words the error
	}
	return c, true
}

// plainParser reads JSON of a fixed form: literals, plain integers and
// strings of printable ASCII without escapes.
type plainParser struct {
	b []byte
	i int
}

func (p *plainParser) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// int reads an integer as JSON writes it (no leading zeros, no sign but -).
func (p *plainParser) int() (int, bool) {
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	if n := p.i - digits; n == 0 || n > 18 || (n > 1 && p.b[digits] == '0') {
		return 0, false
	}
	v, err := strconv.Atoi(string(p.b[start:p.i]))
	return v, err == nil
}

// str reads the rest of a string whose opening quote was read.
func (p *plainParser) str() (string, bool) {
	start := p.i
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			s := string(p.b[start:p.i])
			p.i++
			return s, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return "", false
		}
	}
	return "", false
}

// strings reads an array of strings.
func (p *plainParser) strings() ([]string, bool) {
	if !p.lit("[") {
		return nil, false
	}
	out := []string{}
	if p.lit("]") {
		return out, true
	}
	for {
		if !p.lit(`"`) {
			return nil, false
		}
		s, ok := p.str()
		if !ok {
			return nil, false
		}
		out = append(out, s)
		if p.lit("]") {
			return out, true
		}
		if !p.lit(",") {
			return nil, false
		}
	}
}

// encodeWrite returns the checkpoint ("" keeps it, "-" deletes it, else
// its JSON) and the events of w in their stored (JSON) form.
func encodeWrite(w task.Write) (string, []string, error) {
	ckpt := ""
	switch {
	case w.DeleteCheckpoint:
		ckpt = "-"
	case w.Checkpoint != nil:
		b, err := marshalCheckpoint(w.Checkpoint)
		if err != nil {
			return "", nil, fmt.Errorf("%w: write task %s: checkpoint: %v", task.ErrInvalid, w.Task.ID, err)
		}
		ckpt = b
	}
	events, err := encodeEvents(w.Events)
	if err != nil {
		return "", nil, fmt.Errorf("%w: write task %s: %v", task.ErrInvalid, w.Task.ID, err)
	}
	return ckpt, events, nil
}

// encodeEvent returns ev's stored (JSON) form.
func encodeEvent(ev task.Event) (string, error) {
	b, err := appendEvent(nil, ev)
	return string(b), err
}

// decodeEvent returns the event of a stored (JSON) form, as it comes back
// from Redis.
func decodeEvent(s string) task.Event {
	var ev task.Event
	_ = json.Unmarshal([]byte(s), &ev)
	return ev
}
