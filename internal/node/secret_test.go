package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretFileRefusesEmptyFile: a key file that exists but holds no key
// (made by touch, or a secret mounted empty) is an error naming the file.
// It gave the empty key: the admin API and the console then accepted no
// key at all (an empty bearer token is never sent), and the development
// worker key no worker, with nothing in the log to say why.
func TestSecretFileRefusesEmptyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, content := range []string{"", "\n", "  \t\n"} {
		path := filepath.Join(dir, "admin-key")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		key, err := SecretFile(path, "sk_admin_")
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "empty") {
			t.Errorf("file %q: key %q, error %v; want an error naming the empty file", content, key, err)
		}
	}
	// A missing file gets a new key, kept for the next start.
	path := filepath.Join(dir, "new", "worker-key")
	key, err := SecretFile(path, "sk_worker_")
	if err != nil || !strings.HasPrefix(key, "sk_worker_") {
		t.Fatalf("new key %q, %v", key, err)
	}
	if again, err := SecretFile(path, "sk_worker_"); err != nil || again != key {
		t.Fatalf("second read %q, %v; want %q", again, err, key)
	}
}
