// Package scheduler decides which held job a free delivery slot runs next.
// It is the drainer's fairness, as pure logic: no I/O, no clock, no
// goroutines. Time and job costs are inputs, so the same code runs in the
// drainer and in a deterministic simulation.
//
// The drainer reads jobs ahead from the queues and Pushes each into its
// tenant's bounded in-memory queue, one per [Class] (fresh, spillover,
// backlog). Whenever a slot is free it calls [Scheduler.Next], runs the
// job it gets, and reports the worker time the job used with
// [Scheduler.Done].
//
// # Two rules, in this order
//
//  1. Work-conserving: Next returns a job whenever a slot is free and any
//     held job is deliverable. Only an explicit hard ceiling (MaxInFlight,
//     MaxRate) holds a job back; nothing else does.
//  2. Fair by weight, in worker time: among the tenants a level offers,
//     the one with the least virtual time goes first. A tenant's virtual
//     time grows by the worker time of its jobs divided by its weight: at
//     dispatch by an estimate (the tenant's recent mean job duration), so
//     jobs in flight count at once, and at Done by the difference to the
//     time really used. A tenant whose jobs run 10× longer thus gets a
//     tenth of the dispatches and the same worker time; a flood of cheap
//     jobs is charged as much as it costs. A tenant that becomes active
//     starts at the virtual time of the job last dispatched, so idling
//     earns no credit and a newly active quiet tenant goes next.
//     Until one of a tenant's jobs has finished, its cost is only a guess,
//     so at the over-rate and backlog levels it goes after the others
//     once it holds its weighted share of the slots: a tenant of long jobs
//     cannot take most slots at start-up and hold them while others wait.
//
// # Levels
//
// Next looks at the levels in this order and serves the first that has a
// deliverable job; within a level, the least virtual time wins.
//
//	| # | level     | who qualifies                                                       |
//	|---|-----------|---------------------------------------------------------------------|
//	| 1 | minimum   | a tenant below its guaranteed MinShare of the slots                 |
//	| 2 | sideline  | spillover/backlog work, one grant in 1/SidelineShare (a steady share) |
//	| 3 | in share  | fresh work of a tenant within its fair rate (FairRate, FairBurst)   |
//	| 4 | spare     | fresh work of a tenant over its fair rate, and spillover work       |
//	| 5 | backlog   | backlog work (stale jobs), after live work is caught up             |
//
// The sideline share is kept as a credit of grants, capped at the share
// of the slots: sideline work owed its share after a stretch of fresh
// work alone gets one or two grants at once, then one in ten, never a run
// that makes in-share fresh work wait.
//
// The fair rate is a mark, not a throttle: a tenant over it is served at
// level 4, after everyone within theirs, and gets every slot they leave.
// A tenant's job is taken fresh first, then spillover, then backlog.
//
// # Cost
//
// The tenants holding work sit in one heap per group (lane) and level,
// by virtual time, with timers for the rate buckets that move them
// between levels, so a grant costs about the logarithm of the tenants
// with work, not a look at each of them, and a lane with no free slot is
// passed over whole (index.go). A test checks over long random runs that
// the heaps choose exactly what such a look would.
package scheduler
