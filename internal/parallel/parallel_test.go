package parallel

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
)

// TestForEach: every call made, at most workers at once, the first error
// returned and no call started after it.
func TestForEach(t *testing.T) {
	var in, most, calls atomic.Int32
	gate := make(chan struct{})
	go func() {
		for range 100 {
			gate <- struct{}{}
		}
	}()
	err := ForEach(100, 8, func(int) error {
		n := in.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-gate
		in.Add(-1)
		calls.Add(1)
		return nil
	})
	if err != nil || calls.Load() != 100 || most.Load() > 8 {
		t.Fatalf("err %v, %d calls, %d at once; want nil, 100, at most 8", err, calls.Load(), most.Load())
	}
	boom := errors.New("boom")
	calls.Store(0)
	err = ForEach(100, 1, func(i int) error {
		calls.Add(1)
		if i == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || calls.Load() != 4 {
		t.Fatalf("err %v after %d calls; want boom after 4 (one worker stops at its first error)", err, calls.Load())
	}
}

// TestAllRaisesPanicOnCaller: a panic of one call reaches the caller's
// goroutine with the value and its stack; without one, every call is made.
func TestAllRaisesPanicOnCaller(t *testing.T) {
	var done atomic.Int32
	p := func() (p any) {
		defer func() { p = recover() }()
		All(func() { done.Add(1) }, func() { panic("injected") }, func() { done.Add(1) })
		return nil
	}()
	pp, ok := p.(*Panic)
	if !ok || !strings.Contains(pp.Error(), "injected") || !strings.Contains(pp.Error(), "parallel_test.go") {
		t.Fatalf("recovered %v; want the *Panic with the value and the stack", p)
	}
	done.Store(0)
	All(func() { done.Add(1) }, func() { done.Add(1) }, func() { done.Add(1) })
	if done.Load() != 3 {
		t.Fatalf("All made %d of 3 calls", done.Load())
	}
}
