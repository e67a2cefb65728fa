package gateway

import (
	"container/heap"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// TestBucketsPromises: callers refused together are told successive token
// times, each redeemable once, in any order, by whoever comes at or after
// it, and a promise lapses once it is long past due.
func TestBucketsPromises(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	tests := []struct {
		name    string
		limit   rate.Limit
		burst   int
		refused int             // callers refused at t0 after the burst is taken
		returns []time.Duration // times (from t0) of later takes, in order
		want    []bool          // whether each is accepted
	}{
		{
			name: "each comes at its own time", limit: 100, burst: 2, refused: 3,
			returns: []time.Duration{10 * ms, 20 * ms, 30 * ms},
			want:    []bool{true, true, true},
		},
		{
			name: "out of order: the later one takes the due promise, the earlier one the next", limit: 100, burst: 2, refused: 2,
			returns: []time.Duration{21 * ms, 22 * ms},
			want:    []bool{true, true},
		},
		{
			name: "too early: the promise is not due", limit: 100, burst: 2, refused: 1,
			returns: []time.Duration{9 * ms, 10 * ms},
			want:    []bool{false, true},
		},
		{
			// The early caller was promised the token after the first's
			// two, at 40 ms: at 30 ms both earlier ones are taken.
			name: "a redeemed promise is gone", limit: 100, burst: 1, refused: 2,
			returns: []time.Duration{10 * ms, 20 * ms, 20 * ms},
			want:    []bool{true, true, false},
		},
		{
			// Grace is 250 ms: the promise of 10 ms lapses after 260 ms,
			// and with it its token.
			name: "a lapsed promise's token is lost", limit: 100, burst: 1, refused: 1,
			returns: []time.Duration{261 * ms, 261 * ms},
			want:    []bool{true, false},
		},
		{
			name: "a late caller within the grace redeems", limit: 100, burst: 1, refused: 1,
			returns: []time.Duration{259 * ms},
			want:    []bool{true},
		},
		{
			// At 1/s the grace is one interval: at 2.5 s the promise of
			// 1 s has lapsed, that of 2 s not, and no other token is free.
			name: "grace of one interval at slow rates", limit: 1, burst: 1, refused: 2,
			returns: []time.Duration{2500 * ms, 2500 * ms},
			want:    []bool{true, false},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := NewBuckets()
			interval := time.Duration(float64(time.Second) / float64(tt.limit))
			for i := range tt.burst {
				if _, _, ok := b.Take("a", tt.limit, tt.burst, t0); !ok {
					t.Fatalf("take %d of the burst refused", i)
				}
			}
			for i := range tt.refused {
				_, wait, ok := b.Take("a", tt.limit, tt.burst, t0)
				if want := time.Duration(i+1) * interval; ok || wait != want {
					t.Fatalf("refused caller %d: ok=%v wait %s, want refused with %s", i, ok, wait, want)
				}
			}
			for i, at := range tt.returns {
				if _, wait, ok := b.Take("a", tt.limit, tt.burst, t0.Add(at)); ok != tt.want[i] {
					t.Fatalf("take %d at +%s: ok=%v (wait %s), want %v", i, at, ok, wait, tt.want[i])
				}
			}
		})
	}
}

// TestBucketsReturnWithPromises: a token given back while promises are
// outstanding frees the last promised token, which its caller then finds
// free at its time; the rate holds.
func TestBucketsReturnWithPromises(t *testing.T) {
	t.Parallel()
	b := NewBuckets()
	ms := time.Millisecond
	tok, _, ok := b.Take("a", 100, 1, t0)
	if !ok {
		t.Fatal("first take refused")
	}
	for i, want := range []time.Duration{10 * ms, 20 * ms} {
		if _, wait, _ := b.Take("a", 100, 1, t0); wait != want {
			t.Fatalf("refusal %d: wait %s, want %s", i, wait, want)
		}
	}
	tok.Return(t0)
	for _, tt := range []struct {
		at   time.Duration
		want bool
	}{{10 * ms, true}, {20 * ms, true}, {20 * ms, false}, {30 * ms, true}} {
		if _, wait, ok := b.Take("a", 100, 1, t0.Add(tt.at)); ok != tt.want {
			t.Fatalf("take at +%s: ok=%v (wait %s), want %v", tt.at, ok, wait, tt.want)
		}
	}
}

