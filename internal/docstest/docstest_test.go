package docstest

import (
	"slices"
	"testing"
)

func TestShellLines(t *testing.T) {
	t.Parallel()
	doc := "text\n```sh\na \\\n  b\nc\n```\n```\noutput\n```\n```yaml\nk: v\n```\n```sh\nd \\\n```\n"
	got := ShellLines(doc)
	want := []string{"a   b", "c", "d "}
	if !slices.Equal(got, want) {
		t.Fatalf("ShellLines = %q, want %q", got, want)
	}
	if got := ShellLines("no blocks"); got != nil {
		t.Fatalf("no blocks: %q", got)
	}
}
