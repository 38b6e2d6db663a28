package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/deploycoord/deploycoord/task"
)

// pipelinesFile is the YAML file of operator-defined pipelines:
//
//	pipelines:
//	  standard-deploy:
//	    stages:
//	      - name: push-config
//	        kind: http
//	        timeout: 30s
//	        retry: {maxAttempts: 3, backoff: exponential, baseDelay: 1s, maxDelay: 30s, jitter: 0.2}
//	        http: {method: POST, url: "https://config.internal/tenants/{{.TenantID}}/push"}
//
// Stages use the same fields as inline stages in POST /v1/plans.
type pipelinesFile struct {
	Pipelines map[string]struct {
		Stages []task.StageSpec `json:"stages"`
	} `json:"pipelines"`
}

// maxPipelinesFile bounds the pipelines file read at start.
const maxPipelinesFile = 4 << 20

// LoadPipelines reads a pipelines YAML file. Unknown fields are errors, as in
// the API, so a typo does not silently drop a setting.
func LoadPipelines(path string) (map[string][]task.StageSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pipelines: %w", err)
	}
	if len(data) > maxPipelinesFile {
		return nil, fmt.Errorf("pipelines: %s is %d bytes, at most %d", path, len(data), maxPipelinesFile)
	}
	out, err := ParsePipelines(data)
	if err != nil {
		return nil, fmt.Errorf("pipelines: %s: %w", path, err)
	}
	return out, nil
}

// ParsePipelines parses the YAML form of pipelinesFile.
func ParsePipelines(data []byte) (map[string][]task.StageSpec, error) {
	js, err := YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	var f pipelinesFile
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, err
	}
	if len(f.Pipelines) == 0 {
		return nil, fmt.Errorf("no pipelines defined (want a top-level \"pipelines:\" map)")
	}
	out := make(map[string][]task.StageSpec, len(f.Pipelines))
	for name, p := range f.Pipelines {
		out[name] = p.Stages
	}
	return out, nil
}

// YAMLToJSON converts a YAML document to JSON, so YAML input is decoded by
// the same strict JSON decoders as API requests.
func YAMLToJSON(data []byte) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	v, err := jsonable(v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func jsonable(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			j, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			x[k] = j
		}
		return x, nil
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("yaml: map key %v is not a string", k)
			}
			j, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			m[ks] = j
		}
		return m, nil
	case []any:
		for i, e := range x {
			j, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			x[i] = j
		}
		return x, nil
	}
	return v, nil
}