// TestBucketsPromiseLimits: beyond maxPromised promises, or
// promiseHorizon ahead, refused callers are told the time after the last
// promise and nothing is reserved for them.
func TestBucketsPromiseLimits(t *testing.T) {
	t.Parallel()
	b := NewBuckets()
	b.Take("many", 1000, 1, t0)
	for i := range maxPromised {
		if _, wait, _ := b.Take("many", 1000, 1, t0); wait != time.Duration(i+1)*time.Millisecond {
			t.Fatalf("refusal %d: wait %s", i, wait)
		}
	}
	for range 3 {
		if _, wait, _ := b.Take("many", 1000, 1, t0); wait != (maxPromised+1)*time.Millisecond {
			t.Fatalf("refusal beyond the cap: wait %s, want %s", wait, (maxPromised+1)*time.Millisecond)
		}
	}
	// At 1 job per 1000 s the first token is beyond promiseHorizon: each
	// refusal is told the same time and reserves nothing.
	b.Take("slow", 0.001, 1, t0)
	for range 3 {
		if _, wait, _ := b.Take("slow", 0.001, 1, t0); wait != 1000*time.Second {
			t.Fatalf("slow tenant: wait %s, want 1000s", wait)
		}
	}
	if _, _, ok := b.Take("slow", 0.001, 1, t0.Add(1000*time.Second)); !ok {
		t.Fatal("slow tenant refused once its token is due")
	}
}

// TestBucketsHintAfterAFloodThatNeverCameBack: thousands of refusals of
// callers that never come back, then a caller at the tenant's pace: its
// hints stay within promiseHorizon (and a token interval), and it is
// admitted at the rate. It was told 3m21s at 5 jobs/s, the end of 1,024
// promises, while they came due unclaimed a fifth of a second apart
// (found in a walkthrough).
func TestBucketsHintAfterAFloodThatNeverCameBack(t *testing.T) {
	t.Parallel()
	b := NewBuckets()
	const interval = 200 * time.Millisecond // 5 jobs/s
	const most = 10*time.Second + interval  // promiseHorizon and a token
	for i := range 10_000 {
		_, wait, ok := b.Take("tiny", 5, 5, t0.Add(time.Duration(i)*100*time.Microsecond))
		if !ok && wait > most {
			t.Fatalf("refusal %d of the flood told %s, want at most %s", i, wait, most)
		}
	}
	after := t0.Add(3 * time.Second)
	admitted := 0
	for i := range 100 { // 10 jobs/s for 10 s: twice the rate
		_, wait, ok := b.Take("tiny", 5, 5, after.Add(time.Duration(i)*100*time.Millisecond))
		if ok {
			admitted++
		} else if wait > most {
			t.Fatalf("take %d after the flood told %s, want at most %s", i, wait, most)
		}
	}
	if admitted > 5*10+5 {
		t.Errorf("%d admitted in 10 s at 5 jobs/s with a burst of 5", admitted)
	}
}

// TestBucketsMatchRateLimiter drives a bucket and a rate.Limiter through the
// same random arrivals. Each refused caller comes back at the time it was
// told and must be accepted; rate.Limiter, whose refused callers keep
// their reservation (ReserveN without cancelling), must agree on every
// answer and wait.
func TestBucketsMatchRateLimiter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		limit rate.Limit
		burst int
		mean  time.Duration // between arrivals
	}{
		{5, 3, 250 * time.Millisecond},
		{1000, 10, 1200 * time.Microsecond},
		{0.5, 1, 3 * time.Second},
	} {
		rng := rand.New(rand.NewPCG(1, 2))
		b := NewBuckets()
		ref := rate.NewLimiter(tt.limit, tt.burst)
		var returns timeHeap
		now := t0
		for i := range 5000 {
			now = now.Add(time.Duration(rng.Int64N(int64(2 * tt.mean))))
			for len(returns) > 0 && !returns[0].After(now) {
				back := heap.Pop(&returns).(time.Time)
				if _, wait, ok := b.Take("a", tt.limit, tt.burst, back); !ok {
					t.Fatalf("%g/s: a caller returning at its time +%s refused (wait %s)", float64(tt.limit), back.Sub(t0), wait)
				}
			}
			_, wait, ok := b.Take("a", tt.limit, tt.burst, now)
			refWait := ref.ReserveN(now, 1).DelayFrom(now)
			if ok != (refWait == 0) {
				t.Fatalf("%g/s: arrival %d at +%s: ok=%v, rate.Limiter wait %s", float64(tt.limit), i, now.Sub(t0), ok, refWait)
			}
			if !ok {
				if d := wait - refWait; d < -time.Microsecond || d > time.Microsecond {
					t.Fatalf("%g/s: arrival %d: wait %s, rate.Limiter %s", float64(tt.limit), i, wait, refWait)
				}
				heap.Push(&returns, now.Add(wait))
			}
		}
	}
}

type timeHeap []time.Time

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *timeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// TestBucketsPoliteClients simulates closed-loop clients of one tenant
// that honour every hint (plus up to jitter): each sends a job, waits the
// hint when refused and retries, and sends the next job as soon as one is
// accepted. The refusals per accepted job stay at about one (the first
// try of each job after the first) and the tenant gets its full rate.
func TestBucketsPoliteClients(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		clients int
		limit   rate.Limit
		jitter  time.Duration
	}{
		{16, 200, 0},
		{16, 200, 5 * time.Millisecond},
		{100, 1000, 5 * time.Millisecond},
		{16, 10, 5 * time.Millisecond},
	} {
		rng := rand.New(rand.NewPCG(3, 4))
		b := NewBuckets()
		const run = 20 * time.Second
		var due timeHeap
		for range tt.clients {
			heap.Push(&due, t0)
		}
		ok, refused := 0, 0
		for due[0].Before(t0.Add(run)) {
			at := heap.Pop(&due).(time.Time)
			_, wait, accepted := b.Take("a", tt.limit, 10, at)
			if accepted {
				ok++
				heap.Push(&due, at)
				continue
			}
			refused++
			var j time.Duration
			if tt.jitter > 0 {
				j = time.Duration(rng.Int64N(int64(tt.jitter)))
			}
			heap.Push(&due, at.Add(wait+j))
		}
		perOK := float64(refused) / float64(ok)
		want := float64(tt.limit)*run.Seconds() + 10
		t.Logf("%d clients at %g/s, jitter %s: %d accepted (%.0f%% of the rate), %.2f refusals per accepted job", tt.clients, float64(tt.limit), tt.jitter, ok, 100*float64(ok)/want, perOK)
		if perOK > 1.2 || float64(ok) < 0.95*want || float64(ok) > want {
			t.Errorf("%d clients at %g/s, jitter %s: %d accepted of %.0f, %.2f refusals per accepted job; want ≥ 95%% and ≤ 1.2", tt.clients, float64(tt.limit), tt.jitter, ok, want, perOK)
		}
	}
}

// FuzzBuckets drives one bucket with a byte tape of takes, returns of
// tokens and changes of rate and burst at advancing times, and checks that
// no window of time admits more than the limits allow: its burst, its
// rate over the window, and the tokens of one grace period (promises are
// redeemable that long after they are due).
func FuzzBuckets(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0, 5, 0, 200, 1, 3, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 9, 9, 9})
	f.Fuzz(func(t *testing.T, tape []byte) {
		tape = tape[:min(len(tape), 4000)] // the window check is quadratic
		b := NewBuckets()
		limits := []struct {
			limit rate.Limit
			burst int
		}{{100, 1}, {100, 5}, {1000, 3}, {10, 2}}
		li := 0
		now := t0
		type take struct {
			at       time.Time
			li       int
			returned bool
		}
		var takes []take
		var toks []Token
		for len(tape) >= 2 {
			op, arg := tape[0], tape[1]
			tape = tape[2:]
			now = now.Add(time.Duration(arg) * 100 * time.Microsecond)
			switch op % 8 {
			case 0:
				li = int(arg) % len(limits)
				takes, toks = nil, nil // windows across a change are not checked
			case 1:
				if len(toks) > 0 {
					toks[len(toks)-1].Return(now)
					toks = toks[:len(toks)-1]
					takes[len(takes)-1].returned = true
				}
			default:
				l := limits[li]
				tok, wait, ok := b.Take("a", l.limit, l.burst, now)
				switch {
				case ok:
					takes = append(takes, take{at: now, li: li})
					toks = append(toks, tok)
				case wait <= 0:
					t.Fatalf("refused with wait %s", wait)
				}
			}
		}
		// Every window from take i to take j.
		for i := range takes {
			n := 0
			for j := i; j < len(takes); j++ {
				if !takes[j].returned {
					n++
				}
				l := limits[takes[i].li]
				interval := time.Duration(float64(time.Second) / float64(l.limit))
				grace := max(interval, promiseGrace)
				allowed := l.burst + int(grace/interval) + 1 + int(takes[j].at.Sub(takes[i].at)/interval)
				if n > allowed {
					t.Fatalf("%d takes in %s at %g/s burst %d, allowed %d", n, takes[j].at.Sub(takes[i].at), float64(l.limit), l.burst, allowed)
				}
			}
		}
	})
}

// TestBucketsLateReturnDoesNotOverfill: a token given back after the
// bucket refilled (a send that failed slowly) returns nothing; added on
// top of the full bucket, it admitted more than burst jobs at one
// instant.
func TestBucketsLateReturnDoesNotOverfill(t *testing.T) {
	t.Parallel()
	b := NewBuckets()
	const burst = 2
	var old []Token
	for range burst {
		tok, _, ok := b.Take("a", 1, burst, t0)
		if !ok {
			t.Fatal("initial take refused")
		}
		old = append(old, tok)
	}
	// 10 s later the bucket is full again; the sends of the first tokens
	// fail only now.
	t1 := t0.Add(10 * time.Second)
	admitted := 0
	for range burst {
		if _, _, ok := b.Take("a", 1, burst, t1); ok {
			admitted++
		}
	}
	for _, tok := range old {
		tok.Return(t1)
	}
	for range burst {
		if _, _, ok := b.Take("a", 1, burst, t1.Add(time.Millisecond)); ok {
			admitted++
		}
	}
	if admitted > burst {
		t.Fatalf("%d jobs admitted within 1ms at 1/s burst %d (tokens given back after the bucket refilled counted twice)", admitted, burst)
	}
}
