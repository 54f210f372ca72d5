package kerneltest

import (
	"os"
	"os/exec"
	"testing"
)

// EnvPromtool names the promtool binary the monitoring tests run (.ci/run
// sets it to the one it unpacks from Debian's prometheus package); unset,
// promtool is looked up on PATH.
const EnvPromtool = "CRAIG_PROMTOOL"

// Promtool is the path of Prometheus's promtool. Without one the test
// fails under CI=true and is skipped elsewhere (Optional).
func Promtool(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvPromtool); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		Optional(t, "promtool (Debian's prometheus package; .ci/run unpacks it, or set "+EnvPromtool+")", err)
	}
	return p
}
