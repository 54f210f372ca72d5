package kerneltest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// LogRecorder is a slog.Handler for tests: it keeps every record, and can
// call a hook on each one (on the logging goroutine) to make a test react to
// a log line instead of sleeping.
type LogRecorder struct {
	mu      sync.Mutex
	records []slog.Record
	hook    func(slog.Record)
}

// Enabled records every level.
func (r *LogRecorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps the record and calls the hook, if any.
func (r *LogRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.records = append(r.records, rec.Clone())
	hook := r.hook
	r.mu.Unlock()
	if hook != nil {
		hook(rec)
	}
	return nil
}

// WithAttrs returns the recorder itself (attributes of the logger are not
// kept).
func (r *LogRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup returns the recorder itself.
func (r *LogRecorder) WithGroup(string) slog.Handler { return r }

// SetHook installs fn to be called on every later record.
func (r *LogRecorder) SetHook(fn func(slog.Record)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hook = fn
}

// Entries returns the attributes of the records at level whose message
// contains msg.
func (r *LogRecorder) Entries(level slog.Level, msg string) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]any
	for _, rec := range r.records {
		if rec.Level != level || !strings.Contains(rec.Message, msg) {
			continue
		}
		attrs := map[string]any{}
		rec.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.Resolve().Any()
			return true
		})
		out = append(out, attrs)
	}
	return out
}

// Records returns a copy of every record kept so far, in order.
func (r *LogRecorder) Records() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]slog.Record, len(r.records))
	for i, rec := range r.records {
		out[i] = rec.Clone()
	}
	return out
}

// Messages returns the messages of the records whose level is in
// [min, max], in order.
func (r *LogRecorder) Messages(min, max slog.Level) []string {
	var out []string
	for _, rec := range r.Records() {
		if rec.Level >= min && rec.Level <= max {
			out = append(out, rec.Message)
		}
	}
	return out
}
