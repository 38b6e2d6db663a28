package task_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/deploycoord/deploycoord/task"
)

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// ulidMillis decodes the 48-bit timestamp held by the first 10 characters.
func ulidMillis(t *testing.T, id string) int64 {
	t.Helper()
	var v int64
	for _, c := range id[:10] {
		i := strings.IndexRune(crockford, c)
		if i < 0 {
			t.Fatalf("ULID %s: %q is not Crockford base 32", id, c)
		}
		v = v<<5 | int64(i)
	}
	return v
}

func TestULID(t *testing.T) {
	t.Parallel()
	t.Run("OK/Format", func(t *testing.T) {
		t.Parallel()
		for _, at := range []time.Time{time.UnixMilli(0), t0, time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), time.UnixMilli(1<<48 - 1)} {
			id := task.ULID(at)
			if len(id) != 26 {
				t.Fatalf("ULID(%v) = %q: %d characters, want 26", at, id, len(id))
			}
			for _, c := range id {
				if !strings.ContainsRune(crockford, c) {
					t.Fatalf("ULID(%v) = %q holds %q", at, id, c)
				}
			}
			if id[0] > '7' {
				t.Errorf("ULID(%v) = %q: first digit holds only 3 bits", at, id)
			}
			if got := ulidMillis(t, id); got != at.UnixMilli() {
				t.Errorf("ULID(%v) encodes %d ms, want %d", at, got, at.UnixMilli())
			}
			if got := task.ULIDMillis(id); got != at.UnixMilli() {
				t.Errorf("ULIDMillis(%q) = %d, want %d", id, got, at.UnixMilli())
			}
		}
	})
	t.Run("OK/MillisOfAnyDigits", func(t *testing.T) {
		t.Parallel()
		// A valid id may start with a digit above 7 (more than 3 bits) and
		// short or foreign input must not panic: the result stays 48 bits.
		for _, s := range []string{"ZZZZZZZZZZZZZZZZZZZZZZZZZZ", "", "0", "{}:*?\x00", "8000000000"} {
			if got := task.ULIDMillis(s); got < 0 || got >= 1<<48 {
				t.Errorf("ULIDMillis(%q) = %d, not 48 bits", s, got)
			}
		}
	})
	t.Run("OK/SortsByTime", func(t *testing.T) {
		t.Parallel()
		var ids []string
		at := t0
		for i := 0; i < 2000; i++ {
			// Steps of 1 ms to several days cross every digit boundary.
			at = at.Add(time.Duration(1+i*i*i%86_400_000) * time.Millisecond)
			ids = append(ids, task.ULID(at))
		}
		if !slices.IsSorted(ids) {
			t.Fatal("ids made at increasing milliseconds do not sort increasingly")
		}
		for i := 1; i < len(ids); i++ {
			if ids[i] == ids[i-1] {
				t.Fatalf("duplicate id %s", ids[i])
			}
		}
	})
	t.Run("OK/MonotonicWithinOneMillisecond", func(t *testing.T) {
		t.Parallel()
		// Made in turn in one millisecond (other tests make ids of t0 at
		// the same time: each still comes after the one before it here).
		at := t0.Add(time.Hour)
		prev := task.ULID(at)
		for i := 0; i < 5000; i++ {
			id := task.ULID(at)
			if id <= prev {
				t.Fatalf("id %s made after %s in the same millisecond sorts before it", id, prev)
			}
			if task.ULIDMillis(id) != at.UnixMilli() {
				t.Fatalf("id %s: time part moved", id)
			}
			prev = id
		}
	})
	t.Run("OK/MonotonicWithOtherMillisecondsBetween", func(t *testing.T) {
		t.Parallel()
		// Callers pass their own now: ids of one millisecond made with ids
		// of other milliseconds between them (a plan's creation beside a
		// retry, tests with clocks of their own) still come in turn — the
		// tenant index takes the greatest id of a millisecond as the newest.
		// Two goroutines per millisecond, three milliseconds, interleaved.
		ats := []time.Time{t0.Add(2 * time.Hour), t0.Add(3 * time.Hour), t0.Add(4 * time.Hour)}
		var mu sync.Mutex
		last := map[int64]string{}
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				at := ats[g%len(ats)]
				for range 3000 {
					mu.Lock() // made and compared in one step: "in turn" is this order
					id, ms := task.ULID(at), at.UnixMilli()
					if prev := last[ms]; id <= prev {
						mu.Unlock()
						t.Errorf("id %s of %d ms made after %s sorts before it", id, ms, prev)
						return
					}
					last[ms] = id
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		// Sequential, with a hundred other milliseconds in between each.
		at := t0.Add(5 * time.Hour)
		prev := task.ULID(at)
		for i := range 50 {
			for j := range 100 {
				task.ULID(at.Add(time.Duration(1+i*100+j) * time.Millisecond))
			}
			id := task.ULID(at)
			if id <= prev {
				t.Fatalf("id %s made after %s in the same millisecond, other ids between, sorts before it", id, prev)
			}
			prev = id
		}
	})
	t.Run("OK/UniqueWithinOneMillisecond", func(t *testing.T) {
		t.Parallel()
		seen := map[string]bool{}
		prefix := ""
		for i := 0; i < 5000; i++ {
			id := task.ULID(t0)
			if seen[id] {
				t.Fatalf("duplicate id %s", id)
			}
			seen[id] = true
			if prefix == "" {
				prefix = id[:10]
			} else if id[:10] != prefix {
				t.Fatalf("same instant, different time part: %s vs %s", id[:10], prefix)
			}
		}
	})
	t.Run("OK/NewIDIsValid", func(t *testing.T) {
		t.Parallel()
		id := task.NewID(t0)
		if !strings.HasPrefix(id, "task-") || !task.ValidID(id) {
			t.Errorf("NewID = %q, not a valid task id", id)
		}
		if later := task.NewID(t0.Add(time.Millisecond)); later <= id {
			t.Errorf("NewID later = %s sorts before %s", later, id)
		}
	})
}

