package app

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/metrics"
)

// TestRefusedSubjectReadLogsNoSubject: a subject read refused for its token
// (none, garbage) is logged by its route, never by its path, which names
// the subject in clear.
func TestRefusedSubjectReadLogsNoSubject(t *testing.T) {
	t.Parallel()
	v, err := auth.NewVerifier(auth.Config{HS256Secret: strings.Repeat("s", 40)})
	require.NoError(t, err)
	am, err := metrics.NewAdmin(prometheus.NewRegistry())
	require.NoError(t, err)
	var buf strings.Builder
	a := &ArchiveAPI{Verifier: v, Metrics: am, Logger: slog.New(slog.NewJSONHandler(&buf, nil))}
	mux := http.NewServeMux()
	a.routes(mux)
	for _, tok := range []string{"", "Bearer garbage"} {
		req := httptest.NewRequest(http.MethodGet, "/admin/subjects/case:4711/rows", nil)
		if tok != "" {
			req.Header.Set("Authorization", tok)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		require.Equal(t, http.StatusUnauthorized, w.Code)
	}
	require.Contains(t, buf.String(), "GET /admin/subjects/{subject}/rows", "the refusal names its route")
	require.NotContains(t, buf.String(), "4711", "the subject is never logged")
}
