package httpapi_test

import (
	"os"
	"testing"

	"github.com/deploycoord/deploycoord/internal/redistest"
)

// TestMain stops the Redis Cluster the cluster backend of
// redistest.Backends started, once every test has run.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }
