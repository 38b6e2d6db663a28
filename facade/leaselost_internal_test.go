package facade

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/deploycoord/deploycoord/tenantlock"
)

// TestLeaseLostReason: the reason people read for a lost lease is one
// sentence saying what happened and what to do, never the chain of wrapped
// internals ("facade: stage interrupted: facade: stage interrupted:
// tenantlock: lease … refused: extension refused: …") it used to be.
func TestLeaseLostReason(t *testing.T) {
	t.Parallel()
	refused := &tenantlock.RefusedError{TenantID: "t-04", Fence: 7, Reason: "extension refused: the lock holds another value"}
	taken := &tenantlock.RefusedError{TenantID: "t-04", Fence: 7, Reason: "re-acquire refused", Current: tenantlock.Info{
		TenantID: "t-04", Held: true, Fence: 9, Holder: tenantlock.Holder{Instance: "coord-b", TaskID: "task-01JDQZV5X8M7R2K9C3B4N6P0QS"}}}
	chain := func(err error) error {
		return fmt.Errorf("%w: %w", errInterrupted, fmt.Errorf("%w: %w", errInterrupted, err))
	}
	tests := []struct {
		name string
		err  error
		want []string
	}{
		{"OKExtensionRefused", chain(refused), []string{"lock lapsed", "retry the task"}},
		{"OKTakenByAnother", chain(taken), []string{"lost the tenant's lock to instance coord-b", "task-01JDQZV5X8M7R2K9C3B4N6P0QS"}},
		{"OKStopping", errStopping, []string{"This instance stopped", "retry the task or resume the plan"}},
		{"OKOther", errors.New("lease: unconfirmed past deadline"), []string{"lock lapsed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := leaseLostReason(tt.err)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("reason %q does not say %q", got, w)
				}
			}
			for _, internal := range []string{"facade:", "tenantlock:", "stage interrupted", "extension refused", "fence 7"} {
				if strings.Contains(got, internal) {
					t.Errorf("reason %q shows the internal %q", got, internal)
				}
			}
			if strings.Count(got, ". ") > 0 || !strings.HasSuffix(got, ".") {
				t.Errorf("reason %q is not one sentence", got)
			}
		})
	}
}
