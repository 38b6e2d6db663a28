package httpapi_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestAPIDocMatchesOpenAPI: docs/api.md, the contract in words, and
// docs/openapi.yaml describe the same operations — every method and path of
// one is on the other — and docs/ stands alone: no page points at files
// outside the repository.
func TestAPIDocMatchesOpenAPI(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	var inSpec []string
	for path, ops := range spec.Paths {
		for m := range ops {
			switch m {
			case "get", "head", "post", "put", "patch", "delete":
				inSpec = append(inSpec, strings.ToUpper(m)+" "+path)
			}
		}
	}
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	var inDoc []string
	for _, m := range regexp.MustCompile("(?m)^`((?:GET|HEAD|POST|PUT|PATCH|DELETE) /[^`?\\s]*)`").FindAllStringSubmatch(string(doc), -1) {
		inDoc = append(inDoc, m[1])
	}
	slices.Sort(inSpec)
	slices.Sort(inDoc)
	for _, op := range inSpec {
		if !slices.Contains(inDoc, op) {
			t.Errorf("docs/openapi.yaml has %s; docs/api.md does not describe it (a paragraph starting with `%s`)", op, op)
		}
	}
	for i, op := range inDoc {
		if !slices.Contains(inSpec, op) {
			t.Errorf("docs/api.md describes %s, which docs/openapi.yaml does not have", op)
		}
		if i > 0 && inDoc[i-1] == op {
			t.Errorf("docs/api.md describes %s twice", op)
		}
	}
	pages, err := os.ReadDir("../docs")
	if err != nil {
		t.Fatal(err)
	}
	outside := regexp.MustCompile(`DESIGN\.md|\bAPI\.md|DESIGN §|\.\./shared|\.\./\.\./`)
	for _, p := range pages {
		if p.IsDir() {
			continue
		}
		b, err := os.ReadFile("../docs/" + p.Name())
		if err != nil {
			t.Fatal(err)
		}
		if m := outside.Find(b); m != nil {
			t.Errorf("docs/%s points outside the repository (%q): docs/ must stand alone", p.Name(), m)
		}
	}
}
