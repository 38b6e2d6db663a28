// Package readmark tells a caller whether the reads it made through a store
// were answered from memory — repository.Dual's fallback while Redis is
// unreachable — call by call: the caller puts a Mark in the context of its
// reads (With), the store marks it when it answers from memory
// (FromMemory). A flag of the whole store cannot say so: another
// goroutine's call may set or clear it between a read and its caller's
// look at it.
package readmark

import (
	"context"
	"sync/atomic"
)

type key struct{}

// Mark records whether a read made with its context was answered from
// memory.
type Mark struct{ memory atomic.Bool }

// With returns ctx carrying a new Mark, and the Mark.
func With(ctx context.Context) (context.Context, *Mark) {
	m := &Mark{}
	return context.WithValue(ctx, key{}, m), m
}

// FromMemory marks ctx's Mark, if it has one: a read made with ctx was
// answered from memory.
func FromMemory(ctx context.Context) {
	if m, _ := ctx.Value(key{}).(*Mark); m != nil {
		m.memory.Store(true)
	}
}

// Memory reports whether ctx carries a Mark that a read marked.
func Memory(ctx context.Context) bool {
	m, _ := ctx.Value(key{}).(*Mark)
	return m != nil && m.memory.Load()
}
