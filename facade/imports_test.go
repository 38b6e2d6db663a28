package facade_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestRedisClientNotLinked: facade, httpapi and cmd/deployctl do not link
// go-redis nor redsync, directly or through anything they import (the import
// rules of docs/architecture.md: those live in repository, tenantlock/redislock and cmd/deploycoord;
// facade declares the Store, Locker and Lease it needs). cmd/deploycoord,
// which wires the Redis store and lock, is the control: it must link both.
// A failure names the chain of imports that brought the package in.
func TestRedisClientNotLinked(t *testing.T) {
	t.Parallel()
	const mod = "github.com/deploycoord/deploycoord/"
	redisClients := []string{"github.com/redis/go-redis/", "github.com/go-redsync/redsync/"}
	tests := []struct {
		root  string
		links bool
	}{
		{mod + "facade", false},
		{mod + "httpapi", false},
		{mod + "cmd/deployctl", false},
		{mod + "cmd/deploycoord", true},
	}
	roots := make([]string, len(tests))
	for i, tt := range tests {
		roots[i] = tt.root
	}
	imports := listImports(t, roots)
	for _, tt := range tests {
		for _, client := range redisClients {
			chain := importChain(imports, tt.root, func(p string) bool { return strings.HasPrefix(p, client) })
			switch {
			case tt.links && chain == nil:
				t.Errorf("%s does not link %s*: the check walks the wrong graph", tt.root, client)
			case !tt.links && chain != nil:
				t.Errorf("%s links %s: %s", tt.root, chain[len(chain)-1], strings.Join(chain, " → "))
			}
		}
	}
}

// listImports returns the import graph of roots and everything they depend
// on (not their tests), as go list reports it.
func listImports(t *testing.T, roots []string) map[string][]string {
	t.Helper()
	// go test puts its own GOROOT/bin first in PATH.
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	cmd := exec.Command(goTool, append([]string{"list", "-deps", "-json=ImportPath,Imports"}, roots...)...)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		graph[p.ImportPath] = p.Imports
	}
	for _, r := range roots {
		if _, ok := graph[r]; !ok {
			t.Fatalf("go list did not list %s", r)
		}
	}
	return graph
}

// importChain returns the shortest chain of imports from root to a package
// that match accepts, root first; nil when there is none.
func importChain(graph map[string][]string, root string, match func(string) bool) []string {
	parent := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if match(p) {
			var chain []string
			for ; p != ""; p = parent[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, next := range graph[p] {
			if _, seen := parent[next]; !seen {
				parent[next] = p
				queue = append(queue, next)
			}
		}
	}
	return nil
}
