package bench

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// DrainOptions configures the drain-efficiency scenario (item 6).
type DrainOptions struct {
	Backend string
	// Jobs preloaded, drained, and received+deleted raw. Defaults to
	// 100,000 on the embedded backend and 20,000 on SQS, times Scale:
	// about a second of the raw rate and several of the drainer's. With
	// a fifth as many, the raw measure took a tenth of a second on the
	// embedded backend, and a drain on SQS a third of one, start-up
	// included: the SQS pull ratio read 0.57 to 0.91 from run to run,
	// and 0.49 to 0.70 with 20,000.
	Jobs  int
	Scale int
	// Concurrency is the push drainers' slots and the pull worker's
	// credits. Defaults to 128: a no-op worker keeps that many jobs in
	// flight cheaply, and fewer leave the rate bound by each slot's round
	// trip rather than by sluice or the backend.
	Concurrency int
	// Consumers of the raw receive+delete measurement (which also runs
	// with 4× as many and keeps the better rate), spread over as
	// many queues as the lane has shards. Defaults to 8.
	Consumers int
}

// rawBodyBytes approximates an envelope carrying a PayloadBytes job.
const rawBodyBytes = PayloadBytes + 120

// Drain measures the drainer's jobs/s to a no-op worker from a preloaded
// backlog, pushed (a gRPC worker) and pulled (a worker.Connect worker), as
// ratios of the backend's raw receive+delete rate measured in the same run
// on the same store (or server).
func Drain(ctx context.Context, env *Env, rec *Recorder, o DrainOptions, command string) error {
	if o.Jobs == 0 {
		o.Jobs = 100000
		if o.Backend == SQS {
			o.Jobs = 20000
		}
		o.Jobs *= max(o.Scale, 1)
	}
	o.Concurrency = cmp.Or(o.Concurrency, 128)
	o.Consumers = cmp.Or(o.Consumers, 8)
	sid, sname := suffix(o.Backend)
	push := Figure{
		ID: "6.drain-efficiency" + sid, Item: 6, Order: 1, Command: command, Goal: "≥ 0.7",
		Name: "Drain efficiency: drainer jobs/s to a no-op worker ÷ raw receive+delete jobs/s" + sname,
	}
	pull := Figure{
		ID: "pull.drain-efficiency", Item: 6, Order: 2, Command: command, Goal: "≥ 0.8",
		Name: "Pull drain efficiency: jobs/s to a no-op pull worker (worker.Connect) ÷ raw receive+delete jobs/s" + sname,
	}
	if o.Backend == SQS {
		pull.ID, pull.Goal = "pull.drain-efficiency-sqs", "≥ 0.95"
	}
	return rec.Measure([]Figure{push, pull}, func() error { return drain(ctx, env, rec, o, push, pull) })
}

// drainRun is one drain of a preloaded backlog.
type drainRun struct {
	rate    float64 // jobs/s from the first delivery to the last
	repeats int
	actions string
	// most and all: when, after the first delivery, all but a thousandth
	// of the jobs had been delivered, and all of them. A last far past
	// most is a few stragglers: on SQS, the jobs of a receive whose
	// response was lost on the way (the local server broke the
	// connection mid-response, and the SDK retried) stay in flight on
	// the server until the lane's visibility timeout (30s), and the rate
	// of the whole drain falls with them.
	most, all time.Duration
	// lost: receive answers the cluster's processes lost after SQS sent
	// them (sqsqueue.Backend.ReceiveAnswersLost), each hiding its
	// messages for the visibility timeout; -1 where not counted.
	lost int
}

// spread is the run's most and all as a table cell.
func (r drainRun) spread() string {
	return Ms(r.most) + " / " + Ms(r.all)
}