func TestValidID(t *testing.T) {
	t.Parallel()
	good := "task-01HZY3N5R8W7G3M7YV6X9Q2B1C"
	tests := []struct {
		id   string
		want bool
	}{
		{good, true},
		{"task-" + strings.Repeat("Z", 26), true},
		{"task-" + strings.Repeat("0", 26), true},
		{"", false},
		{"task-", false},
		{good[:len(good)-1], false},
		{good + "0", false},
		{"plan-01HZY3N5R8W7G3M7YV6X9Q2B1C", false},
		{"TASK-01HZY3N5R8W7G3M7YV6X9Q2B1C", false},
		{"task-01hzy3n5r8w7g3m7yv6x9q2b1c", false},
		{"task-01HZY3N5R8W7G3M7YV6X9Q2B1I", false},
		{"task-01HZY3N5R8W7G3M7YV6X9Q2B1L", false},
		{"task-01HZY3N5R8W7G3M7YV6X9Q2B1O", false},
		{"task-01HZY3N5R8W7G3M7YV6X9Q2B1U", false},
		{good + "\n", false},
		{" " + good, false},
		{"task-01HZY3N5R8W7G3M7YV6X9Q2B1*", false},
	}
	for _, tt := range tests {
		name := "Reject"
		if tt.want {
			name = "Accept"
		}
		t.Run(name+"/"+fmt.Sprintf("%q", tt.id), func(t *testing.T) {
			t.Parallel()
			if got := task.ValidID(tt.id); got != tt.want {
				t.Errorf("ValidID(%q) = %v, want %v", tt.id, got, tt.want)
			}
		})
	}
}

// idCases are shared by the tenant and instance allowlists (they are the same).
var idCases = []struct {
	name string
	id   string
	want bool
}{
	{"Accept/OneChar", "a", true},
	{"Accept/Digit", "7", true},
	{"Accept/Mixed", "Tenant-42.eu_west", true},
	{"Accept/128", strings.Repeat("x", 128), true},
	{"Accept/Hostname", "node-a.example.com", true},
	{"Reject/Empty", "", false},
	{"Reject/129", strings.Repeat("x", 129), false},
	{"Reject/LeadingDash", "-a", false},
	{"Reject/LeadingDot", ".a", false},
	{"Reject/LeadingUnderscore", "_a", false},
	{"Reject/OpenBrace", "a{b", false},
	{"Reject/HashTag", "{acme}", false},
	{"Reject/Colon", "acme:locks", false},
	{"Reject/Star", "acme*", false},
	{"Reject/Question", "acme?", false},
	{"Reject/Bracket", "acme[1]", false},
	{"Reject/Space", "ac me", false},
	{"Reject/TrailingSpace", "acme ", false},
	{"Reject/Tab", "ac\tme", false},
	{"Reject/Newline", "acme\n", false},
	{"Reject/CR", "acme\r", false},
	{"Reject/NUL", "ac\x00me", false},
	{"Reject/Slash", "a/b", false},
	{"Reject/Backslash", `a\b`, false},
	{"Reject/Quote", `a"b`, false},
	{"Reject/Unicode", "ténant", false},
	{"Reject/UnicodeDigit", "١٢٣", false},
	{"Reject/InvalidUTF8", "a\xff", false},
	{"Reject/Percent", "a%20b", false},
}

