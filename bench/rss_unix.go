//go:build unix

package bench

import (
	"os"
	"runtime"
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
