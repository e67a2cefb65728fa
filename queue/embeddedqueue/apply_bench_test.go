package embeddedqueue

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/queue"
)

// BenchmarkSendApply measures the writer's serial share of a send, which
// bounds the throughput of every send: one op is a group of 10 sends of
// 10 entries (200-byte bodies), as the gateway makes of a 100-job
// SubmitBatch, prepared as SendMany does and applied to the open
// transaction and the index under b.mu, as the writer does, their keys
// then indexed as the callers do. The log's write and sync are left out,
// and the transaction is committed (without fsync) every 100 groups, as a
// checkpoint would. apply-ns/job is the writer's CPU time per job (the
// thread's, so that others' work on a shared machine counts less),
// prepare-ns/job and publish-ns/job the callers' before and after it,
// log-B/job the size of the groups' redo log records.
func BenchmarkSendApply(b *testing.B) {
	for _, keys := range []bool{false, true} {
		b.Run(fmt.Sprintf("keys=%v", keys), func(b *testing.B) { benchmarkSendApply(b, keys) })
	}
}

func benchmarkSendApply(b *testing.B, keys bool) {
	const sends, entries = 10, 10
	path := filepath.Join(b.TempDir(), "q.db")
	spec := queue.QueueSpec{Name: "bench", VisibilityTimeout: time.Minute, Retention: time.Hour}
	be, err := Open(path, Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if err := be.EnsureQueues(context.Background(), []queue.QueueSpec{spec}); err != nil {
		b.Fatal(err)
	}
	if err := be.Close(); err != nil {
		b.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	// A backend with no writer: the benchmark takes the writer's place.
	w := &Backend{db: db, opts: Options{Logger: quiet, Clock: time.Now}, queues: map[string]*memQueue{spec.Name: newMemQueue(spec, 1)}, keys: newKeyIndex()}
	payload := make([]byte, 200)
	expires := time.Now().Add(time.Hour)
	value := ulid.Make().String()
	n := 0
	params := func() *queue.SendParams {
		p := &queue.SendParams{Queue: spec.Name, Entries: make([]queue.SendEntry, entries)}
		for i := range p.Entries {
			p.Entries[i] = queue.SendEntry{ID: strconv.Itoa(i), Body: payload}
			if keys {
				n++
				p.Entries[i].Key = &queue.StoredKey{Key: "tenant\x00" + strconv.Itoa(n), Value: value, Expires: expires}
			}
		}
		return p
	}
	tx, err := db.Begin(true)
	if err != nil {
		b.Fatal(err)
	}
	var log []byte
	var prepare, apply, publish time.Duration
	logBytes := 0
	todo := make([]*preparedSend, sends)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		start := threadCPU(b)
		for j := range todo {
			if todo[j], err = w.prepareSend(params()); err != nil {
				b.Fatal(err)
			}
		}
		keys := keyRecords(todo)
		mid := threadCPU(b)
		wt := &writeTx{tx: tx, now: time.Now().UnixNano(), log: log[:0]}
		w.mu.Lock()
		stored, err := w.applySends(wt, todo, keys)
		if err != nil {
			b.Fatal(err)
		}
		if err := wt.setSequences(); err != nil {
			b.Fatal(err)
		}
		w.mu.Unlock()
		log = wt.log
		logBytes += len(log)
		end := threadCPU(b)
		w.publishKeys(stored)
		apply += end - mid
		prepare += mid - start
		publish += threadCPU(b) - end
		if i%100 == 99 {
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
			if tx, err = db.Begin(true); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	_ = tx.Rollback()
	jobs := float64(b.N * sends * entries)
	b.ReportMetric(float64(apply.Nanoseconds())/jobs, "apply-ns/job")
	b.ReportMetric(float64(prepare.Nanoseconds())/jobs, "prepare-ns/job")
	b.ReportMetric(float64(publish.Nanoseconds())/jobs, "publish-ns/job")
	b.ReportMetric(float64(logBytes)/jobs, "log-B/job")
}

// threadCPU is the CPU time of the calling thread.
func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// BenchmarkLookupKeyWhileSending measures LookupKey (ns/op) while a
// sender keeps the writer busy with keyed groups of 10 sends of 10
// entries, in interval mode, so that the writer spends its time applying
// rather than syncing; sent-jobs/s is what the sender stored meanwhile,
// p99-ns and p99.9-ns the lookups' percentiles.
func BenchmarkLookupKeyWhileSending(b *testing.B) {
	ctx := context.Background()
	be, err := Open(filepath.Join(b.TempDir(), "q.db"), Options{Logger: quiet, SyncInterval: 10 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = be.Close() }()
	spec := queue.QueueSpec{Name: "bench", VisibilityTimeout: time.Minute, Retention: time.Hour}
	if err := be.EnsureQueues(ctx, []queue.QueueSpec{spec}); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 200)
	value := ulid.Make().String()
	expires := time.Now().Add(time.Hour)
	n := 0
	batch := func() []*queue.SendParams {
		sends := make([]*queue.SendParams, 10)
		for i := range sends {
			sends[i] = &queue.SendParams{Queue: spec.Name, Entries: make([]queue.SendEntry, 10)}
			for j := range sends[i].Entries {
				n++
				sends[i].Entries[j] = queue.SendEntry{ID: strconv.Itoa(j), Body: payload, Key: &queue.StoredKey{Key: "tenant\x00" + strconv.Itoa(n), Value: value, Expires: expires}}
			}
		}
		return sends
	}
	send := func() {
		_, errs := be.SendMany(ctx, batch())
		for _, err := range errs {
			if err != nil {
				b.Error(err)
			}
		}
	}
	send()
	stop, stopped := make(chan struct{}), make(chan int)
	go func() {
		sent := 0
		for {
			select {
			case <-stop:
				stopped <- sent
				return
			default:
			}
			send()
			sent += 100
		}
	}()
	probe := &queue.LookupKeyParams{Key: "tenant\x00" + "1"}
	took := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if k, err := be.LookupKey(ctx, probe); err != nil || k == nil {
			b.Fatal(k, err)
		}
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	close(stop)
	b.ReportMetric(float64(<-stopped)/b.Elapsed().Seconds(), "sent-jobs/s")
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(took[len(took)*999/1000].Nanoseconds()), "p99.9-ns")
}

// BenchmarkLookupKeys measures looking up keys that are not stored, as
// the gateway does for every new keyed job, in an index of a million
// keys: 100 at a time with LookupKeys, or one by one with LookupKey. One
// op is one key.
func BenchmarkLookupKeys(b *testing.B) {
	be, err := Open(filepath.Join(b.TempDir(), "q.db"), Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = be.Close() }()
	expires := time.Now().Add(time.Hour).UnixNano()
	be.keysMu.Lock()
	for i := range 1_000_000 {
		be.keys.put("tenant\x00stored-"+strconv.Itoa(i), ulid.Make().String(), expires)
	}
	be.keysMu.Unlock()
	keys := make([]string, 100)
	n := 0
	next := func() {
		for i := range keys {
			n++
			keys[i] = "tenant\x00new-" + strconv.Itoa(n)
		}
	}
	b.Run("LookupKeys", func(b *testing.B) {
		for i := 0; i < b.N; i += len(keys) {
			next()
			found, err := be.LookupKeys(b.Context(), &queue.LookupKeysParams{Keys: keys})
			if err != nil || len(found) != len(keys) {
				b.Fatal(len(found), err)
			}
		}
	})
	b.Run("LookupKey", func(b *testing.B) {
		var p queue.LookupKeyParams
		for i := 0; i < b.N; i += len(keys) {
			next()
			for _, k := range keys {
				p.Key = k
				if _, err := be.LookupKey(b.Context(), &p); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
