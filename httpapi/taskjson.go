package httpapi

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/deploycoord/deploycoord/internal/jsonenc"
)

// The tenant query (GET /v1/tenants/{id}/task) is the endpoint pollers and
// operators hit hardest, and encoding/json's reflection was a quarter of its
// handler's own CPU. TaskDetail (and the bulk status, a map of them) is
// encoded by hand below with internal/jsonenc, byte for byte what
// json.Marshal gives (TestTaskDetailJSONEqualsMarshal compares them on
// hostile values; BenchmarkTaskDetailJSON and docs/benchmarks.md have the
// figures). A value json.Marshal refuses — a time outside years 0–9999,
// params it cannot encode — makes appendJSON report false, and marshal
// falls back to json.Marshal, which reports the error.

// jsonAppender is a view that can append its own JSON encoding to b; ok
// false means "use json.Marshal".
type jsonAppender interface {
	appendJSON(b []byte) (out []byte, ok bool)
}

// bodyBufs holds the buffers of hand-encoded answers; one grown past
// maxPooledBody is left to the collector.
var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

const maxPooledBody = 256 << 10

// jsonBody is an answer's JSON and a newline, encoded by marshal; buf is
// the pooled buffer it was written into (nil: json.Marshal's).
type jsonBody struct {
	b   []byte
	buf *[]byte
}

// marshal encodes v by hand into a pooled buffer when v is a jsonAppender
// that can, else with json.Marshal. Call release once the body is written
// (and not after).
func marshal(v any) (jsonBody, error) {
	if ja, ok := v.(jsonAppender); ok {
		buf := bodyBufs.Get().(*[]byte)
		if b, ok := ja.appendJSON((*buf)[:0]); ok {
			return jsonBody{b: append(b, '\n'), buf: buf}, nil
		}
		bodyBufs.Put(buf)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return jsonBody{}, err
	}
	return jsonBody{b: append(b, '\n')}, nil
}

// release gives a pooled buffer back.
func (j jsonBody) release() {
	if j.buf != nil && cap(j.b) <= maxPooledBody {
		*j.buf = j.b[:0]
		bodyBufs.Put(j.buf)
	}
}

// appendJSON encodes the answer of POST /v1/tenants:status (map keys sorted,
// as encoding/json does): a dashboard's poll of up to MaxStatusTenants
// tenants.
func (s TenantsStatus) appendJSON(b []byte) ([]byte, bool) {
	if s.Tasks == nil {
		b = append(b, `{"tasks":null,"degraded":`...)
		return append(strconv.AppendBool(b, s.Degraded), '}'), true
	}
	b = append(b, `{"tasks":{`...)
	for i, id := range slices.Sorted(maps.Keys(s.Tasks)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.String(b, id)
		b = append(b, ':')
		d := s.Tasks[id]
		if d == nil {
			b = append(b, "null"...)
			continue
		}
		var ok bool
		if b, ok = d.appendJSON(b); !ok {
			return b, false
		}
	}
	b = append(b, `},"degraded":`...)
	return append(strconv.AppendBool(b, s.Degraded), '}'), true
}

func (d *TaskDetail) appendJSON(b []byte) ([]byte, bool) {
	t := &d.Task
	ok := true
	b = append(b, `{"taskId":`...)
	b = jsonenc.String(b, t.TaskID)
	b = append(b, `,"tenantId":`...)
	b = jsonenc.String(b, t.TenantID)
	b = append(b, `,"planId":`...)
	b = jsonenc.String(b, t.PlanID)
	b = append(b, `,"status":`...)
	b = jsonenc.String(b, string(t.Status))
	b = append(b, `,"orphaned":`...)
	b = strconv.AppendBool(b, t.Orphaned)
	b = append(b, `,"pauseRequested":`...)
	b = strconv.AppendBool(b, t.PauseRequested)
	b = append(b, `,"cancelRequested":`...)
	b = strconv.AppendBool(b, t.CancelRequested)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(t.Attempt), 10)
	b = append(b, `,"currentStageIndex":`...)
	b = strconv.AppendInt(b, int64(t.CurrentStageIndex), 10)
	b = append(b, `,"currentStage":`...)
	b = jsonenc.String(b, t.CurrentStage)
	b = append(b, `,"totalStages":`...)
	b = strconv.AppendInt(b, int64(t.TotalStages), 10)
	b = append(b, `,"stageStartedAt":`...)
	b, ok = appendJSONTime(b, t.StageStartedAt, ok)
	b = append(b, `,"lastError":`...)
	b = jsonenc.String(b, t.LastError)
	b = append(b, `,"reason":`...)
	b = jsonenc.String(b, t.Reason)
	b = append(b, `,"owner":`...)
	b = jsonenc.String(b, t.Owner)
	b = append(b, `,"heartbeatAt":`...)
	b, ok = appendJSONTime(b, t.HeartbeatAt, ok)
	b = append(b, `,"fence":`...)
	b = strconv.AppendInt(b, t.Fence, 10)
	if len(t.Params) > 0 {
		var err error
		if b, err = jsonenc.Value(append(b, `,"params":`...), t.Params); err != nil {
			return b, false
		}
	}
	b = append(b, `,"createdAt":`...)
	b, ok = appendJSONTime(b, t.CreatedAt, ok)
	b = append(b, `,"startedAt":`...)
	b, ok = appendJSONTime(b, t.StartedAt, ok)
	b = append(b, `,"finishedAt":`...)
	b, ok = appendJSONTime(b, t.FinishedAt, ok)
	b = append(b, `,"updatedAt":`...)
	b, ok = appendJSONTime(b, t.UpdatedAt, ok)
	b = append(b, `,"degraded":`...)
	b = strconv.AppendBool(b, t.Degraded)
	b = append(b, `,"hasCheckpoint":`...)
	b = strconv.AppendBool(b, d.HasCheckpoint)
	b = append(b, `,"checkpoint":`...)
	if c := d.Checkpoint; c == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"lastCompletedStageIndex":`...)
		b = strconv.AppendInt(b, int64(c.LastCompletedStageIndex), 10)
		b = append(b, `,"completedStages":`...)
		b = jsonenc.Strings(b, c.CompletedStages)
		b = append(b, `,"skippedStages":`...)
		b = jsonenc.Strings(b, c.SkippedStages)
		b = append(b, `,"savedAt":`...)
		b, ok = appendJSONTime(b, c.SavedAt, ok)
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(c.Attempt), 10)
		b = append(b, `,"fence":`...)
		b = strconv.AppendInt(b, c.Fence, 10)
		b = append(b, '}')
	}
	b = append(b, `,"lockExpiresAt":`...)
	b, ok = appendJSONTime(b, d.LockExpiresAt, ok)
	b = append(b, '}')
	return b, ok
}

// appendJSONTime appends t as time.Time's MarshalJSON does (or null), and
// ok false where MarshalJSON refuses t.
func appendJSONTime(b []byte, t *time.Time, ok bool) ([]byte, bool) {
	if t == nil {
		return append(b, "null"...), ok
	}
	b, err := jsonenc.Time(b, *t)
	return b, ok && err == nil
}
