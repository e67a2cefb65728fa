package node

import (
	"os"
	"testing"

	"github.com/sluice-dev/sluice/internal/topotest"
)

// TestMain stops the local SQS-compatible server a test started, and
// fails the binary if a test leaves a goroutine running.
func TestMain(m *testing.M) { os.Exit(topotest.Main(m)) }
