//go:build !unix

package bench

import "os"

// peakRSSBytes is unknown off unix.
func peakRSSBytes(*os.ProcessState) (int64, bool) { return 0, false }

// settle does nothing off unix.
func settle() {}
