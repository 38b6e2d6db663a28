package facade

import (
	"testing"
	"time"
)

// TestShare: the part of maxConcurrency an instance runs, by its rank among
// the live instances (sorted ids).
func TestShare(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		max  int
		self string
		live []string // nil: unknown
		want int
	}{
		{4, "a", nil, 4},
		{4, "a", []string{"a", "b"}, 2},
		{4, "b", []string{"a", "b"}, 2},
		{5, "a", []string{"a", "b"}, 3},
		{5, "b", []string{"a", "b"}, 2},
		{5, "c", []string{"a", "b", "c"}, 1},
		{5, "a", []string{"a", "b", "c"}, 2},
		{1, "a", []string{"a", "b", "c"}, 1},
		{1, "c", []string{"a", "b", "c"}, 1},
		{0, "a", []string{"a"}, 1},
		{64, "z", []string{"a"}, 32}, // not listed yet: counted in
	} {
		co := &Coordinator{cfg: Config{Instance: c.self, Lease: time.Minute}, now: func() time.Time { return now }}
		if c.live != nil {
			co.live, co.liveAt = map[string]time.Time{}, now
			for _, id := range c.live {
				co.live[id] = now
			}
		}
		if got := co.share(c.max); got != c.want {
			t.Errorf("share(%d) of %s among %v = %d, want %d", c.max, c.self, c.live, got, c.want)
		}
	}
}
