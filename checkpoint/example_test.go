package checkpoint_test

import (
	"fmt"

	"github.com/deploycoord/deploycoord/checkpoint"
)

// A checkpoint grows one stage at a time; a retry from a named stage
// truncates it, dropping the outputs of that stage and every later one.
func ExampleCheckpoint_TruncateBefore() {
	names := []string{"build", "migrate", "deploy"}
	c := checkpoint.Empty()
	c, _ = c.Complete(0, "build", map[string]any{"image": "app:1.2"})
	c, _ = c.Skip(1, "migrate", nil)
	c, _ = c.Complete(2, "deploy", map[string]any{"url": "https://acme.example"})
	fmt.Println(c.CompletedStages, c.SkippedStages, len(c.ContextData), c.NextStageIndex())

	_, err := c.Complete(2, "deploy", nil)
	fmt.Println(err)

	r, _ := c.TruncateBefore(1, names)
	fmt.Println(r.CompletedStages, r.SkippedStages, r.ContextData, r.NextStageIndex())
	fmt.Println(c.CompletedStages) // c itself is unchanged
	// Output:
	// [build migrate deploy] [migrate] 2 3
	// checkpoint: stage 2 completed out of order (next is 3)
	// [build] [] map[build:map[image:app:1.2]] 1
	// [build migrate deploy]
}
