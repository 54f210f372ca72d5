//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// Enabled reports whether this build has failpoints.
const Enabled = true

// armed is the one failpoint of this process, read once from the
// environment (test builds only: this is the package's only state).
var armed = arm(os.Getenv(EnvPoint), os.Getenv(EnvHit))

type point struct {
	name   string
	fireAt int64
	hits   atomic.Int64
}

func arm(name, hit string) *point {
	if name == "" {
		return nil
	}
	p := &point{name: name, fireAt: 1}
	if hit != "" {
		n, err := strconv.ParseInt(hit, 10, 64)
		if err != nil || n < 1 {
			panic(fmt.Sprintf("%s=%q: a hit count of at least 1", EnvHit, hit))
		}
		p.fireAt = n
	}
	return p
}

// Inject SIGKILLs the process at the armed failpoint's fireAt-th hit.
func Inject(name string) {
	if armed == nil || name != armed.name {
		return
	}
	if armed.hits.Add(1) == armed.fireAt {
		_, _ = fmt.Fprintf(os.Stderr, "failpoint %s: SIGKILL at hit %d\n", name, armed.fireAt)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// Cadence is serve's worker cadence from EnvPoll and EnvSweepEvery (ok only
// when both are set and valid).
func Cadence() (poll time.Duration, sweepEvery uint64, ok bool) {
	p, err := time.ParseDuration(os.Getenv(EnvPoll))
	if err != nil || p <= 0 {
		return 0, 0, false
	}
	n, err := strconv.ParseUint(os.Getenv(EnvSweepEvery), 10, 64)
	if err != nil || n == 0 {
		return 0, 0, false
	}
	return p, n, true
}
