package drainer

// weightedPicker chooses among lanes by smooth weighted round-robin (the
// algorithm nginx uses for upstream weights), restricted to the lanes that
// have work. It is work-conserving: a lane with nothing to do takes no
// turns, so its share goes to the others; and it starves nobody: over any
// window in which a lane always has work, it gets at least its weight's
// share of the picks, give or take one.
type weightedPicker struct {
	weights []int
	current []int
}

func newWeightedPicker(weights []int) *weightedPicker {
	return &weightedPicker{weights: weights, current: make([]int, len(weights))}
}

// pick returns the index of the next lane among those for which ready
// returns true, or -1 if none is ready.
func (p *weightedPicker) pick(ready func(i int) bool) int {
	best, total := -1, 0
	for i, w := range p.weights {
		if !ready(i) {
			continue
		}
		p.current[i] += w
		total += w
		if best < 0 || p.current[i] > p.current[best] {
			best = i
		}
	}
	if best >= 0 {
		p.current[best] -= total
	}
	return best
}