func drain(ctx context.Context, env *Env, rec *Recorder, o DrainOptions, pushFig, pullFig Figure) error {
	w, err := StartWorker(0)
	if err != nil {
		return err
	}
	defer w.Stop()
	tenants := NewTenants("drain", 10, Open)

	// Push: preload, measure the raw rate on the same store, then drain.
	cl, err := env.StartCluster(ctx, ClusterConfig{Name: "drain-" + o.Backend, Backend: o.Backend, Tenants: tenants, WorkerAddr: w.Addr, Concurrency: o.Concurrency})
	if err != nil {
		return err
	}
	defer cl.Close()
	jobs, err := preload(ctx, env, cl, tenants, o.Jobs)
	if err != nil {
		return err
	}
	// Raw receive+delete on the same backend, in this process. The
	// embedded store allows one process: the gateway lets go of it first.
	if o.Backend == Embedded {
		if err := cl.Proc("gateway").Stop(30 * time.Second); err != nil {
			return err
		}
	}
	be, err := cl.OpenBackend(ctx)
	if err != nil {
		return err
	}
	// The best of two consumer counts: the baseline is what the backend
	// serves, not what one harness shape reaches.
	var raw float64
	var rawErr error
	rawConsumers := o.Consumers
	for _, c := range []int{o.Consumers, 4 * o.Consumers} {
		r, err := rawReceiveDelete(ctx, be, cl.Topology.Prefix, cl.Topology.Lanes[0].Shards, c, jobs)
		if err != nil {
			rawErr = err
			break
		}
		env.Logf("  raw receive+delete, %d consumers: %s jobs/s", c, Num(r))
		if r > raw {
			raw, rawConsumers = r, c
		}
	}
	if err := be.Close(); err != nil && rawErr == nil {
		rawErr = err
	}
	if rawErr != nil {
		return fmt.Errorf("raw receive+delete: %w", rawErr)
	}
	if err := cl.SetDraining(ctx, true); err != nil {
		return err
	}
	pushed, err := drained(ctx, cl, w, jobs)
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	env.Logf("  push drainer: %s jobs/s", Num(pushed.rate))
	_ = cl.Close()
	pushed.lost = answersLost(cl)

	// Pull: the same backlog on a cluster serving pull workers, drained
	// with the push drainers' slots as credits, and again with the credits
	// of a smaller worker.
	pulled, err := pullDrain(ctx, env, o, tenants, w, jobs, o.Concurrency)
	if err != nil {
		return err
	}
	fewCredits := min(o.Concurrency, fewPullCredits)
	few, err := pullDrain(ctx, env, o, tenants, w, jobs, fewCredits)
	if err != nil {
		return err
	}

	pushRatio, pullRatio := pushed.rate/raw, pulled.rate/raw
	pushFig.Measured = fmt.Sprintf("%.2f (%s vs %s jobs/s)", pushRatio, Num(pushed.rate), Num(raw))
	pushFig.Status = AtLeast(pushRatio, 0.7)
	pullGoal := 0.8
	if o.Backend == SQS {
		pullGoal = 0.95
	}
	fewRatio := few.rate / raw
	pullFig.Measured = fmt.Sprintf("%.2f (%s vs %s jobs/s, %d credits; push with %d slots, same run: %.2f; pull with %d credits, same run: %.2f)",
		pullRatio, Num(pulled.rate), Num(raw), o.Concurrency, o.Concurrency, pushRatio, fewCredits, fewRatio)
	pullFig.Status = AtLeast(pullRatio, pullGoal)
	rec.Add(pushFig)
	rec.Add(pullFig)
	sid, sname := suffix(o.Backend)
	rec.Detail("drain"+sid, 6, "6. Drain efficiency"+sname, fmt.Sprintf(
		"%s jobs preloaded through the gateway (SubmitBatch ×100, drainers off) over %d shard queues. Raw: the better of %d and %d "+
			"goroutines in the harness (here %d), spread over %d queues of as many %d-byte messages on the same %s, each receiving up to 10 (no wait, the lane's "+
			"visibility given, as the drainer does) and deleting them in one call while it receives the next batch. Push: drainers started (concurrency %d) against the preloaded queues, delivering to "+
			"a no-op gRPC worker (one Process call per job). Pull: the same backlog preloaded on a cluster serving pull workers, "+
			"drained to a no-op worker.Connect worker in the harness granting %d credits (jobs in batches on one stream, results "+
			"batched back), and again granting %d. The rate is at most the credits ÷ one job's round trip (drainer, "+
			"stream, worker, answer), so few credits can bind it before sluice or the backend do. Rates from the first delivery to the last; the last column is when, after the first, all but a thousandth of the jobs had been delivered, and all (a last far past the 99.9 %% is a few stragglers, such as the jobs of a receive whose response was lost, which the backend makes visible again only after the lane's visibility timeout). The lane's staleness bound is the default (5m), so the "+
			"preloaded jobs are delivered, not backlogged.\n\n%s\nDrainer actions (its metrics): push %s; pull %s; pull with %d credits %s.\n",
		Num(float64(jobs)), cl.Topology.Lanes[0].Shards, o.Consumers, 4*o.Consumers, rawConsumers, cl.Topology.Lanes[0].Shards, rawBodyBytes, backendWhat(o.Backend),
		o.Concurrency, o.Concurrency, fewCredits,
		Table([]string{"measure", "jobs/s", "÷ raw", "repeated deliveries", "99.9 % / all delivered after"}, [][]string{
			{"raw receive+delete", Num(raw), "1", "—", "—"},
			{"push: drainer → no-op gRPC worker", Num(pushed.rate), fmt.Sprintf("%.2f", pushRatio), fmt.Sprint(pushed.repeats), pushed.spread()},
			{fmt.Sprintf("pull: no-op pull worker, %d credits", o.Concurrency), Num(pulled.rate), fmt.Sprintf("%.2f", pullRatio), fmt.Sprint(pulled.repeats), pulled.spread()},
			{fmt.Sprintf("pull: no-op pull worker, %d credits", fewCredits), Num(few.rate), fmt.Sprintf("%.2f", fewRatio), fmt.Sprint(few.repeats), few.spread()},
		}), pushed.actions, pulled.actions, fewCredits, few.actions)+lostText(pushed, pulled, few, fewCredits))
	return nil
}

