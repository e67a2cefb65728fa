package embeddedqueue

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/oklog/ulid/v2"
)

func TestKeyIndex(t *testing.T) {
	t.Parallel()
	id := ulid.Make().String()
	x := newKeyIndex()
	steps := []struct {
		do          func()
		key         string
		wantValue   string
		wantExpires int64
		wantOK      bool
	}{
		{do: func() { x.put("a\x00k1", id, 10) }, key: "a\x00k1", wantValue: id, wantExpires: 10, wantOK: true},
		{key: "b\x00k1", wantOK: false}, // another tenant's key
		// Values that are not canonical ULIDs are kept as they are.
		{do: func() { x.put("a\x00k2", "job-2", 20) }, key: "a\x00k2", wantValue: "job-2", wantExpires: 20, wantOK: true},
		{do: func() { x.put("a\x00k3", "01arz3ndektsv4rrffq69g5fav", 30) }, key: "a\x00k3", wantValue: "01arz3ndektsv4rrffq69g5fav", wantExpires: 30, wantOK: true},
		// A key stored again replaces its value, in either form.
		{do: func() { x.put("a\x00k2", id, 40) }, key: "a\x00k2", wantValue: id, wantExpires: 40, wantOK: true},
		{do: func() { x.put("a\x00k1", "other", 50) }, key: "a\x00k1", wantValue: "other", wantExpires: 50, wantOK: true},
		// forget drops a key only at the expiry it was recorded with.
		{do: func() { x.forget("a\x00k1", 10) }, key: "a\x00k1", wantValue: "other", wantExpires: 50, wantOK: true},
		{do: func() { x.forget("a\x00k1", 50) }, key: "a\x00k1", wantOK: false},
		{do: func() { x.forget("a\x00k2", 40) }, key: "a\x00k2", wantOK: false},
	}
	for i, s := range steps {
		if s.do != nil {
			s.do()
		}
		v, exp, ok := x.get(s.key)
		if v != s.wantValue || exp != s.wantExpires || ok != s.wantOK {
			t.Fatalf("step %d: get %q = %q, %d, %v; want %q, %d, %v", i, s.key, v, exp, ok, s.wantValue, s.wantExpires, s.wantOK)
		}
	}
	if x.len() != 1 || len(x.other) != 1 {
		t.Fatalf("%d keys, %d string values left; want 1 and 1 (k3)", x.len(), len(x.other))
	}
}

// BenchmarkKeyIndexMemory reports the key index's heap bytes per key, for
// 30-byte keys (a tenant and a generated key) whose values are job ids.
func BenchmarkKeyIndexMemory(b *testing.B) {
	const n = 1_000_000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = ulid.Make().String()
	}
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		x := newKeyIndex()
		for i, id := range ids {
			x.put(fmt.Sprintf("tenant-0001\x00%018d", i), id, int64(i))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/key")
		runtime.KeepAlive(x)
		if x.len() != n {
			b.Fatal(x.len())
		}
	}
}

// TestKeyIndexShrinksAfterABurst forgets all but a few keys of a burst:
// the index's memory must follow the keys it still holds, not the most
// it ever held (Go maps never give back their buckets). Not parallel: it
// reads the heap's size.
func TestKeyIndexShrinksAfterABurst(t *testing.T) {
	const n, left = 200_000, 10
	id := ulid.Make().String()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	x := newKeyIndex()
	for i := range n {
		x.put(fmt.Sprint("t\x00key-", i), id, int64(i))
	}
	for i := range n - left {
		x.forget(fmt.Sprint("t\x00key-", i), int64(i))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	runtime.KeepAlive(x)
	if x.len() != left {
		t.Fatalf("%d keys left, want %d", x.len(), left)
	}
	if v, _, ok := x.get(fmt.Sprint("t\x00key-", n-1)); !ok || v != id {
		t.Fatalf("the last key: %q, %t; want %q", v, ok, id)
	}
	if held > 1<<20 {
		t.Fatalf("the index of %d keys, once %d, holds %d KiB", left, n, held>>10)
	}
}
