// Package jsonenc appends JSON to byte slices exactly as encoding/json's
// json.Marshal writes it, without its reflection: the hand-written encoders
// of the values every task write stores (repository) and of the answers the
// API serves most (httpapi) are built from these. Each is compared with
// json.Marshal by the tests of this package and of its users; anything not
// of the common JSON kinds goes through encoding/json itself.
package jsonenc

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// DepthMax bounds the nesting Value walks itself; a deeper value (or a
// cycle) goes through encoding/json, which reports the cycle.
const DepthMax = 64

// Time appends t as time.Time.MarshalJSON writes it, or the error it gives
// (a year outside 0–9999, a zone offset of 24 hours or more).
func Time(b []byte, t time.Time) ([]byte, error) {
	out, err := t.AppendText(append(b, '"'))
	if err != nil {
		_, err = t.MarshalJSON() // its own wording of the same error
		return b, err
	}
	return append(out, '"'), nil
}

// Value appends v as json.Marshal(v) writes it: values of the common JSON
// kinds are encoded here, anything else (and a value nested deeper than
// DepthMax) by encoding/json.
func Value(b []byte, v any) ([]byte, error) {
	return value(b, v, 0)
}

func value(b []byte, v any, depth int) ([]byte, error) {
	if depth > DepthMax {
		return appendMarshal(b, v)
	}
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return String(b, x), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return appendMarshal(b, v)
		}
		return Float(b, x), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case int32:
		return strconv.AppendInt(b, int64(x), 10), nil
	case uint64:
		return strconv.AppendUint(b, x, 10), nil
	case *int:
		if x == nil {
			return append(b, "null"...), nil
		}
		return strconv.AppendInt(b, int64(*x), 10), nil
	case map[string]any:
		if x == nil {
			return append(b, "null"...), nil
		}
		var small [16]string
		keys := small[:0]
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		var err error
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(String(b, k), ':')
			if b, err = value(b, x[k], depth+1); err != nil {
				return b, err
			}
		}
		return append(b, '}'), nil
	case []any:
		if x == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		var err error
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = value(b, e, depth+1); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	case []string:
		return Strings(b, x), nil
	}
	return appendMarshal(b, v)
}

func appendMarshal(b []byte, v any) ([]byte, error) {
	q, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	return append(b, q...), nil
}

// Float appends a finite f as encoding/json does (ES6 number
// formatting).
func Float(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// Strings appends ss as a JSON array of strings ("null" for nil).
func Strings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = String(b, s)
	}
	return append(b, ']')
}

const jsonHex = "0123456789abcdef"

// String appends s quoted as encoding/json does by default:
// HTML-safe (<, > and & as \u003c, \u003e, \u0026), control characters
// escaped, invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func String(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', jsonHex[c>>4], jsonHex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', jsonHex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
