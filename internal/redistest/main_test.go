package redistest_test

import (
	"os"
	"testing"

	"github.com/deploycoord/deploycoord/internal/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }
