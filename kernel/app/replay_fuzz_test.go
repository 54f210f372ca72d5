package app_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/craig/retention/kernel/app"
)

// FuzzReplayRequest: any body either parses to a request with both times
// set or is refused with ErrReplayRequest; never a panic.
func FuzzReplayRequest(f *testing.F) {
	f.Add([]byte(`{"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z"}`))
	f.Add([]byte(`{"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z"}{}`))
	f.Add([]byte(`{"from": "2026-01-01", "to": 5}`))
	f.Add([]byte(`{"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z", "rows": 1}`))
	f.Add([]byte(`{"from": "0001-01-01T00:00:00Z", "to": "9999-12-31T23:59:59.999999999+14:00"}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := app.ParseReplayRequest(bytes.NewReader(body))
		if err != nil {
			if !errors.Is(err, app.ErrReplayRequest) {
				t.Fatalf("a refusal without ErrReplayRequest: %v", err)
			}
			return
		}
		if req.From.IsZero() || req.To.IsZero() {
			t.Fatalf("accepted a request without both times: %+v", req)
		}
	})
}
