package redislock

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/deploycoord/deploycoord/tenantlock"
)

// idRe is the allowlist as a regexp: validID must agree with it.
var idRe = regexp.MustCompile(idPattern)

func TestValidID(t *testing.T) {
	t.Parallel()
	cases := []string{"", "a", "Z", "0", "a.b", "a_b-c.9", ".a", "-a", "_a", "a b", "a\n", "a\x00", "acmé", "é",
		"a}", "a:b", "a*", `a\b`, "a\xff", strings.Repeat("a", 127), strings.Repeat("a", 128), strings.Repeat("a", 129),
		"a" + strings.Repeat(".", 127), "a" + strings.Repeat(".", 128)}
	// Every string of one and two bytes, all 256 values.
	for c := range 256 {
		cases = append(cases, string([]byte{byte(c)}), string([]byte{'a', byte(c)}), string([]byte{byte(c), 'a'}))
	}
	for _, id := range cases {
		if got, want := validID(id), idRe.MatchString(id); got != want {
			t.Errorf("validID(%q) = %v, the regexp says %v", id, got, want)
		}
	}
}

func FuzzValidID(f *testing.F) {
	for _, s := range []string{"", "a", "a.b-c_d", ".a", "a\n", strings.Repeat("b", 128), strings.Repeat("b", 129)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := validID(id), idRe.MatchString(id); got != want {
			t.Errorf("validID(%q) = %v, the regexp says %v", id, got, want)
		}
	})
}

func TestEncodeValue(t *testing.T) {
	t.Parallel()
	holders := []tenantlock.Holder{
		holder("task-1"),
		{PlanID: "p", TaskID: "t", Instance: "i"},
		{PlanID: strings.Repeat("P", 128), TaskID: "a.b_c-d", Instance: "coord-01.example"},
		// Not valid (Acquire refuses them first), encoded by encoding/json.
		{PlanID: `p"<&>`, TaskID: "t\n", Instance: "é"},
	}
	for _, h := range holders {
		v := encodeValue(h)
		var got lockValue
		if err := json.Unmarshal([]byte(v), &got); err != nil {
			t.Fatalf("encodeValue(%+v) = %q, not JSON: %v", h, v, err)
		}
		want, err := json.Marshal(lockValue{Holder: h, Nonce: got.Nonce})
		if err != nil {
			t.Fatal(err)
		}
		if v != string(want) {
			t.Errorf("encodeValue(%+v) = %s, json.Marshal writes %s", h, v, want)
		}
		if len(got.Nonce) != 32 || strings.Trim(got.Nonce, "0123456789abcdef") != "" {
			t.Errorf("nonce %q, want 32 lowercase hex digits", got.Nonce)
		}
		if v2 := encodeValue(h); v2 == v {
			t.Errorf("two values for %+v are equal: %s", h, v)
		}
		dh, ok := decodeValue(v)
		if valid := validHolder(h) == nil; ok != valid || (ok && dh != h) {
			t.Errorf("decodeValue(encodeValue(%+v)) = %+v, %v; want the holder back iff it is valid (%v)", h, dh, ok, valid)
		}
	}
}

// decodeJSON is decodeValue without its fast path.
func decodeJSON(s string) (tenantlock.Holder, bool) {
	var v lockValue
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return tenantlock.Holder{}, false
	}
	if v.Nonce == "" || validHolder(v.Holder) != nil {
		return tenantlock.Holder{}, false
	}
	return v.Holder, true
}

var decodeSeeds = []string{
	`{"planId":"p","taskId":"t","owner":"o","nonce":"n"}`,
	`{"planId":"p","taskId":"t","owner":"o","nonce":""}`,
	`{"planId":"p","taskId":"t","owner":"o","nonce":"n","owner":"x"}`,
	`{"planId":"p","taskId":"t","owner":"o","nonce":"n\"}`,
	`{"planId":"p","taskId":"t","owner":"o","nonce":"\u0041"}`,
	`{"planId":"p","taskId":"t","owner":"o","nonce":"n"} `,
	`{"planId":"p","taskId":"t","owner":"o","nonce":"n"}x`,
	`{"planId":"p","taskId":"t","owner":"o","nonce":"é"}`,
	`{"planId":"p","taskId":"t","owner":"o","nonce":"` + "\x01" + `"}`,
	`{"planId":"p","taskId":"t","owner":"o","nonce":"","nonce":"n"}`,
	`{"PLANID":"p","taskId":"t","owner":"o","nonce":"n"}`,
	`{"planId":"p","taskId":"t","owner":"o:x","nonce":"n"}`,
	`{"planId":"p","taskId":"t","owner":"","nonce":"n"}`,
	`{"planId":"p"}`,
	`somebody else`,
	``,
}

func TestDecodeValue(t *testing.T) {
	t.Parallel()
	for _, s := range append(decodeSeeds, encodeValue(holder("task-1"))) {
		h, ok := decodeValue(s)
		wh, wok := decodeJSON(s)
		if h != wh || ok != wok {
			t.Errorf("decodeValue(%q) = %+v, %v; encoding/json alone gives %+v, %v", s, h, ok, wh, wok)
		}
	}
}

func FuzzDecodeValue(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, ok := decodeValue(s)
		wh, wok := decodeJSON(s)
		if h != wh || ok != wok {
			t.Errorf("decodeValue(%q) = %+v, %v; encoding/json alone gives %+v, %v", s, h, ok, wh, wok)
		}
	})
}
