package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConsoleLogNoColourInFiles: DEPLOYCOORD_LOG_FORMAT=console writes
// colour codes only to a terminal; a file or a pipe gets plain text.
func TestConsoleLogNoColourInFiles(t *testing.T) {
	t.Parallel()
	c := Config{LogFormat: "console", LogLevel: "info", InstanceID: "log-1"}
	f, err := os.Create(filepath.Join(t.TempDir(), "deploycoord.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf bytes.Buffer
	for _, w := range []io.Writer{f, &buf} {
		log := newLogger(w, c)
		log.Warn().Str("tenant_id", "t-1").Msg("something to see")
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"file": string(b), "buffer": buf.String()} {
		if !strings.Contains(out, "something to see") || !strings.Contains(out, "tenant_id=t-1") {
			t.Errorf("console log to a %s: %q, want the message and its fields", name, out)
		}
		if strings.Contains(out, "\x1b[") {
			t.Errorf("console log to a %s holds colour codes: %q", name, out)
		}
	}
}
