package app_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/auth"
)

const retentionSecret = "retention-api-test-secret-0123456789abcdef"

func retentionToken(t *testing.T, sub, scope string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": sub, "scope": scope, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(retentionSecret))
	require.NoError(t, err)
	return s
}

// TestRetentionAPIAuth: GET /admin/retention answers a JWT with
// archive:read or the admin token, refuses everything else (401, or 403
// naming the scope), and is open only when neither is configured.
func TestRetentionAPIAuth(t *testing.T) {
	t.Parallel()
	v, err := auth.NewVerifier(auth.Config{HS256Secret: retentionSecret})
	require.NoError(t, err)
	const admin = "0123456789abcdef0123456789abcdef-admin"
	want := app.Retention{Service: "rules", EventOutboxRetentionDays: 30, EventInboxRetentionDays: 31, ReplayMaxAgeDays: 30,
		Tables: map[string]int{"event_outbox": 30, "event_inbox": 31}}
	cases := []struct {
		name     string
		verifier *auth.Verifier
		admin    string
		bearer   string
		status   int
	}{
		{"jwt with archive:read", v, admin, retentionToken(t, "ops:alice", "archive:read"), http.StatusOK},
		{"the admin token", v, admin, admin, http.StatusOK},
		{"the admin token, no key", nil, admin, admin, http.StatusOK},
		{"no token", v, admin, "", http.StatusUnauthorized},
		{"garbage", v, admin, "garbage", http.StatusUnauthorized},
		{"not the admin token, no key", nil, admin, "0123456789abcdef0123456789abcdef-wrong", http.StatusUnauthorized},
		{"jwt without the scope", v, "", retentionToken(t, "ops:alice", "archive:run"), http.StatusForbidden},
		{"a reserved actor", v, "", retentionToken(t, "system:retention", "archive:read"), http.StatusUnauthorized},
		{"jwt, no key configured", nil, admin, retentionToken(t, "ops:alice", "archive:read"), http.StatusUnauthorized},
		{"nothing configured: loopback, open", nil, "", "", http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := app.Handler(app.HandlerDeps{Gatherer: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Retention: &app.RetentionAPI{Retention: want, Verifier: tc.verifier, AdminToken: tc.admin, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
			req := httptest.NewRequest(http.MethodGet, "/admin/retention", nil)
			if tc.bearer != "" {
				req.Header.Set("Authorization", "Bearer "+tc.bearer)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, tc.status, rec.Code, rec.Body.String())
			switch tc.status {
			case http.StatusOK:
				var got app.Retention
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
				require.Equal(t, want, got)
			case http.StatusForbidden:
				require.JSONEq(t, `{"error":"insufficient_scope","required":"archive:read"}`, rec.Body.String())
			default:
				require.JSONEq(t, `{"error":"invalid_token"}`, rec.Body.String())
				require.Equal(t, `Bearer error="invalid_token"`, rec.Header().Get("WWW-Authenticate"))
			}
		})
	}
}
