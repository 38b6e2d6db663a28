package task

// Outcome is the kind of a stage result.
type Outcome string

const (
	// OutcomeSuccess: the stage did its work; its outputs go into the
	// task's context data.
	OutcomeSuccess Outcome = "success"
	// OutcomeFailure: the stage did not do its work. Retryable failures are
	// retried under the stage's retry policy; others fail the task at once.
	OutcomeFailure Outcome = "failure"
	// OutcomeSkip: the stage decided there is nothing to do; the task goes on.
	OutcomeSkip Outcome = "skip"
)

// Result is what a stage run returns (seed 000's PluginResult).
type Result struct {
	Outcome   Outcome
	Outputs   map[string]any
	Reason    string
	Retryable bool
}

// Success is a successful run with outputs (may be nil).
func Success(outputs map[string]any) Result {
	return Result{Outcome: OutcomeSuccess, Outputs: outputs}
}

// Failure is a failed run; retryable says whether another attempt may help.
func Failure(reason string, retryable bool) Result {
	return Result{Outcome: OutcomeFailure, Reason: reason, Retryable: retryable}
}

// Skip is a run that decided to do nothing, for reason.
func Skip(reason string) Result {
	return Result{Outcome: OutcomeSkip, Reason: reason}
}
