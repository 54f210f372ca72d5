package app_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/courtorder"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/metrics"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
)

const h2Secret = "hostile2-secret-0123456789abcdef0123456789"

func h2Token(t *testing.T, sub, scope string) string {
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "scope": scope, "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}).SignedString([]byte(h2Secret))
	require.NoError(t, err)
	return s
}

func TestOrderAttack2HTTPCourtOrders(t *testing.T) {
	ctx := context.Background()
	db := kerneltest.NewDB(t, kerneltest.ArchivingFixture()...)
	s3 := kerneltest.NewS3Scratch(t)
	st, err := store.Open(ctx, s3.URL)
	require.NoError(t, err)
	key, err := subject.NewKey([]byte("hostile2 subject key, 32 bytes or more!!"))
	require.NoError(t, err)
	spec := archive.TableSpec{Table: "rule_evaluations", AgeColumn: "evaluated_at",
		Subjects: []archive.Subject{{Kind: subject.Case, SQL: "retention_subject('case', input ->> 'case_id')"}}}
	var id string
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		VALUES (now() - interval '1 day', 'r', '{"case_id": 17, "note": "SECRET-ROW"}', '{}') RETURNING id::text`).Scan(&id))
	var logs strings.Builder
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	orders, err := courtorder.New(db.Pool, st, courtorder.Config{Service: s3.Service, Tables: []archive.TableSpec{spec}, Key: key,
		Bookkeep: archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep}, logger)
	require.NoError(t, err)
	v, err := auth.NewVerifier(auth.Config{HS256Secret: h2Secret})
	require.NoError(t, err)
	am, err := metrics.NewAdmin(prometheus.NewRegistry())
	require.NoError(t, err)
	a := &app.ArchiveAPI{Verifier: v, Metrics: am, Logger: logger, Orders: orders,
		Reader: archiveread.New(db.Pool, st, s3.Service, []archive.TableSpec{spec}).WithSubjectKey(key)}
	mux := app.Handler(app.HandlerDeps{Archive: a, Gatherer: prometheus.NewRegistry(), Pool: db.Pool, Logger: logger})
	do := func(method, path, tok, body string, hdr map[string]string) (int, string) {
		req := httptest.NewRequest(method, "http://x"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		b, _ := io.ReadAll(w.Body)
		return w.Code, string(b)
	}
	seal := h2Token(t, "ops:alice", "archive:seal archive:read")
	for p, want := range map[string]int{"/admin/subjects/case%3A0017/seal": 200, "/admin/subjects/CASE:17/seal/": 404,
		"/admin/subjects/case:17/../case:17/seal": 307, "/admin/subjects/case:%2017/seal": 400, "/admin/subjects/case:17%00/seal": 400} {
		c, b := do("POST", p, seal, `{"order_ref":"SEAL-1","reason":"r"}`, nil)
		require.Equal(t, want, c, "%s: %s", p, b)
		require.NotContains(t, b, "17\u0000", "an error does not repeat the input")
	}
	c, b := do("POST", "/admin/subjects/case:17/seal", seal, `{"order_ref":"SEAL-1","reason":"r"}`, nil)
	require.Equal(t, 200, c, b)
	reader := h2Token(t, "ops:dana", "archive:read")
	sealed := h2Token(t, "ops:dana", "archive:read archive:sealed-read")
	row := "/admin/archive/rows/rule_evaluations/" + id
	c, b = do("GET", row, reader, "", nil)
	require.Equal(t, 404, c, b)
	// Only the seal's own order opens it (trimmed, any letter case): any
	// other well-formed reference is 403 (it was 200 on main).
	for h, want := range map[string]int{"": 404, " ": 400, "\t": 400, strings.Repeat("x", 200): 403, strings.Repeat("x", 201): 400,
		"ÄÖ-Ü 17": 403, "\xff\xfe": 400, "a\x7fb": 400, "SEAL-1": 200, "seal-1": 200, "totally-made-up": 403} {
		c, b = do("GET", row, sealed, "", map[string]string{app.OrderRefHeader: h})
		require.Equal(t, want, c, "sealed-read with header %q: %.80s", h, b)
		c2, _ := do("GET", row, reader, "", map[string]string{app.OrderRefHeader: h})
		require.Equal(t, 404, c2, "header %q without the scope reads like everybody", h)
	}
	// approve with a body, and scope combinations
	purge := h2Token(t, "ops:alice", "archive:purge")
	c, b = do("POST", "/admin/subjects/case:17/expunge", purge, `{"order_ref":"JV-1","reason":"r"}`, nil)
	require.Equal(t, 202, c, b)
	c, b = do("POST", "/admin/subjects/case:17/expunge", seal, `{"order_ref":"JV-1","reason":"r"}`, nil)
	require.Equal(t, 403, c, "the seal scope does not expunge: %s", b)
	c, b = do("GET", "/admin/subjects/orders", reader, "", nil)
	require.Equal(t, 200, c, b)
	if strings.Contains(b, "case:17") || strings.Contains(b, "SECRET") {
		t.Errorf("the orders listing names the subject or a row")
	}
	if strings.Contains(logs.String(), "case:17") || strings.Contains(logs.String(), "SECRET-ROW") {
		t.Errorf("the logs name the subject or a row: %s", logs.String())
	}

	// A kind no table of the service declares is 400 for every subject
	// call (on main an expungement of person:4747 answered 202, then 200
	// with a certificate, reaching nothing).
	hold := h2Token(t, "ops:alice", "archive:hold")
	for _, call := range []struct{ method, path, tok, body string }{
		{"POST", "/admin/subjects/person:4747/expunge", purge, `{"order_ref":"JV-9","reason":"r"}`},
		{"POST", "/admin/subjects/person:4747/seal", seal, `{"order_ref":"JV-9","reason":"r"}`},
		{"GET", "/admin/subjects/person:4747/rows", reader, ""},
		{"POST", "/admin/archive/holds", hold, `{"title":"t","reason":"r","subjects":["person:4747"]}`},
	} {
		c, b = do(call.method, call.path, call.tok, call.body, nil)
		require.Equal(t, 400, c, "%s %s: %s", call.method, call.path, b)
		require.Equal(t, "subject_kind_not_declared", errorOf(t, b))
	}

	// A service serving without its subject key while seals exist answers
	// every read 503 subject_key_not_configured (500 internal on main).
	nokey := &app.ArchiveAPI{Verifier: v, Metrics: am, Logger: logger, Orders: orders, SubjectKeyKnob: "CRAIG_RULES__ARCHIVE__SUBJECT_KEY_FILE",
		Reader: archiveread.New(db.Pool, st, s3.Service, []archive.TableSpec{spec})}
	mux = app.Handler(app.HandlerDeps{Archive: nokey, Gatherer: prometheus.NewRegistry(), Pool: db.Pool, Logger: logger})
	for _, p := range []string{row, "/admin/archive/rows/rule_evaluations?from=2024-01-01T00:00:00Z&to=2027-01-01T00:00:00Z", "/admin/subjects/case:18/rows"} {
		c, b = do("GET", p, reader, "", nil)
		require.Equal(t, 503, c, "%s: %s", p, b)
		require.Contains(t, b, "subject_key_not_configured")
	}
}

func errorOf(t *testing.T, body string) string {
	t.Helper()
	var v struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &v), body)
	return v.Error
}
