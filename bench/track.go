package bench

import (
	"context"
	"sync"
	"time"
)

// Sent is a job the gateway accepted, by the client's clock.
type Sent struct {
	ID     string
	Tenant string
	At     time.Time // when the Submit call started
}

// Tracker records the jobs a load run got accepted.
type Tracker struct {
	mu       sync.Mutex
	jobs     []Sent
	errs     int
	firstErr error
}

// Stream returns an open-loop stream submitting as t at rate through c.
func (tr *Tracker) Stream(c *Client, t Tenant, rate float64) Stream {
	return Stream{Rate: rate, Call: func(ctx context.Context) error {
		at := time.Now()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		id, err := c.SubmitID(ctx, t)
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if err != nil {
			tr.errs++
			if tr.firstErr == nil {
				tr.firstErr = err
			}
			return err
		}
		tr.jobs = append(tr.jobs, Sent{ID: id, Tenant: t.ID, At: at})
		return nil
	}}
}

// Jobs returns the accepted jobs so far.
func (tr *Tracker) Jobs() []Sent {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]Sent(nil), tr.jobs...)
}

// Errors returns the number of refused or failed submits and the first.
func (tr *Tracker) Errors() (int, error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.errs, tr.firstErr
}

// Outcome is an accepted job and what became of it.
type Outcome struct {
	Sent
	Delivered bool
	Start     time.Time     // delivery start, if delivered
	Dwell     time.Duration // accepted → delivery start; Never if not delivered
}

// Join matches accepted jobs with the worker's deliveries.
func Join(sent []Sent, ds []Delivery) []Outcome {
	byID := make(map[string]Delivery, len(ds))
	for _, d := range ds {
		byID[d.JobID] = d
	}
	out := make([]Outcome, len(sent))
	for i, s := range sent {
		o := Outcome{Sent: s, Dwell: Never}
		if d, ok := byID[s.ID]; ok {
			o.Delivered, o.Start, o.Dwell = true, d.Start, d.Dwell()
		}
		out[i] = o
	}
	return out
}

// Dwells returns the dwell of each outcome (Never if undelivered).
func Dwells(os []Outcome) []time.Duration {
	ds := make([]time.Duration, len(os))
	for i, o := range os {
		ds[i] = o.Dwell
	}
	return ds
}

// Undelivered counts the outcomes not delivered.
func Undelivered(os []Outcome) int {
	n := 0
	for _, o := range os {
		if !o.Delivered {
			n++
		}
	}
	return n
}

// DwellSeries returns the p99 dwell in milliseconds of outcomes by sent
// time, in windows of w from lo to hi relative to origin. An undelivered
// job counts with the time it had waited when observation ended at end
// (a lower bound), so a line never stops because jobs are still waiting.
func DwellSeries(os []Outcome, origin, end time.Time, w, lo, hi time.Duration) (x, y []float64) {
	at := make([]time.Time, len(os))
	vals := make([]time.Duration, len(os))
	for i, o := range os {
		at[i] = o.At
		vals[i] = o.Dwell
		if !o.Delivered {
			vals[i] = end.Sub(o.At)
		}
	}
	for _, win := range Windows(at, vals, origin, w, lo, hi) {
		x = append(x, (win.Start + w/2).Seconds())
		y = append(y, float64(win.P99)/1e6)
	}
	return x, y
}
