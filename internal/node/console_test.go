package node

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConsoleReadOnlyKeyLength: a read-only key shorter than the other
// keys' minimum is refused at start, naming the file; any length was
// taken, one letter too (found in a review).
func TestConsoleReadOnlyKeyLength(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		key, wantErr string
	}{
		{"a\n", "holds a key of 1 characters: give one of at least 8"},
		{"  short7 \n", "holds a key of 6 characters"},
		{"read-only-key-1\n", ""},
	} {
		path := filepath.Join(t.TempDir(), "ro.key")
		if err := os.WriteFile(path, []byte(tt.key), 0o600); err != nil {
			t.Fatal(err)
		}
		f := ConsoleFlags{Enabled: true, ReadOnlyKeyFile: path, SampleInterval: time.Second}
		_, err := f.ConsoleHook("admin-key-1", false, slog.New(slog.DiscardHandler), nil)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("key %q: %v", tt.key, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), path)):
			t.Errorf("key %q: %v, want an error naming %s and saying %q", tt.key, err, path, tt.wantErr)
		}
	}
}
