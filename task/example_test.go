package task_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/deploycoord/deploycoord/task"
)

// The delays of an exponential policy double from baseDelay and stop at
// maxDelay; u places the jitter (0.5 = none, 0 = the shortest, near 1 = the
// longest).
func ExampleRetryPolicy_Delay() {
	p := task.RetryPolicy{
		MaxAttempts: 6,
		Backoff:     task.BackoffExponential,
		BaseDelay:   task.Duration(time.Second),
		MaxDelay:    task.Duration(10 * time.Second),
		Jitter:      0.2,
	}
	for n := 1; n < p.Attempts(); n++ {
		fmt.Printf("after attempt %d: %v (jittered %v..%v)\n", n, p.Delay(n, 0.5), p.Delay(n, 0), p.Delay(n, 0.9999))
	}
	// Output:
	// after attempt 1: 1s (jittered 800ms..1.19996s)
	// after attempt 2: 2s (jittered 1.6s..2.39992s)
	// after attempt 3: 4s (jittered 3.2s..4.79984s)
	// after attempt 4: 8s (jittered 6.4s..9.59968s)
	// after attempt 5: 10s (jittered 8s..10s)
}

// A stage's kind-specific settings sit under a key named after its kind.
func ExampleStageSpec_UnmarshalJSON() {
	var s task.StageSpec
	err := json.Unmarshal([]byte(`{
		"name": "settle", "kind": "sleep", "timeout": "1m",
		"retry": {"maxAttempts": 3, "backoff": "fixed", "baseDelay": "5s"},
		"sleep": {"duration": "2s"}
	}`), &s)
	fmt.Println(err, s.Name, s.Kind, s.TimeoutOrDefault(), s.Retry.Attempts(), string(s.Config))

	err = json.Unmarshal([]byte(`{"name": "settle", "kind": "sleep", "duration": "2s"}`), &s)
	fmt.Println(err)
	// Output:
	// <nil> settle sleep 1m0s 3 {"duration": "2s"}
	// stage "settle": unknown field "duration" (settings go under the key "sleep")
}

// A manual retry of a failed task is a new attempt; the task keeps its first
// start time.
func ExampleTask_Rerun() {
	start := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	t := task.New("task-1", "plan-1", "acme", nil, []string{"build", "deploy"}, start)
	_ = t.Start(start, "node-a", 1)
	_ = t.Fail(start.Add(time.Minute), "deploy: HTTP 503")
	fmt.Println(t.Status, t.Attempt, t.LastError)

	err := t.Rerun(start.Add(time.Hour), "node-b", 2, 1, "deploy", task.RetryNew, false)
	fmt.Println(err, t.Status, t.Attempt, t.StageName, t.Owner, t.StartedAt.Format(time.Kitchen))

	err = t.Rerun(start.Add(time.Hour), "node-c", 3, 1, "deploy", task.RetryNew, false)
	fmt.Println(err)
	// Output:
	// FAILED 1 deploy: HTTP 503
	// <nil> RUNNING 2 deploy node-b 12:00PM
	// task task-1: cannot go from RUNNING to RUNNING: it is running on a live instance
}
