package metrics

import (
	"container/heap"
	"slices"
	"sync"
	"time"
)

// topK decides which tenants get their own label value: an approximate
// heavy-hitters tracker in bounded memory, whatever the number of tenants.
//
// It keeps at most k "labeled" tenants and a Space-Saving summary (Metwally,
// Agrawal and El Abbadi, 2005) of at most capacity candidates. A labeled
// tenant's volume is counted exactly. A candidate's count is an upper bound:
// a tenant not in the summary takes the place of the candidate with the
// smallest count and inherits that count as its possible error, so any
// tenant whose share of the traffic exceeds 1/capacity is sure to be in the
// summary. Every refresh period the k tenants with the highest guaranteed
// volume (count − error) among the labeled tenants and the candidates
// become the labeled set, ties keeping the current holder, and every count
// then halves, so the ranking follows recent volume (half-life one refresh
// period). A refresh runs at the first observation due; it halves the
// counts once for each period since the last, idle ones included. Labels
// change only at a refresh, except that while fewer than k tenants have
// been seen each new tenant is labeled at once, so a deployment with at
// most k tenants sees every tenant from its first job.
//
// Memory: k + capacity entries. Cost per observation: a map lookup and,
// for a candidate, a heap fix (O(log capacity)); a refresh sorts k +
// capacity entries.
type topK struct {
	k        int
	capacity int
	refresh  time.Duration
	now      func() time.Time
	// unlabel is called, under mu, for each tenant that loses its label.
	unlabel func(tenant string)

	mu      sync.Mutex
	next    time.Time // next refresh; zero before the first observation
	labeled map[string]*entry
	cands   map[string]*entry
	heap    entryHeap // the candidates, smallest count first
}

type entry struct {
	tenant string
	count  uint64 // observations, an upper bound for candidates
	err    uint64 // how much of count may belong to tenants it replaced
	idx    int    // position in the heap
}

func newTopK(k int, refresh time.Duration, now func() time.Time, unlabel func(string)) *topK {
	return &topK{
		k:        k,
		capacity: max(8*k, 64),
		refresh:  refresh,
		now:      now,
		unlabel:  unlabel,
		labeled:  make(map[string]*entry, k),
		cands:    make(map[string]*entry),
	}
}

// do counts one observation of tenant and calls fn with the tenant's label
// value: the tenant itself if labeled, else OtherValue. fn runs under the
// tracker's lock, so no label is taken away while fn uses it.
func (t *topK) do(tenant string, n int, fn func(label string)) {
	if t.k == 0 || tenant == "" || tenant == OtherValue {
		fn(OtherValue)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	switch {
	case t.next.IsZero():
		t.next = now.Add(t.refresh)
	case !now.Before(t.next):
		// One halving per refresh period that passed, the idle ones
		// with no submit to run a refresh included.
		halvings := 1
		if t.refresh > 0 {
			halvings += int(min(now.Sub(t.next)/t.refresh, 63))
		}
		t.rebalance(halvings)
		t.next = now.Add(t.refresh)
	}
	fn(t.observe(tenant, uint64(n)))
}

func (t *topK) observe(tenant string, n uint64) string {
	if e := t.labeled[tenant]; e != nil {
		e.count += n
		return tenant
	}
	if e := t.cands[tenant]; e != nil {
		e.count += n
		heap.Fix(&t.heap, e.idx)
		return OtherValue
	}
	if len(t.labeled) < t.k {
		t.labeled[tenant] = &entry{tenant: tenant, count: n, idx: -1}
		return tenant
	}
	if len(t.heap) < t.capacity {
		e := &entry{tenant: tenant, count: n}
		t.cands[tenant] = e
		heap.Push(&t.heap, e)
		return OtherValue
	}
	// Space-Saving: replace the smallest candidate.
	e := t.heap[0]
	delete(t.cands, e.tenant)
	e.tenant, e.err = tenant, e.count
	e.count += n
	t.cands[tenant] = e
	heap.Fix(&t.heap, 0)
	return OtherValue
}

// rebalance picks the new labeled set, unlabels the tenants that left it
// and halves every count the given number of times.
func (t *topK) rebalance(halvings int) {
	shift := uint(min(max(halvings, 1), 63))
	all := make([]*entry, 0, len(t.labeled)+len(t.cands))
	for _, e := range t.labeled {
		all = append(all, e)
	}
	all = append(all, t.heap...)
	slices.SortFunc(all, func(a, b *entry) int {
		ga, gb := a.count-a.err, b.count-b.err
		switch {
		case ga != gb:
			if ga > gb {
				return -1
			}
			return 1
		case t.isLabeled(a) != t.isLabeled(b):
			if t.isLabeled(a) {
				return -1
			}
			return 1
		case a.tenant < b.tenant:
			return -1
		case a.tenant > b.tenant:
			return 1
		}
		return 0
	})
	n := min(t.k, len(all))
	keep := make(map[string]*entry, t.k)
	for _, e := range all[:n] {
		keep[e.tenant] = e
	}
	for tenant := range t.labeled {
		if keep[tenant] == nil {
			t.unlabel(tenant)
		}
	}
	t.labeled = keep
	t.cands = make(map[string]*entry, len(all)-n)
	t.heap = t.heap[:0]
	for _, e := range all {
		e.count >>= shift
		e.err >>= shift
	}
	for _, e := range all[n:] {
		if e.count == 0 {
			continue // idle: forget it
		}
		t.cands[e.tenant] = e
		e.idx = len(t.heap)
		t.heap = append(t.heap, e)
	}
	for _, e := range all[:n] {
		e.idx = -1
	}
	heap.Init(&t.heap)
}

func (t *topK) isLabeled(e *entry) bool { return t.labeled[e.tenant] == e }

// labels returns the labeled tenants, for tests.
func (t *topK) labels() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.labeled))
	for tenant := range t.labeled {
		out = append(out, tenant)
	}
	slices.Sort(out)
	return out
}

// entryHeap is a min-heap of entries by count.
type entryHeap []*entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.idx = len(*h)
	*h = append(*h, e)
}

func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}
