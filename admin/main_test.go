package admin

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/internal/topotest"
)

func TestMain(m *testing.M) {
	code := topotest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
