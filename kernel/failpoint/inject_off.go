//go:build !failpoints

package failpoint

import "time"

// Inject does nothing in a production build.
func Inject(string) {}

// Enabled reports whether this build has failpoints.
const Enabled = false

// Cadence is serve's worker cadence override: none in a production build.
func Cadence() (poll time.Duration, sweepEvery uint64, ok bool) { return 0, 0, false }
