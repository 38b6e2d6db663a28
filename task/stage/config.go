package stage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/deploycoord/deploycoord/task"
)

// DecodeConfig decodes spec.Config into dst, a pointer to a struct with json
// tags, strictly: keys must match a field's tag exactly (unknown keys are
// errors, with no case folding), nested structs are decoded just as strictly,
// and a missing or null Config leaves dst as it is. Errors are *ConfigError
// wrapping ErrInvalid, with Field set to the key's path (e.g. "http.poll.interval").
// Custom kinds use it to read their config the way the built-in kinds do.
func DecodeConfig(spec task.StageSpec, dst any) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("stage: DecodeConfig wants a pointer to a struct, got %T", dst)
	}
	return decodeObject(spec.Kind, spec.Config, v.Elem())
}

func isNull(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func decodeObject(path string, raw json.RawMessage, v reflect.Value) error {
	if isNull(raw) {
		return nil
	}
	if bytes.TrimSpace(raw)[0] != '{' {
		return invalid(path, "want a JSON object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return invalid(path, "want a JSON object: %s", clean(err.Error(), 200))
	}
	fields, names := jsonFields(v.Type())
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		if _, ok := fields[k]; !ok {
			return invalid(path, "unknown field %s (known: %s)", task.Quote(k), strings.Join(names, ", "))
		}
	}
	for _, k := range keys {
		f := v.Field(fields[k])
		p := path + "." + k
		switch {
		case f.Kind() == reflect.Struct && f.Type().PkgPath() == v.Type().PkgPath() && !f.Addr().Type().Implements(unmarshalerType):
			if err := decodeObject(p, m[k], f); err != nil {
				return err
			}
		case f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Struct && !f.Type().Implements(unmarshalerType):
			if isNull(m[k]) {
				f.SetZero()
				continue
			}
			n := reflect.New(f.Type().Elem())
			if err := decodeObject(p, m[k], n.Elem()); err != nil {
				return err
			}
			f.Set(n)
		default:
			if err := json.Unmarshal(m[k], f.Addr().Interface()); err != nil {
				return invalid(p, "%s", describeJSONError(err))
			}
		}
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// jsonFields maps the json names of t's exported fields to their index.
func jsonFields(t reflect.Type) (map[string]int, []string) {
	fields := make(map[string]int, t.NumField())
	var names []string
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		fields[name] = i
		names = append(names, name)
	}
	slices.Sort(names)
	return fields, names
}

func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("want %s, got JSON %s", goTypeName(te.Type), clean(te.Value, 40))
	}
	return clean(err.Error(), 200)
}

func goTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(goTypeName(t.Elem()), "a "), "an ") + "s"
	case reflect.Map:
		return "an object of " + strings.TrimPrefix(strings.TrimPrefix(goTypeName(t.Elem()), "a "), "an ") + "s"
	}
	return t.String()
}

// clean makes s safe for an error message or a failure reason: invalid UTF-8
// replaced, control characters escaped, and cut to at most limit bytes
// (an ellipsis marks a cut).
func clean(s string, limit int) string {
	var b strings.Builder
	fit := 0 // length of b at the last rune boundary that leaves room for "…"
	for i, r := range s {
		var piece string
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			piece = `\ufffd`
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0x2028 || r == 0x2029 || unicode.Is(unicode.Bidi_Control, r):
			piece = strings.Trim(strconv.QuoteRune(r), "'")
		default:
			piece = string(r)
		}
		if b.Len()+len("…") <= limit {
			fit = b.Len()
		}
		if b.Len()+len(piece) > limit {
			return b.String()[:fit] + "…"
		}
		b.WriteString(piece)
	}
	return b.String()
}

// tail returns at most the last limit bytes of b as cleaned text, an
// ellipsis in front when cut.
func tail(b []byte, limit int) string {
	s := string(b)
	cut := false
	if len(s) > limit {
		s, cut = s[len(s)-limit:], true
	}
	for {
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s, cut = s[1:], true
		}
		out := clean(s, len(s)*6+1)
		if !cut && len(out) <= limit {
			return out
		}
		if len(out)+len("…") <= limit {
			return "…" + out
		}
		// Escaping grew the text: drop a rune from the front and retry.
		_, n := utf8.DecodeRuneInString(s)
		s, cut = s[n:], true
	}
}
