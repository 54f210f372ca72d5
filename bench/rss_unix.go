//go:build unix

package bench

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// peakRSSBytes is a finished child's peak resident set (getrusage
// ru_maxrss, the VmHWM of the process): kilobytes on Linux, bytes on macOS.
func peakRSSBytes(ps *os.ProcessState) (int64, bool) {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return 0, false
	}
	if runtime.GOOS == "darwin" || runtime.GOOS == "ios" {
		return ru.Maxrss, true
	}
	return ru.Maxrss * 1024, true
}

// settle flushes the page cache's dirty pages (a copied database's files)
// to disk, so that their write-back does not land inside the next
// measurement. It only helps when the server is on this machine; elsewhere
// it costs a moment and changes nothing.
func settle() { syscall.Sync() }

// resetPeakRSS resets this process's peak resident set (VmHWM) to its
// current one and returns that (Linux: writing 5 to /proc/self/clear_refs);
// false where the kernel offers no reset.
func resetPeakRSS() (int64, bool) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return 0, false
	}
	return procStatusBytes("VmRSS:")
}

// processPeakRSS is this process's peak resident set since the last reset.
func processPeakRSS() (int64, bool) { return procStatusBytes("VmHWM:") }

// procStatusBytes reads one kB field of /proc/self/status.
func procStatusBytes(field string) (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}
