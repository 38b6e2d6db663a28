package readmark_test

import (
	"context"
	"testing"

	"github.com/deploycoord/deploycoord/internal/readmark"
)

func TestMark(t *testing.T) {
	t.Parallel()
	if readmark.Memory(context.Background()) {
		t.Fatal("a context without a mark reads as marked")
	}
	readmark.FromMemory(context.Background()) // no mark: nothing happens
	ctx, m := readmark.With(context.Background())
	other, _ := readmark.With(context.Background())
	if readmark.Memory(ctx) {
		t.Fatal("a new mark reads as marked")
	}
	readmark.FromMemory(ctx)
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	if !readmark.Memory(ctx) || !readmark.Memory(child) || readmark.Memory(other) {
		t.Fatalf("after FromMemory: ctx %v, child %v, another mark %v; want true, true, false",
			readmark.Memory(ctx), readmark.Memory(child), readmark.Memory(other))
	}
	_ = m
}
