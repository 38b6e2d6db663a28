package jsonenc

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/deploycoord/deploycoord/internal/jsonenc/jsonenctest"
)

// hostile are strings the encoders must quote exactly as encoding/json does.
var hostile = jsonenctest.Hostile

func same(t *testing.T, what string, got []byte, gotErr error, v any) {
	t.Helper()
	want, wantErr := json.Marshal(v)
	if (gotErr != nil) != (wantErr != nil) {
		t.Fatalf("%s: error %v, json.Marshal's %v", what, gotErr, wantErr)
	}
	if wantErr == nil && !bytes.Equal(got, want) {
		t.Fatalf("%s differs from json.Marshal\n got: %q\nwant: %q", what, got, want)
	}
}

// randomString draws from an alphabet of what needs care.
func randomString(rng *rand.Rand) string {
	alphabet := []string{"a", "Z", "0", "-", "{", "}", ":", "*", "<", ">", "&", "\"", "\\", "/", "\x00", "\x1f", "\x7f",
		"\n", "\t", "é", "✓", "🚀", "\u2028", "\u2029", "\xff", "\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80"}
	var sb strings.Builder
	for range rng.IntN(16) {
		sb.WriteString(alphabet[rng.IntN(len(alphabet))])
	}
	return sb.String()
}

func TestStringEqualsMarshal(t *testing.T) {
	for _, s := range hostile {
		same(t, "String", String([]byte("x"), s)[1:], nil, s)
	}
	same(t, "Strings", Strings(nil, hostile), nil, hostile)
	same(t, "Strings(nil)", Strings(nil, nil), nil, []string(nil))
	same(t, "Strings(empty)", Strings(nil, []string{}), nil, []string{})
	for c := range 256 { // every byte alone
		s := string([]byte{byte(c)})
		same(t, "String", String(nil, s), nil, s)
	}
	rng := rand.New(rand.NewPCG(11, 28))
	for range 5000 {
		s := randomString(rng)
		same(t, "String", String(nil, s), nil, s)
	}
}

func TestValueEqualsMarshal(t *testing.T) {
	deep := any("bottom")
	for range DepthMax + 5 {
		deep = []any{deep}
	}
	one := 1
	values := []any{
		nil, true, false, "s<>&", 0.0, -0.0, 1.5, 1e21, 1e-7, 123456789.0, math.MaxFloat64, 3, int64(-4), int32(5), uint64(6),
		&one, (*int)(nil), map[string]any(nil), []any(nil), []string(nil),
		map[string]any{"b": 1.0, "a": []any{"x", nil, map[string]any{"\u2028": true}}, "<": "&"},
		[]string{"a", "\xff"}, deep, struct{ A int }{7}, math.Inf(1), math.NaN(), make(chan int),
	}
	for _, v := range values {
		got, err := Value(nil, v)
		same(t, "Value", got, err, v)
	}
	rng := rand.New(rand.NewPCG(5, 9))
	for range 2000 {
		m := map[string]any{}
		for range rng.IntN(6) {
			switch rng.IntN(4) {
			case 0:
				m[randomString(rng)] = randomString(rng)
			case 1:
				m[randomString(rng)] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(40)-20))
			case 2:
				m[randomString(rng)] = []any{randomString(rng), rng.IntN(2) == 0}
			default:
				m[randomString(rng)] = nil
			}
		}
		got, err := Value(nil, m)
		same(t, "Value", got, err, m)
	}
}

func TestTimeEqualsMarshal(t *testing.T) {
	zones := []*time.Location{
		time.UTC, time.FixedZone("IST", 5*3600+1800), time.FixedZone("neg", -(9*3600 + 30*60)),
		time.FixedZone("secs", 3600+17), time.FixedZone("far", 24*3600), time.FixedZone("farneg", -24*3600-60),
	}
	for _, z := range zones {
		for _, y := range []int{-1, 0, 1, 999, 2026, 9999, 10000} {
			for _, ns := range []int{0, 1, 500_000_000, 999_999_999} {
				at := time.Date(y, 12, 31, 23, 59, 59, ns, z)
				got, err := Time(nil, at)
				same(t, "Time("+at.String()+")", got, err, at)
			}
		}
	}
}

func FuzzString(f *testing.F) {
	for _, s := range hostile {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		same(t, "String", String(nil, s), nil, s)
		got, err := Value(nil, map[string]any{s: []any{s, 1.0}})
		same(t, "Value", got, err, map[string]any{s: []any{s, 1.0}})
	})
}