func TestValidTenantID(t *testing.T) {
	t.Parallel()
	for _, tt := range idCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := task.ValidTenantID(tt.id); got != tt.want {
				t.Errorf("ValidTenantID(%q) = %v, want %v", tt.id, got, tt.want)
			}
			err := task.CheckTenantID(tt.id)
			if tt.want {
				if err != nil {
					t.Errorf("CheckTenantID(%q): %v", tt.id, err)
				}
				return
			}
			if !errors.Is(err, task.ErrInvalid) {
				t.Fatalf("CheckTenantID(%q) = %v, want ErrInvalid", tt.id, err)
			}
			if strings.IndexFunc(err.Error(), unicode.IsControl) >= 0 {
				t.Errorf("CheckTenantID error %q carries raw control characters", err)
			}
		})
	}
}

func TestValidInstanceID(t *testing.T) {
	t.Parallel()
	for _, tt := range idCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := task.ValidInstanceID(tt.id); got != tt.want {
				t.Errorf("ValidInstanceID(%q) = %v, want %v", tt.id, got, tt.want)
			}
		})
	}
}

func TestQuote(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"Plain", "acme", `"acme"`},
		{"Empty", "", `""`},
		{"Newline", "a\nb", `"a\nb"`},
		{"CarriageReturn", "a\rb", `"a\rb"`},
		{"NUL", "a\x00b", `"a\x00b"`},
		{"Escape", "\x1b[31mred", `"\x1b[31mred"`},
		{"DEL", "a\x7f", `"a\x7f"`},
		{"C1", "a\u0085b", `"a\u0085b"`},
		{"LineSeparator", "a\u2028b", `"a\u2028b"`},
		{"QuoteChar", `say "hi"`, `"say \"hi\""`},
		{"InvalidUTF8", "a\xffb", `"a\xffb"`},
		{"Unicode", "café", `"café"`},
		{"Exactly80", strings.Repeat("a", 80), `"` + strings.Repeat("a", 80) + `"`},
		{"Truncated81", strings.Repeat("a", 81), `"` + strings.Repeat("a", 80) + `"… (81 bytes)`},
		{"TruncatedLong", strings.Repeat("ab", 5000), `"` + strings.Repeat("ab", 40) + `"… (10000 bytes)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := task.Quote(tt.in); got != tt.want {
				t.Errorf("Quote(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
	t.Run("NoControlCharactersForAnyByte", func(t *testing.T) {
		t.Parallel()
		for b := 0; b < 256; b++ {
			in := strings.Repeat(string(rune(b)), 3) + string([]byte{byte(b)}) + strings.Repeat("\n", 100)
			got := task.Quote(in)
			if strings.IndexFunc(got, unicode.IsControl) >= 0 || strings.ContainsRune(got, '\u2028') {
				t.Errorf("Quote(%q) = %q keeps a control character", in, got)
			}
			if len(got) > 2*4*80+40 {
				t.Errorf("Quote of %d bytes is %d bytes long", len(in), len(got))
			}
		}
	})
	t.Run("CutInsideRuneStaysEscaped", func(t *testing.T) {
		t.Parallel()
		in := strings.Repeat("a", 79) + "é" + "tail"
		got := task.Quote(in)
		if !strings.HasPrefix(got, `"`+strings.Repeat("a", 79)+`\xc3"…`) {
			t.Errorf("Quote = %s, want the cut half rune escaped", got)
		}
	})
}
