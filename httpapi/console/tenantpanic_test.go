package console_test

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/deploycoord/deploycoord/facade"
	"github.com/deploycoord/deploycoord/httpapi/console"
)

// panicHistory is the coordinator, except that History panics (a bug in
// a read, as a malformed record once made one).
type panicHistory struct{ *facade.Coordinator }

func (s *panicHistory) History(context.Context, string, int) ([]facade.TaskView, error) {
	panic("injected: history read panicked")
}

// TestTenantPageReadPanicIs500: a panic in one of the tenant page's reads
// is a 500 for that page (the server's recoverPanic), as it was when the
// page read them one after the other on the handler's goroutine. Read at
// once on goroutines of their own, the panic ended the process: every
// task it ran orphaned, for one page view. The page is served in a child
// test process: the panic, if it escapes, ends that one.
func TestTenantPageReadPanicIs500(t *testing.T) {
	if os.Getenv("CONSOLE_TENANT_PANIC_CHILD") == "1" {
		b := setup(t, bundleOpts{wrap: func(c *facade.Coordinator) console.Service { return &panicHistory{c} }})
		b.createPlan(b.coord, "panics", "t-panics")
		b.signedIn(operatorSecret).get(b.ui("tenants/t-panics")).mustStatus(t, 500, "tenant page whose history read panics")
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTenantPageReadPanicIs500$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CONSOLE_TENANT_PANIC_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		if len(out) > 3000 {
			out = out[:3000]
		}
		t.Fatalf("child serving the tenant page: %v (a read's panic ended the process, want a 500):\n%s", err, out)
	}
}
