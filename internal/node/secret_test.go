package node

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sluice-dev/sluice/tenant"
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

// TestShortKeysRefused: an admin key shorter than tenant.MinKeyLen, from
// --admin-key, SLUICE_ADMIN_KEY or the key file, is refused saying where
// it came from and what to do; so is a short key in any key file (the
// worker key's too). A 5-character admin key was taken, where tenant and
// worker keys that short are refused (found in a walkthrough). (Not
// parallel: it sets the environment.)
func TestShortKeysRefused(t *testing.T) {
	tests := []struct {
		name, flag, env, file string
		want                  string // in the error; "" when the key is taken
	}{
		{"flag", "short", "", "", "--admin-key (on the command line, or admin-key: in the --config file) is 5 characters, and an admin key needs at least 8: give a longer one, or leave it out to use (and create) "},
		{"environment", "short", "short", "", "SLUICE_ADMIN_KEY is 5 characters, and an admin key needs at least 8: set a longer one, or unset it to use (and create) "},
		{"file", "", "", "short\n", "admin-key holds a key of 5 characters, and a key needs at least 8: write a longer one in it, or delete it to have one made"},
		{"seven characters", "1234567", "", "", "is 7 characters"},
		{"eight characters", "12345678", "", "", ""},
		{"file of eight", "", "", " 12345678\n", ""},
		{"flag over a short file", "a-long-admin-key", "", "short\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.file != "" {
				if err := os.WriteFile(filepath.Join(dir, "admin-key"), []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("SLUICE_ADMIN_KEY", tt.env)
			key, err := AdminKey(tt.flag, dir)
			if tt.want == "" {
				if err != nil || len(key) < tenant.MinKeyLen {
					t.Fatalf("key %q, %v; want it taken", key, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("key %q, %v; want an error saying %q", key, err, tt.want)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "worker-key")
	if err := os.WriteFile(path, []byte("wk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if key, err := SecretFile(path, "sk_worker_"); err == nil || !strings.Contains(err.Error(), path+" holds a key of 2 characters") {
		t.Errorf("short worker key file: %q, %v; want it refused", key, err)
	}
}

// TestSecretFileFailedWriteLeavesNoFile makes a key file in a child
// process whose file size limit (RLIMIT_FSIZE, which root is held to as
// well) stops its write: at the first byte, as on a disk that is full at
// the first start, or within the key. The start fails naming the file
// once, and leaves no file behind, so the next start simply makes one.
// os.WriteFile left the file empty (every later start refused it:
// "admin-key is empty") or holding part of a key, and its error named
// the file twice (found by a tester filling the disk).
func TestSecretFileFailedWriteLeavesNoFile(t *testing.T) {
	if path := os.Getenv("SLUICE_TEST_SECRET_FILE"); path != "" {
		limit, err := strconv.ParseUint(os.Getenv("SLUICE_TEST_FSIZE"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
			t.Fatal(err)
		}
		key, err := SecretFile(path, "sk_admin_")
		fmt.Printf("key %q\nerror: %v\n", key, err)
		return
	}
	t.Parallel()
	for _, tt := range []struct {
		name  string
		limit uint64
	}{
		{"full at the first byte", 0},
		{"full within the key", 12},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "admin-key")
			cmd := exec.Command(os.Args[0], "-test.run=^TestSecretFileFailedWriteLeavesNoFile$", "-test.count=1")
			cmd.Env = append(os.Environ(), "SLUICE_TEST_SECRET_FILE="+path, fmt.Sprintf("SLUICE_TEST_FSIZE=%d", tt.limit))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			want := "error: write " + path + ": file too large"
			if !strings.Contains(string(out), want) || strings.Count(string(out), path) != 1 {
				t.Errorf("child said:\n%s\nwant %q, naming the file once", out, want)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
				t.Errorf("the failed write left %s holding %q", e.Name(), data)
			}
			// The next start makes the key.
			if key, err := SecretFile(path, "sk_admin_"); err != nil || !strings.HasPrefix(key, "sk_admin_") {
				t.Errorf("next start: key %q, %v", key, err)
			}
		})
	}
}
