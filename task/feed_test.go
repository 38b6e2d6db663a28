package task_test

import (
	"strings"
	"testing"

	"github.com/deploycoord/deploycoord/task"
)

func TestValidFeedCursor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, s string
		want    bool
	}{
		{"OK/New", "$", true},
		{"OK/Entry", "1732233600000-0", true},
		{"OK/Longest", strings.Repeat("9", 20) + "-" + strings.Repeat("9", 20), true},
		{"Reject/Empty", "", false},
		{"Reject/Word", "abc", false},
		{"Reject/NoSeq", "1732233600000", false},
		{"Reject/NoMillis", "-0", false},
		{"Reject/TooLong", strings.Repeat("9", 21) + "-0", false},
		{"Reject/Braces", "1-{0}", false},
		{"Reject/Space", "1-0 ", false},
		{"Reject/Newline", "1-0\n", false},
		{"Reject/TwoDollars", "$$", false},
		{"Reject/Plus", "+", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := task.ValidFeedCursor(tt.s); got != tt.want {
				t.Errorf("ValidFeedCursor(%q) = %v, want %v", tt.s, got, tt.want)
			}
		})
	}
}

func TestValidEventType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, s string
		want    bool
	}{
		{"OK/Task", "task.failed", true},
		{"OK/Underscore", "task.stage_succeeded", true},
		{"OK/Plan", "plan.created", true},
		{"Reject/Empty", "", false},
		{"Reject/NoDot", "failed", false},
		{"Reject/NoName", "task.", false},
		{"Reject/Upper", "Task.Failed", false},
		{"Reject/Space", "task failed", false},
		{"Reject/TwoDots", "task.stage.failed", false},
		{"Reject/Digit", "task.failed2", false},
		{"Reject/NameTooLong", "task." + strings.Repeat("a", 65), false},
		{"Reject/Newline", "task.failed\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := task.ValidEventType(tt.s); got != tt.want {
				t.Errorf("ValidEventType(%q) = %v, want %v", tt.s, got, tt.want)
			}
		})
	}
}
