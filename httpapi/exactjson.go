package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/deploycoord/deploycoord/task"
)

// encoding/json matches object keys to struct fields case-insensitively
// ("tenantID" fills TenantID, "NAME" fills Name) and its unknown-field error
// does not say where the key was. checkFieldNames walks a request body along
// the type it decodes into first and refuses any key that is not exactly a
// field's JSON name, naming its path (stages[1].tImeout) and, when only the
// case differs, the name meant.

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	stageSpecType   = reflect.TypeFor[task.StageSpec]()
	retryPolicyType = reflect.TypeFor[task.RetryPolicy]()
)

// checkFieldNames checks the object keys of data (one JSON value) against
// t. A body that is not valid JSON passes: the decoder reports it.
func checkFieldNames(data []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	return walkNames("", v, t)
}

func walkNames(path string, v any, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == stageSpecType {
		return walkStage(path, v)
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		// A type decoding itself (a duration) checks its own input.
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		fields := jsonNames(t)
		for _, k := range slices.Sorted(mapKeys(obj)) {
			ft, ok := fields[k]
			if !ok {
				return unknownName(joinPath(path, k), k, fields)
			}
			if err := walkNames(joinPath(path, k), obj[k], ft); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		arr, _ := v.([]any)
		for i, e := range arr {
			if err := walkNames(fmt.Sprintf("%s[%d]", path, i), e, t.Elem()); err != nil {
				return err
			}
		}
	case reflect.Map:
		obj, _ := v.(map[string]any)
		for _, k := range slices.Sorted(mapKeys(obj)) {
			if err := walkNames(joinPath(path, k), obj[k], t.Elem()); err != nil {
				return err
			}
		}
	}
	return nil
}

// walkStage checks a stage: its own keys exactly, retry's fields; the key
// named after the kind holds the kind's settings, which the stage kind
// checks exactly when the plan is compiled.
func walkStage(path string, v any) error {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	kind, _ := obj["kind"].(string)
	own := map[string]reflect.Type{"name": nil, "kind": nil, "timeout": nil, "retry": retryPolicyType}
	for _, k := range slices.Sorted(mapKeys(obj)) {
		ft, known := own[k]
		switch {
		case known && ft != nil:
			if err := walkNames(joinPath(path, k), obj[k], ft); err != nil {
				return err
			}
		case known, k == kind && kind != "":
		default:
			if kind != "" {
				own[kind] = nil
			}
			return unknownName(joinPath(path, k), k, own)
		}
	}
	return nil
}

// jsonNames maps the JSON names of t's fields (those of embedded structs
// without a name of their own included) to their types.
func jsonNames(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" && !strings.HasPrefix(tag, "-,") {
			continue
		}
		ft := sf.Type
		if sf.Anonymous && name == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for k, v := range jsonNames(et) {
					if _, ok := out[k]; !ok {
						out[k] = v
					}
				}
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		out[name] = ft
	}
	return out
}

// unknownName is the error for key at path: the name meant when only the
// case differs, else the names known there.
func unknownName(path, key string, known map[string]reflect.Type) error {
	names := slices.Sorted(mapKeys(known))
	for _, n := range names {
		if strings.EqualFold(n, key) {
			return badRequest(fmt.Sprintf("unknown field %s: field names are case-sensitive, did you mean %s?",
				task.Quote(path), task.Quote(n)))
		}
	}
	return badRequest(fmt.Sprintf("unknown field %s (known there: %s)", task.Quote(path), strings.Join(names, ", ")))
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
