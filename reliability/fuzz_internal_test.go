package reliability

import "testing"

func TestParseFuzzOutput(t *testing.T) {
	tests := []struct {
		name              string
		give              string
		execs, interested int64
	}{
		{"progress lines", `fuzz: elapsed: 0s, gathering baseline coverage: 0/48 completed
fuzz: elapsed: 0s, gathering baseline coverage: 48/48 completed, now fuzzing with 2 workers
fuzz: elapsed: 3s, execs: 15001 (5000/sec), new interesting: 2 (total: 50)
fuzz: elapsed: 5s, execs: 31861 (14845/sec), new interesting: 3 (total: 51)
PASS
ok  	github.com/sluice-dev/sluice/router	5.194s
`, 31861, 3},
		{"no progress", "--- FAIL: FuzzX (0.01s)\nFAIL\n", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			execs, interesting := parseFuzzOutput([]byte(tt.give))
			if execs != tt.execs || interesting != tt.interested {
				t.Fatalf("got %d execs, %d new interesting; want %d, %d", execs, interesting, tt.execs, tt.interested)
			}
		})
	}
}