// lostText is the details' line on the receive answers lost, on SQS.
func lostText(pushed, pulled, few drainRun, fewCredits int) string {
	if pushed.lost < 0 {
		return ""
	}
	return fmt.Sprintf("ReceiveMessage answers the local server sent and the drainers lost (each hides its messages for the lane's visibility timeout, 30 s; the processes' receive_answers_lost): push %d; pull %d; pull with %d credits %d.\n",
		pushed.lost, pulled.lost, fewCredits, few.lost)
}

// answersLost sums the receive answers lost by cl's processes, read from
// the "backend API calls" line each logs as it stops (cl has closed), or
// -1 if none logged the count (the embedded backend).
func answersLost(cl *Cluster) int {
	total, found := 0, false
	for _, name := range cl.Roles() {
		p := cl.Proc(name)
		if p == nil {
			continue
		}
		if n, ok := p.Find("backend API calls")["receive_answers_lost"].(float64); ok {
			total += int(n)
			found = true
		}
	}
	if !found {
		return -1
	}
	return total
}

// fewPullCredits is the smaller pull worker's credits: the worker
// package's default is 16, a busy worker's a few dozen.
const fewPullCredits = 32

// pullDrain preloads jobs on a cluster serving pull workers and drains
// them to w, connected once the drainers run, granting credits.
func pullDrain(ctx context.Context, env *Env, o DrainOptions, tenants []Tenant, w *Worker, jobs, credits int) (drainRun, error) {
	w.Reset()
	pcl, err := env.StartCluster(ctx, ClusterConfig{
		Name: fmt.Sprintf("drain-pull%d-%s", credits, o.Backend), Backend: o.Backend, Tenants: tenants, Pull: true, Concurrency: o.Concurrency,
	})
	if err != nil {
		return drainRun{}, err
	}
	defer pcl.Close()
	if _, err := preload(ctx, env, pcl, tenants, jobs); err != nil {
		return drainRun{}, err
	}
	if err := pcl.SetDraining(ctx, true); err != nil {
		return drainRun{}, err
	}
	stop := w.Pull(pcl.WorkerAddrs(), pcl.WorkerKey, credits)
	pulled, err := drained(ctx, pcl, w, jobs)
	stop()
	if err != nil {
		return drainRun{}, fmt.Errorf("pull with %d credits: %w", credits, err)
	}
	_ = pcl.Close()
	pulled.lost = answersLost(pcl)
	env.Logf("  pull drainer, %d credits: %s jobs/s", credits, Num(pulled.rate))
	return pulled, nil
}

// preload submits n jobs through cl's gateway (drainers off), in batches
// of 100 over the tenants, and returns how many were accepted.
func preload(ctx context.Context, env *Env, cl *Cluster, tenants []Tenant, n int) (int, error) {
	const batch = 100
	var left atomic.Int64
	left.Store(int64((n + batch - 1) / batch))
	t0 := time.Now()
	pre := ClosedLoop(ctx, 8, 0, time.Hour, func(ctx context.Context, wk, i int) (int, error) {
		if left.Add(-1) < 0 {
			return 0, errDone
		}
		return cl.Client.SubmitBatch(ctx, tenants[(wk+i)%len(tenants)], batch)
	})
	if pre.Errors > 0 {
		return 0, fmt.Errorf("preload: %d calls failed: %w", pre.Errors, pre.FirstErr)
	}
	env.Logf("  preloaded %s jobs in %.1fs", Num(float64(pre.Units)), time.Since(t0).Seconds())
	return pre.Units, nil
}

// drained waits until w has all jobs and returns the rate of their first
// deliveries. The drainers' actions are read once they have counted every
// job acknowledged (or after 15s), so that an ack still under way when the
// last job arrived is not missing from the table. (A failed ack's job
// would come back only after the lane's visibility timeout, later than
// this wait; the delivered count then stays short of the jobs, which the
// table shows.)
func drained(ctx context.Context, cl *Cluster, w *Worker, jobs int) (drainRun, error) {
	if !w.WaitCount(ctx, jobs, max(2*time.Minute, time.Duration(jobs)*time.Millisecond)) {
		return drainRun{}, fmt.Errorf("drainers delivered %d of %d jobs in time", w.Count(), jobs)
	}
	WaitAcked(ctx, cl, jobs, 15*time.Second)
	ds, repeats := w.Deliveries()
	starts := make([]time.Time, len(ds))
	for i, d := range ds {
		starts[i] = d.Start
	}
	slices.SortFunc(starts, time.Time.Compare)
	first, last := starts[0], starts[len(starts)-1]
	return drainRun{
		rate: Ratio(float64(len(ds)-1), last.Sub(first).Seconds()), repeats: repeats, actions: DrainActions(ctx, cl),
		most: starts[(len(starts)-1)*999/1000].Sub(first), all: last.Sub(first),
	}, nil
}

