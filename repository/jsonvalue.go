package repository

import (
	"encoding/json"
	"math"
	"unicode/utf8"

	"github.com/deploycoord/deploycoord/internal/jsonenc"
)

// Values of the JSON kind (params, event data, stage outputs) are stored as
// JSON by Redis and deep-copied by the memory store as they come back from
// their JSON form. For the types encoding/json decodes into (nil, bool,
// float64, string, []any, map[string]any) a walk does both without
// encoding: checkJSON and copyJSON fall back to encoding/json for anything
// else, so the result is always the one of a round trip.

// jsonDepthMax bounds the walks (a deeper value, or a cycle, goes through
// encoding/json, which reports the cycle).
const jsonDepthMax = jsonenc.DepthMax

// checkJSON returns the error json.Marshal(v) returns, without encoding
// when v is made of plain JSON types.
func checkJSON(v any) error {
	if plainJSON(v, 0) {
		return nil
	}
	_, err := json.Marshal(v)
	return err
}

func plainJSON(v any, depth int) bool {
	if depth > jsonDepthMax {
		return false
	}
	switch x := v.(type) {
	case nil, bool, string:
		return true
	case float64:
		return !math.IsInf(x, 0) && !math.IsNaN(x)
	case map[string]any:
		for _, e := range x {
			if !plainJSON(e, depth+1) {
				return false
			}
		}
		return true
	case []any:
		for _, e := range x {
			if !plainJSON(e, depth+1) {
				return false
			}
		}
		return true
	}
	return false
}

// copyParams returns params as they come back from their JSON form (nil
// stays nil).
func copyParams(p map[string]any) (map[string]any, error) {
	if p == nil {
		return nil, nil
	}
	if c, ok := copyJSON(p, 0); ok {
		m, _ := c.(map[string]any)
		return m, nil
	}
	return normalize(p)
}

// copyJSON returns a deep copy of v equal to what a JSON round trip into an
// any gives, and true; false when v is not made of plain JSON types with
// valid UTF-8 strings (a round trip would change it: the caller uses
// normalize).
func copyJSON(v any, depth int) (any, bool) {
	if depth > jsonDepthMax {
		return nil, false
	}
	switch x := v.(type) {
	case nil, bool:
		return x, true
	case string:
		return x, utf8.ValidString(x)
	case float64:
		return x, !math.IsInf(x, 0) && !math.IsNaN(x)
	case map[string]any:
		if x == nil {
			return nil, true
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			if !utf8.ValidString(k) {
				return nil, false
			}
			c, ok := copyJSON(e, depth+1)
			if !ok {
				return nil, false
			}
			out[k] = c
		}
		return out, true
	case []any:
		if x == nil {
			return nil, true
		}
		out := make([]any, len(x))
		for i, e := range x {
			c, ok := copyJSON(e, depth+1)
			if !ok {
				return nil, false
			}
			out[i] = c
		}
		return out, true
	}
	return nil, false
}
