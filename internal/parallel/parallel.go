// Package parallel runs calls side by side the way a loop would run them
// in turn, as far as the caller can tell: it returns when all returned, with
// the first error, and a panic of one is raised again on the caller's
// goroutine. The bulk actions of facade (a plan's cancel, a bulk retry's
// locks) and the console's tenant page (its independent reads) use it.
package parallel

import (
	"fmt"
	"sync"
	"sync/atomic"

	"runtime/debug"
)

// ForEach calls f(0) … f(n-1), at most workers at a time, and
// returns the first error; once one failed no further call starts (those
// in flight finish), as a loop that stops at its first error would. A
// panic of f stops it the same way and is raised again on the caller's
// goroutine once the calls in flight finished, as a loop's would be: the
// HTTP server turns a handler's panic into a 500 (recoverPanic), and one
// on a goroutine of its own would end the process, orphaning every task
// it runs.
func ForEach(n, workers int, f func(i int) error) error {
	if n == 0 {
		return nil
	}
	var (
		next   atomic.Int64
		once   sync.Once
		first  error
		wg     sync.WaitGroup
		pOnce  sync.Once
		caught *Panic
	)
	failed := atomic.Bool{}
	call := func(i int) (err error) {
		defer func() {
			if p := recover(); p != nil {
				pOnce.Do(func() { caught = &Panic{value: p, stack: debug.Stack()} })
				failed.Store(true)
			}
		}()
		return f(i)
	}
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := call(i); err != nil {
					once.Do(func() { first = err })
					failed.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	if caught != nil {
		panic(caught)
	}
	return first
}

// Panic is a panic of ForEach's f raised again on the caller's
// goroutine, with the stack of the goroutine where it happened.
type Panic struct {
	value any
	stack []byte
}

func (p *Panic) Error() string {
	return fmt.Sprintf("%v\n\n[goroutine of parallel.ForEach]\n%s", p.value, p.stack)
}

// All calls each of fs on a goroutine of its own and returns when all
// returned. A panic of one is raised again as ForEach raises it, once the
// calls in flight returned; a call not started by then is not made.
func All(fs ...func()) {
	_ = ForEach(len(fs), len(fs), func(i int) error {
		fs[i]()
		return nil
	})
}
