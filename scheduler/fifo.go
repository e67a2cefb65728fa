package scheduler

// fifo is a first-in, first-out queue on a slice that reuses its space.
type fifo[T any] struct {
	items []T
	head  int
}

func (q *fifo[T]) len() int { return len(q.items) - q.head }

func (q *fifo[T]) push(v T) {
	if q.head > 0 && q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	q.items = append(q.items, v)
}

// peek returns the first item; the queue must not be empty.
func (q *fifo[T]) peek() T { return q.items[q.head] }

func (q *fifo[T]) pop() T {
	var zero T
	v := q.items[q.head]
	q.items[q.head] = zero
	q.head++
	if q.head > 32 && q.head*2 >= len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return v
}

func (q *fifo[T]) each(fn func(T)) {
	for _, v := range q.items[q.head:] {
		fn(v)
	}
}

// removeIf removes the items drop selects, keeping the others' order.
func (q *fifo[T]) removeIf(drop func(T) bool) []T {
	var out []T
	kept := q.items[:q.head]
	for _, v := range q.items[q.head:] {
		if drop(v) {
			out = append(out, v)
		} else {
			kept = append(kept, v)
		}
	}
	clear(q.items[len(kept):])
	q.items = kept
	return out
}
