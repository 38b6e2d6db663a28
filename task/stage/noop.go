package stage

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/deploycoord/deploycoord/task"
)

// NoopConfig is the config of the noop kind (the object under "noop"; it
// may be left out).
type NoopConfig struct {
	// Outputs become the stage's outputs on every run.
	Outputs map[string]any `json:"outputs,omitempty"`
}

type noopKind struct{}

// noopStage keeps its outputs as JSON so that every run returns a fresh copy
// (the runner owns the maps it gets).
type noopStage struct{ outputs []byte }

func (noopKind) Compile(spec task.StageSpec, env Env) (Runnable, error) {
	var c NoopConfig
	if err := DecodeConfig(spec, &c); err != nil {
		return nil, err
	}
	if c.Outputs == nil {
		return noopStage{}, nil
	}
	b, err := json.Marshal(c.Outputs)
	if err != nil {
		return nil, invalid("noop.outputs", "%v", err)
	}
	if int64(len(b)) > env.MaxOutputBytes && env.MaxOutputBytes > 0 {
		return nil, invalid("noop.outputs", "%d bytes, limit %d", len(b), env.MaxOutputBytes)
	}
	return noopStage{outputs: b}, nil
}

func (s noopStage) Run(context.Context, Input) task.Result {
	if s.outputs == nil {
		return task.Success(nil)
	}
	var out map[string]any
	if err := json.Unmarshal(s.outputs, &out); err != nil {
		return task.Failure(fmt.Sprintf("noop: %v", err), false)
	}
	return task.Success(out)
}
