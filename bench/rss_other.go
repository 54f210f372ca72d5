//go:build !unix

package bench

import "os"

// peakRSSBytes is unknown off unix.
func peakRSSBytes(*os.ProcessState) (int64, bool) { return 0, false }

// settle does nothing off unix.
func settle() {}

// resetPeakRSS cannot reset the peak off unix.
func resetPeakRSS() (int64, bool) { return 0, false }

// processPeakRSS is unknown off unix.
func processPeakRSS() (int64, bool) { return 0, false }
