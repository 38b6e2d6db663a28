package stage

import (
	"context"
	"fmt"
	"time"

	"github.com/deploycoord/deploycoord/task"
)

// MaxSleep is the longest sleep accepted.
const MaxSleep = 24 * time.Hour

// SleepConfig is the config of the sleep kind (the object under "sleep").
type SleepConfig struct {
	// Duration is how long to sleep, 0 < Duration ≤ MaxSleep; required.
	Duration task.Duration `json:"duration"`
}

type sleepKind struct{}

type sleepStage struct{ d time.Duration }

func (sleepKind) Compile(spec task.StageSpec, _ Env) (Runnable, error) {
	var c SleepConfig
	if err := DecodeConfig(spec, &c); err != nil {
		return nil, err
	}
	d := c.Duration.D()
	switch {
	case d == 0:
		return nil, invalid("sleep.duration", "required (e.g. \"2s\")")
	case d < 0 || d > MaxSleep:
		return nil, invalid("sleep.duration", "%s out of range (0s, %s]", d, MaxSleep)
	}
	return sleepStage{d: d}, nil
}

// Run sleeps; a done ctx ends it with a retryable Failure.
func (s sleepStage) Run(ctx context.Context, _ Input) task.Result {
	t := time.NewTimer(s.d)
	defer t.Stop()
	select {
	case <-t.C:
		return task.Success(nil)
	case <-ctx.Done():
		return task.Failure(fmt.Sprintf("sleep %s: %v", s.d, ctx.Err()), true)
	}
}
