package outbox_test

import (
	"context"
	"log/slog"
	"sync"
)

// logRecorder is a slog.Handler that keeps every record, for assertions on
// what was logged at which level.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func newLogRecorder() (*logRecorder, *slog.Logger) {
	r := &logRecorder{}
	return r, slog.New(r)
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}

func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// at returns the messages logged at level.
func (r *logRecorder) at(level slog.Level) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.records {
		if rec.Level == level {
			out = append(out, rec.Message)
		}
	}
	return out
}

// atLeast returns the messages logged at level or above.
func (r *logRecorder) atLeast(level slog.Level) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.records {
		if rec.Level >= level {
			out = append(out, rec.Message)
		}
	}
	return out
}

// attrsAt returns the attributes of each record logged at level, as strings.
func (r *logRecorder) attrsAt(level slog.Level) []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, rec := range r.records {
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
