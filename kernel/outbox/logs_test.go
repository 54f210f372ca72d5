package outbox_test

import (
	"log/slog"
	"math"

	"github.com/craig/retention/kernel/kerneltest"
)

// logRecorder is kerneltest.LogRecorder with this package's assertions.
type logRecorder struct{ *kerneltest.LogRecorder }

func newLogRecorder() (*logRecorder, *slog.Logger) {
	r := &logRecorder{&kerneltest.LogRecorder{}}
	return r, slog.New(r)
}

// at returns the messages logged at level.
func (r *logRecorder) at(level slog.Level) []string { return r.Messages(level, level) }

// atLeast returns the messages logged at level or above.
func (r *logRecorder) atLeast(level slog.Level) []string { return r.Messages(level, math.MaxInt) }

// attrsAt returns the attributes of each record logged at level, as
// strings, with its message under "msg".
func (r *logRecorder) attrsAt(level slog.Level) []map[string]string {
	var out []map[string]string
	for _, rec := range r.Records() {
		if rec.Level != level {
			continue
		}
		m := map[string]string{"msg": rec.Message}
		rec.Attrs(func(a slog.Attr) bool {
			m[a.Key] = a.Value.String()
			return true
		})
		out = append(out, m)
	}
	return out
}
