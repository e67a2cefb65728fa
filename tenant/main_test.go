package tenant

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any leaves a goroutine running
// (Watch's, say, after its context ended).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
