package repository

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/deploycoord/deploycoord/checkpoint"
	"github.com/deploycoord/deploycoord/task"
)

// Hand-written JSON encoders of the values every task write stores: the
// timeline events and the checkpoint. They produce exactly the bytes
// encoding/json produces (tests compare them on many values) without its
// reflection; a string that needs escaping and every free-form value (event
// data, checkpoint context data) go through encoding/json. Each pays for
// itself in encode_bench_test.go (BenchmarkCodec*: 2–5× faster, fewer
// allocations; figures in docs/benchmarks.md, "Third round").

// appendJSONString appends s as encoding/json writes it: plain printable
// ASCII is copied, anything else is left to encoding/json (HTML escaping,
// invalid UTF-8, U+2028/U+2029).
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONTime appends t as time.Time.MarshalJSON writes it.
func appendJSONTime(b []byte, t time.Time) ([]byte, error) {
	out, err := t.AppendText(append(b, '"'))
	if err != nil {
		_, err = t.MarshalJSON() // its own wording of the same error
		return b, err
	}
	return append(out, '"'), nil
}

// appendJSONValue appends v as json.Marshal(v) writes it: values of the
// common JSON kinds are encoded here, anything else (and a value nested
// deeper than jsonDepthMax) by encoding/json.
func appendJSONValue(b []byte, v any) ([]byte, error) {
	return appendJSONAny(b, v, 0)
}

func appendJSONAny(b []byte, v any, depth int) ([]byte, error) {
	if depth > jsonDepthMax {
		return appendMarshal(b, v)
	}
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return appendJSONString(b, x), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return appendMarshal(b, v)
		}
		return appendJSONFloat(b, x), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case int32:
		return strconv.AppendInt(b, int64(x), 10), nil
	case uint64:
		return strconv.AppendUint(b, x, 10), nil
	case *int:
		if x == nil {
			return append(b, "null"...), nil
		}
		return strconv.AppendInt(b, int64(*x), 10), nil
	case map[string]any:
		if x == nil {
			return append(b, "null"...), nil
		}
		var small [16]string
		keys := small[:0]
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		var err error
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(appendJSONString(b, k), ':')
			if b, err = appendJSONAny(b, x[k], depth+1); err != nil {
				return b, err
			}
		}
		return append(b, '}'), nil
	case []any:
		if x == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		var err error
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendJSONAny(b, e, depth+1); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	case []string:
		return appendJSONStrings(b, x), nil
	}
	return appendMarshal(b, v)
}

func appendMarshal(b []byte, v any) ([]byte, error) {
	q, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	return append(b, q...), nil
}

// appendJSONFloat appends a finite f as encoding/json does (ES6 number
// formatting).
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendEvent appends ev as json.Marshal(ev) writes it.
func appendEvent(b []byte, ev task.Event) ([]byte, error) {
	var err error
	b = append(b, `{"at":`...)
	if b, err = appendJSONTime(b, ev.At); err != nil {
		return b, fmt.Errorf("timeline event %s: %w", ev.Type, err)
	}
	b = append(b, `,"type":`...)
	b = appendJSONString(b, string(ev.Type))
	if ev.Stage != "" {
		b = appendJSONString(append(b, `,"stage":`...), ev.Stage)
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
		b = appendJSONString(append(b, `,"delay":`...), ev.Delay.D().String())
	}
	if ev.Duration != 0 {
		b = appendJSONString(append(b, `,"duration":`...), ev.Duration.D().String())
	}
	for _, f := range [...]struct{ name, v string }{
		{`,"reason":`, ev.Reason}, {`,"actor":`, ev.Actor}, {`,"role":`, ev.Role},
		{`,"requestId":`, ev.RequestID}, {`,"instance":`, ev.Instance},
	} {
		if f.v != "" {
			b = appendJSONString(append(b, f.name...), f.v)
		}
	}
	if ev.Fence != 0 {
		b = strconv.AppendInt(append(b, `,"fence":`...), ev.Fence, 10)
	}
	if len(ev.Data) > 0 {
		if b, err = appendJSONValue(append(b, `,"data":`...), ev.Data); err != nil {
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

// appendJSONStrings appends ss as a JSON array of strings ("null" for nil).
func appendJSONStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// marshalCheckpoint returns c's stored JSON form, as c.Marshal() writes it.
func marshalCheckpoint(c *checkpoint.Checkpoint) (string, error) {
	b := make([]byte, 0, 256)
	b = strconv.AppendInt(append(b, `{"lastCompletedStageIndex":`...), int64(c.LastCompletedStageIndex), 10)
	completed := c.CompletedStages
	if completed == nil {
		completed = []string{}
	}
	b = appendJSONStrings(append(b, `,"completedStages":`...), completed)
	if len(c.SkippedStages) > 0 {
		b = appendJSONStrings(append(b, `,"skippedStages":`...), c.SkippedStages)
	}
	b = append(b, `,"contextData":`...)
	if len(c.ContextData) == 0 {
		b = append(b, "{}"...)
	} else {
		var err error
		if b, err = appendJSONValue(b, c.ContextData); err != nil {
			// The error encoding/json reports for the whole value.
			_, err = c.Marshal()
			return "", err
		}
	}
	b = append(b, `,"savedAt":`...)
	b, err := appendJSONTime(b, c.SavedAt)
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