func backendWhat(b string) string {
	if b == SQS {
		return "local SQS server"
	}
	return "embedded store file"
}

// rawReceiveDelete fills shards queues with n messages in all and returns
// the rate at which consumers receive and delete them.
func rawReceiveDelete(ctx context.Context, be queue.Backend, prefix string, shards, consumers, n int) (float64, error) {
	names := make([]string, shards)
	specs := make([]queue.QueueSpec, shards)
	for i := range names {
		names[i] = fmt.Sprintf("%s-raw-%02d", prefix, i)
		specs[i] = queue.QueueSpec{Name: names[i], VisibilityTimeout: time.Minute}
	}
	if err := be.EnsureQueues(ctx, specs); err != nil {
		return 0, err
	}
	body := make([]byte, rawBodyBytes)
	for i := range body {
		body[i] = byte(rand.Uint32())
	}
	// Fill: batches of 10 from 16 goroutines.
	var next atomic.Int64
	var wg sync.WaitGroup
	var fillErr atomic.Value
	for range 16 {
		wg.Go(func() {
			for {
				k := int(next.Add(queue.MaxBatch)) - queue.MaxBatch
				if k >= n || fillErr.Load() != nil {
					return
				}
				entries := make([]queue.SendEntry, min(queue.MaxBatch, n-k))
				for i := range entries {
					entries[i] = queue.SendEntry{ID: fmt.Sprint(i), Body: body}
				}
				res, err := be.Send(ctx, &queue.SendParams{Queue: names[(k/queue.MaxBatch)%shards], Entries: entries})
				for _, r := range res {
					if err == nil {
						err = r.Err
					}
				}
				if err != nil {
					fillErr.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := fillErr.Load().(error); err != nil {
		return 0, err
	}
	// Measure.
	var got atomic.Int64
	var last atomic.Int64 // when the last delete returned, in ns since start
	var firstErr atomic.Value
	start := time.Now()
	for i := range consumers {
		q := names[i%shards]
		// Each consumer deletes a batch while it receives the next, as the
		// drainer's pollers and acks overlap: one delete in flight.
		deletes := make(chan []string, 1)
		wg.Go(func() {
			for handles := range deletes {
				if firstErr.Load() != nil {
					continue
				}
				res, err := be.Delete(ctx, &queue.DeleteParams{Queue: q, ReceiptHandles: handles})
				for _, e := range res {
					if err == nil {
						err = e
					}
				}
				if err != nil {
					firstErr.Store(err)
					continue
				}
				got.Add(int64(len(handles)))
				last.Store(int64(time.Since(start)))
			}
		})
		wg.Go(func() {
			defer close(deletes)
			idle := time.Now()
			for got.Load() < int64(n) && firstErr.Load() == nil && ctx.Err() == nil {
				// The explicit visibility, as the drainer's pollers pass, lets
				// the SQS backend skip the fencing call before the delete.
				msgs, err := be.Receive(ctx, &queue.ReceiveParams{Queue: q, Max: queue.MaxBatch, VisibilityTimeout: time.Minute})
				if err != nil {
					firstErr.Store(err)
					return
				}
				if len(msgs) == 0 {
					// This queue is empty (or a short poll missed); others
					// may still have messages.
					if time.Since(idle) > 5*time.Second {
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				idle = time.Now()
				handles := make([]string, len(msgs))
				for i, m := range msgs {
					handles[i] = m.ReceiptHandle
				}
				deletes <- handles
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	// A receive whose answer the SDK lost while reading it (its transport
	// race, aws/aws-sdk-go-v2#1825; see docs/reliability.md) hides its
	// messages for the visibility timeout, a minute here, and the
	// consumers give up after 5 s without any: 10 of 20,000 in a make
	// bench run. A shortfall of at most a thousandth is such a loss of the
	// measure's own; the rate is of the messages received, up to the last
	// delete, so the 5 s of waiting are not in it.
	if short := int64(n) - got.Load(); short > int64(n)/1000 {
		return 0, fmt.Errorf("received %d of %d messages", got.Load(), n)
	}
	return float64(got.Load()) / time.Duration(last.Load()).Seconds(), nil
}
