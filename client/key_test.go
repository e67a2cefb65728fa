package client

import (
	"strings"
	"sync"
	"testing"
)

// TestNewIdempotencyKey: keys from many goroutines are all distinct and
// share this process's random prefix.
func TestNewIdempotencyKey(t *testing.T) {
	t.Parallel()
	const goroutines, each = 8, 2000
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			keys := make([]string, each)
			for i := range keys {
				keys[i] = NewIdempotencyKey()
			}
			mu.Lock()
			defer mu.Unlock()
			for _, k := range keys {
				if seen[k] {
					t.Errorf("key %q generated twice", k)
				}
				seen[k] = true
			}
		})
	}
	wg.Wait()
	prefix := keyPrefix()
	if len(prefix) != 17 {
		t.Fatalf("prefix %q: want 16 random characters and a dash", prefix)
	}
	for k := range seen {
		if !strings.HasPrefix(k, prefix) || len(k) == len(prefix) {
			t.Fatalf("key %q: want the prefix %q and a counter", k, prefix)
		}
	}
}
