// Package checkpoint holds the value saved after every stage of a task: which
// stages are done, the context data later stages (and a retried task) see, and
// the attempt and fencing token of the writer that saved it (seed 002 §3.5).
//
// A Checkpoint is a plain value. Methods that change it return a new value and
// never modify the receiver's maps or slices, so a checkpoint handed to a store
// or a reader cannot be changed behind its back.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// None is the LastCompletedStageIndex of a checkpoint in which no stage is done.
const None = -1

// ErrNotFound is returned by readers when a task has no checkpoint.
var ErrNotFound = errors.New("checkpoint: not found")

// Checkpoint is the progress of one task, saved after every stage.
type Checkpoint struct {
	// LastCompletedStageIndex is the index of the last stage that is done
	// (succeeded or skipped), or None.
	LastCompletedStageIndex int `json:"lastCompletedStageIndex"`
	// CompletedStages names the done stages in order, skipped ones included.
	CompletedStages []string `json:"completedStages"`
	// SkippedStages names the done stages that were skipped rather than run.
	SkippedStages []string `json:"skippedStages,omitempty"`
	// ContextData holds every done stage's outputs under the stage's name.
	ContextData map[string]any `json:"contextData"`
	// SavedAt is when the checkpoint was written.
	SavedAt time.Time `json:"savedAt"`
	// Attempt is the task attempt that wrote it.
	Attempt int `json:"attempt"`
	// Fence is the fencing token of the tenant lock held by the writer.
	Fence int64 `json:"fence"`
}

// Empty returns the checkpoint of a task in which no stage is done.
func Empty() Checkpoint {
	return Checkpoint{LastCompletedStageIndex: None, CompletedStages: []string{}, ContextData: map[string]any{}}
}

// IsEmpty reports whether no stage is done.
func (c Checkpoint) IsEmpty() bool { return c.LastCompletedStageIndex < 0 }

// NextStageIndex is the index of the first stage that is not done.
func (c Checkpoint) NextStageIndex() int { return c.LastCompletedStageIndex + 1 }

// Complete returns the checkpoint after stage index (named name) succeeded with
// outputs. Stages must complete in order: index must be NextStageIndex.
func (c Checkpoint) Complete(index int, name string, outputs map[string]any) (Checkpoint, error) {
	return c.advance(index, name, outputs, false)
}

// Skip returns the checkpoint after stage index was skipped. outputs, if any,
// are recorded as that stage's outputs (an operator may supply them).
func (c Checkpoint) Skip(index int, name string, outputs map[string]any) (Checkpoint, error) {
	return c.advance(index, name, outputs, true)
}

func (c Checkpoint) advance(index int, name string, outputs map[string]any, skipped bool) (Checkpoint, error) {
	if index != c.NextStageIndex() {
		return c, fmt.Errorf("checkpoint: stage %d completed out of order (next is %d)", index, c.NextStageIndex())
	}
	n := c.clone()
	n.LastCompletedStageIndex = index
	n.CompletedStages = append(n.CompletedStages, name)
	if skipped {
		n.SkippedStages = append(n.SkippedStages, name)
	}
	if outputs != nil {
		n.ContextData[name] = outputs
	}
	return n, nil
}

// TruncateBefore returns the checkpoint as it was before stage index ran: the
// stages from index on are no longer done and their outputs are dropped, given
// stage names in pipeline order. index must be covered by the checkpoint
// (0 <= index <= NextStageIndex).
func (c Checkpoint) TruncateBefore(index int, stageNames []string) (Checkpoint, error) {
	if index < 0 || index > c.NextStageIndex() {
		return c, fmt.Errorf("checkpoint: stage %d is not covered (next is %d)", index, c.NextStageIndex())
	}
	n := c.clone()
	n.LastCompletedStageIndex = index - 1
	n.CompletedStages = n.CompletedStages[:min(index, len(n.CompletedStages))]
	for _, name := range stageNames[min(index, len(stageNames)):] {
		delete(n.ContextData, name)
		n.SkippedStages = slices.DeleteFunc(n.SkippedStages, func(s string) bool { return s == name })
	}
	return n, nil
}

// Stamp returns c marked as written at now by the given attempt and fence.
func (c Checkpoint) Stamp(now time.Time, attempt int, fence int64) Checkpoint {
	c.SavedAt = now.UTC()
	c.Attempt = attempt
	c.Fence = fence
	return c
}

// Clone returns a deep copy of c (ContextData one level deep; stage outputs
// are treated as immutable).
func (c Checkpoint) Clone() Checkpoint { return c.clone() }

func (c Checkpoint) clone() Checkpoint {
	n := c
	n.CompletedStages = append(make([]string, 0, len(c.CompletedStages)+1), c.CompletedStages...)
	if c.SkippedStages != nil {
		n.SkippedStages = slices.Clone(c.SkippedStages)
	}
	n.ContextData = make(map[string]any, len(c.ContextData)+1)
	maps.Copy(n.ContextData, c.ContextData)
	return n
}

// Marshal returns the JSON form stored in Redis.
func (c Checkpoint) Marshal() ([]byte, error) {
	if c.CompletedStages == nil {
		c.CompletedStages = []string{}
	}
	if c.ContextData == nil {
		c.ContextData = map[string]any{}
	}
	return json.Marshal(c)
}

// Unmarshal parses the JSON form stored in Redis.
func Unmarshal(b []byte) (Checkpoint, error) {
	c := Checkpoint{LastCompletedStageIndex: None}
	if err := json.Unmarshal(b, &c); err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint: decode: %w", err)
	}
	if c.LastCompletedStageIndex < None || len(c.CompletedStages) != c.LastCompletedStageIndex+1 {
		return Checkpoint{}, fmt.Errorf("checkpoint: decode: %d completed stages for last index %d",
			len(c.CompletedStages), c.LastCompletedStageIndex)
	}
	if c.ContextData == nil {
		c.ContextData = map[string]any{}
	}
	return c, nil
}
