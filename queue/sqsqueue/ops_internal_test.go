package sqsqueue

import (
	"slices"
	"testing"

	"github.com/sluice-dev/sluice/queue"
)

func TestDLQsFirst(t *testing.T) {
	t.Parallel()
	spec := func(name, dlq string) queue.QueueSpec {
		return queue.QueueSpec{Name: name, DeadLetterQueue: dlq, MaxReceiveCount: 1}
	}
	tests := []struct {
		name string
		give []queue.QueueSpec
		want []string
	}{
		{"in order already", []queue.QueueSpec{spec("d", ""), spec("a", "d"), spec("b", "d")}, []string{"d", "a", "b"}},
		{"dlq last", []queue.QueueSpec{spec("a", "d"), spec("x", ""), spec("b", "d"), spec("d", "")}, []string{"x", "d", "a", "b"}},
		{"chain", []queue.QueueSpec{spec("a", "b"), spec("b", "c"), spec("c", "")}, []string{"c", "b", "a"}},
		{"dlq of an earlier call", []queue.QueueSpec{spec("a", "old"), spec("b", "")}, []string{"a", "b"}},
		{"cycle keeps its order", []queue.QueueSpec{spec("a", "b"), spec("c", ""), spec("b", "a")}, []string{"c", "a", "b"}},
	}
	for _, tt := range tests {
		var got []string
		for _, s := range dlqsFirst(tt.give) {
			got = append(got, s.Name)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: dlqsFirst order %v, want %v", tt.name, got, tt.want)
		}
	}
}
