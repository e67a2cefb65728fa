package drainer

import "testing"

func TestWeightedPicker(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		weights []int
		ready   []bool
		picks   int
		want    []int // picks per lane
	}{
		{"by weight", []int{6, 3, 1}, []bool{true, true, true}, 1000, []int{600, 300, 100}},
		{"idle lane's share goes to the others", []int{6, 3, 1}, []bool{true, false, true}, 700, []int{600, 0, 100}},
		{"lowest weight alone gets everything", []int{6, 3, 1}, []bool{false, false, true}, 50, []int{0, 0, 50}},
		{"equal weights alternate", []int{1, 1}, []bool{true, true}, 10, []int{5, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newWeightedPicker(tt.weights)
			got := make([]int, len(tt.weights))
			for range tt.picks {
				got[p.pick(func(i int) bool { return tt.ready[i] })]++
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("picks = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestWeightedPickerNoStarvation(t *testing.T) {
	t.Parallel()
	// The weight-1 lane must get a turn within every window of
	// total-weight picks, not only on average.
	p := newWeightedPicker([]int{50, 1})
	sinceLast := 0
	for range 10_000 {
		if p.pick(func(int) bool { return true }) == 1 {
			sinceLast = 0
			continue
		}
		sinceLast++
		if sinceLast > 51 {
			t.Fatalf("lane 1 waited %d picks", sinceLast)
		}
	}
}

func TestWeightedPickerNoneReady(t *testing.T) {
	t.Parallel()
	if got := newWeightedPicker([]int{1, 2}).pick(func(int) bool { return false }); got != -1 {
		t.Fatalf("pick = %d, want -1", got)
	}
}
