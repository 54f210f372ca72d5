package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/archivetest"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/services/rules"
)

const apiSecret = "e2e-archive-api-secret-0123456789abcdef"

// mint signs an HS256 token for sub with scopes, valid for an hour.
func mint(t *testing.T, sub, scope string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": sub, "scope": scope, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(apiSecret))
	require.NoError(t, err)
	return s
}

// call makes one API request and decodes the JSON answer.
func call(t *testing.T, method, url, token, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		require.NoError(t, json.Unmarshal(b, &out), string(b))
	}
	return resp.StatusCode, resp.Header, out
}

func waitHealthy(t *testing.T, s *served) {
	t.Helper()
	eventually(t, "serve answers", func() bool {
		resp, err := http.Get("http://" + s.addr + "/healthz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestArchiveAPIOverServe (through the binary): rules
// `serve` with a token key serves the archive API: refusals are 401/403 and
// counted, a run is attributed to the token's sub, holds and purges work
// over HTTP; without a key the API is not served; with the archiver off run
// and purge answer 403 naming the knob.
func TestArchiveAPIOverServe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, rules.Spec().MigrationSets()...)
	db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		SELECT now() - make_interval(days => 100, mins => g), 'r', '{}', '{}' FROM generate_series(1, 7) g`)
	bucketURL := kerneltest.S3Bucket(t)
	st, err := store.Open(ctx, bucketURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	w := &fleetWorld{amqpURL: kerneltest.AMQPURL(t), exchange: "craig.test.api." + time.Now().Format("150405.000000")}
	t.Cleanup(func() { w.deleteBrokerObjects(t) })
	base := []string{"CRAIG_RULES__DATABASE_URL=" + db.URL, "CRAIG_RULES__AMQP_URL=" + w.amqpURL, "CRAIG_RULES__AMQP_EXCHANGE=" + w.exchange,
		"CRAIG_RULES__HTTP_ADDR=" + freeLoopback()}
	s := serve(t, runnerOf(rules.Spec()), append(base, "CRAIG_RULES__AUTH__JWT_HS256_SECRET="+apiSecret,
		"CRAIG_RULES__ARCHIVE__ENABLED=true", "CRAIG_RULES__ARCHIVE__STORE__URL="+bucketURL, "CRAIG_RULES__ARCHIVE__INTERVAL_SECONDS=0"))
	waitHealthy(t, s)
	u := "http://" + s.addr + "/admin/archive/"

	// Refusals.
	code, h, body := call(t, "POST", u+"run", "", `{}`)
	require.Equal(t, http.StatusUnauthorized, code)
	require.Equal(t, `Bearer error="invalid_token"`, h.Get("WWW-Authenticate"))
	require.Equal(t, "invalid_token", body["error"])
	code, _, _ = call(t, "POST", u+"run", "garbage", `{}`)
	require.Equal(t, http.StatusUnauthorized, code)
	code, _, body = call(t, "POST", u+"run", mint(t, "ops:alice", "archive:read"), `{}`)
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, map[string]any{"error": "insufficient_scope", "required": "archive:run"}, body)
	code, _, _ = call(t, "POST", u+"run", mint(t, "system:retention", "archive:run"), `{}`)
	require.Equal(t, http.StatusUnauthorized, code, "a token cannot pose as the scheduler")
	code, _, _ = call(t, "POST", u+"run", mint(t, "ops:alice", "archive:run"), `{"budget": 121}`)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "1", s.metric(t, `admin_auth_failures_total{reason="insufficient_scope"}`))
	require.Equal(t, "1", s.metric(t, `admin_auth_failures_total{reason="missing"}`))

	// A run attributed to the sub.
	code, _, body = call(t, "POST", u+"run", mint(t, "ops:alice", "archive:run"), `{"budget": 4}`)
	require.Equal(t, http.StatusOK, code, body)
	var rep archive.PassReport
	raw, _ := json.Marshal(body)
	require.NoError(t, json.Unmarshal(raw, &rep))
	require.Equal(t, int64(7), rep.Table(rules.EvaluationsTable).Archived)
	t.Cleanup(func() {
		for _, a := range rep.Table(rules.EvaluationsTable).Archives {
			_, _ = st.DeleteIfExists(context.Background(), a.DataKey)
			_, _ = st.DeleteIfExists(context.Background(), a.ManifestKey)
		}
	})
	ledger := archivetest.Ledger(ctx, t, db.Pool)
	require.Len(t, ledger, 1)
	require.Equal(t, "ops:alice", ledger[0].ArchivedBy)
	id := ledger[0].ArchiveID.String()

	// Records, a hold, a retention date, a purge that the hold refuses, then
	// one that destroys.
	hold := mint(t, "ops:carol", "archive:hold archive:read")
	code, _, body = call(t, "POST", u+"holds", hold, `{"title": "hearing", "reason": "subpoena", "archive_ids": ["`+id+`"]}`)
	require.Equal(t, http.StatusCreated, code, body)
	holdID := body["id"].(string)
	code, _, body = call(t, "PUT", u+"records/"+id+"/retention", mint(t, "ops:carol", "archive:hold archive:purge"), `{"retention_until": "`+time.Now().AddDate(0, 0, -1).Format(time.DateOnly)+`"}`)
	require.Equal(t, http.StatusOK, code, body)
	code, _, body = call(t, "GET", u+"records?held=true", hold, "")
	require.Equal(t, http.StatusOK, code)
	recs := body["records"].([]any)
	require.Len(t, recs, 1)
	require.Equal(t, true, recs[0].(map[string]any)["legal_hold"])
	purge := mint(t, "ops:alice", "archive:purge")
	code, _, body = call(t, "POST", u+"purge", purge, `{"limit": 10, "dry_run": true}`)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"candidates": []any{}, "more": false}, body)
	code, _, _ = call(t, "POST", u+"holds/"+holdID+"/release", hold, `{"reason": "hearing closed"}`)
	require.Equal(t, http.StatusOK, code)
	code, _, body = call(t, "POST", u+"purge", purge, `{"limit": 10}`)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, []any{id}, body["purged"])
	require.Equal(t, false, body["more"])
	_, err = st.Get(ctx, ledger[0].DataKey)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Equal(t, "1", s.metric(t, `archive_purged_total{table="rule_evaluations"}`))
	if cert, ok := body["certificate"].(string); ok {
		t.Cleanup(func() { _, _ = st.DeleteIfExists(context.Background(), cert) })
	}

	// A run or a purge while a pass holds the archive lease (a session
	// holding its advisory lock, as a pass does) answers 409
	// already_running and changes nothing; once it is free, a run archives.
	db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		SELECT now() - make_interval(days => 100, mins => g), 'r', '{}', '{}' FROM generate_series(1, 2) g`)
	pass, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	_, err = pass.Exec(ctx, `SELECT pg_advisory_lock($1)`, lease.ArchiveKey)
	require.NoError(t, err)
	run := mint(t, "ops:alice", "archive:run")
	code, _, body = call(t, "POST", u+"run", run, `{}`)
	require.Equal(t, http.StatusConflict, code, body)
	require.Equal(t, "already_running", body["error"])
	code, _, body = call(t, "POST", u+"purge", purge, `{"limit": 10}`)
	require.Equal(t, http.StatusConflict, code, body)
	require.Equal(t, int64(2), db.Count(t, `SELECT count(*) FROM rule_evaluations`), "nothing archived during the pass")
	require.NoError(t, pass.Close(ctx))
	code, _, body = call(t, "POST", u+"run", run, `{}`)
	require.Equal(t, http.StatusOK, code, body)
	require.Zero(t, db.Count(t, `SELECT count(*) FROM rule_evaluations`))
	require.Equal(t, 0, s.stop(t), s.stderr.String())

	t.Run("no key: not served", func(t *testing.T) {
		s := serve(t, runnerOf(rules.Spec()), append(base[:3:3], "CRAIG_RULES__HTTP_ADDR="+freeLoopback()))
		waitHealthy(t, s)
		code, _, _ := call(t, "POST", "http://"+s.addr+"/admin/archive/run", mint(t, "ops:alice", "archive:run"), `{}`)
		require.Equal(t, http.StatusNotFound, code)
	})
	t.Run("archiver off: run and purge name the knob", func(t *testing.T) {
		s := serve(t, runnerOf(rules.Spec()), append(base[:3:3], "CRAIG_RULES__HTTP_ADDR="+freeLoopback(), "CRAIG_RULES__AUTH__JWT_HS256_SECRET="+apiSecret))
		waitHealthy(t, s)
		for _, path := range []string{"run", "purge"} {
			code, _, body := call(t, "POST", "http://"+s.addr+"/admin/archive/"+path, mint(t, "ops:alice", "archive:run archive:purge"), `{}`)
			require.Equal(t, http.StatusForbidden, code)
			require.Equal(t, map[string]any{"error": "archiver_disabled", "knob": "CRAIG_RULES__ARCHIVE__ENABLED"}, body)
		}
		// No store configured, reads say so (503).
		code, _, body := call(t, "GET", "http://"+s.addr+"/admin/archive/rows/rule_evaluations/"+uuid.NewString(), mint(t, "ops:alice", "archive:read"), "")
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, "store_not_configured", body["error"])
	})
	t.Run("archiver off: archived records stay readable", func(t *testing.T) {
		// Consent gates what writes or destroys, not
		// reads: the purged archive's row answers 410, an unknown one 404,
		// verify runs; run, purge and gc still refuse.
		s := serve(t, runnerOf(rules.Spec()), append(base[:3:3], "CRAIG_RULES__HTTP_ADDR="+freeLoopback(), "CRAIG_RULES__AUTH__JWT_HS256_SECRET="+apiSecret,
			"CRAIG_RULES__ARCHIVE__STORE__URL="+bucketURL))
		waitHealthy(t, s)
		read := mint(t, "ops:alice", "archive:read")
		code, _, _ := call(t, "GET", "http://"+s.addr+"/admin/archive/rows/rule_evaluations/"+uuid.NewString(), read, "")
		require.Equal(t, http.StatusNotFound, code)
		code, _, body := call(t, "POST", "http://"+s.addr+"/admin/archive/verify", read, `{}`)
		require.Equal(t, http.StatusOK, code, body)
		code, _, _ = call(t, "POST", "http://"+s.addr+"/admin/archive/gc", mint(t, "ops:alice", "archive:purge"), `{"older_than_days": 1, "dry_run": true}`)
		require.Equal(t, http.StatusForbidden, code)
	})
	t.Run("no key on a public address: refused", func(t *testing.T) {
		var out, errOut bytes.Buffer
		code := runnerOf(rules.Spec())(ctx, []string{"serve"}, &out, &errOut, append(base[:3:3], "CRAIG_RULES__HTTP_ADDR=0.0.0.0:0",
			"CRAIG_RULES__ADMIN_TOKEN="+strings.Repeat("t", 40)))
		require.NotEqual(t, 0, code)
		require.Contains(t, errOut.String(), "CRAIG_RULES__AUTH__JWT_PUBLIC_KEY_FILE")
	})
}

// TestArchiveAPIRefusesBadInput: malformed bodies, trailing data, unknown
// fields, out-of-range limits and budgets, bad ids, dates and filters are
// refused with 400 (unknown ids 404) and change nothing.
func TestArchiveAPIRefusesBadInput(t *testing.T) {
	t.Parallel()
	db := kerneltest.NewDB(t, rules.Spec().MigrationSets()...)
	w := &fleetWorld{amqpURL: kerneltest.AMQPURL(t), exchange: "craig.test.api.bad." + time.Now().Format("150405.000000")}
	t.Cleanup(func() { w.deleteBrokerObjects(t) })
	s := serve(t, runnerOf(rules.Spec()), []string{"CRAIG_RULES__DATABASE_URL=" + db.URL, "CRAIG_RULES__AMQP_URL=" + w.amqpURL,
		"CRAIG_RULES__AMQP_EXCHANGE=" + w.exchange, "CRAIG_RULES__HTTP_ADDR=" + freeLoopback(), "CRAIG_RULES__AUTH__JWT_HS256_SECRET=" + apiSecret,
		"CRAIG_RULES__ARCHIVE__ENABLED=true", "CRAIG_RULES__ARCHIVE__STORE__URL=" + kerneltest.S3Bucket(t), "CRAIG_RULES__ARCHIVE__INTERVAL_SECONDS=0"})
	waitHealthy(t, s)
	u := "http://" + s.addr + "/admin/archive/"
	tok := mint(t, "ops:alice", "archive:read archive:run archive:purge archive:hold")
	id := "0193f1d2-7c4e-7a10-8e2b-5f6a7b8c9d10"
	for _, tt := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "run", `{"budget": 0}`, 400},
		{"POST", "run", `{"budget": "8"}`, 400},
		{"POST", "run", `{"budget": 8} {}`, 400},
		{"POST", "run", `{"budgte": 8}`, 400},
		{"POST", "run", `[`, 400},
		{"POST", "purge", `{"limit": 0}`, 400},
		{"POST", "purge", `{"limit": 101}`, 400},
		{"POST", "purge", `{"limit": 10, "dry_run": "yes"}`, 400},
		{"POST", "holds", `{"title": "t", "reason": "r"}`, 400},
		{"POST", "holds", `{"title": "", "reason": "r", "archive_ids": ["` + id + `"]}`, 400},
		{"POST", "holds", `{"title": "t", "reason": "r", "table": "rule_evaluations", "from": "2026-02-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}`, 400},
		{"POST", "holds", `{"title": "t", "reason": "r", "archive_ids": ["not-a-uuid"]}`, 400},
		{"POST", "holds/not-a-uuid/release", `{"reason": "r"}`, 400},
		{"POST", "holds/" + id + "/release", `{"reason": "r"}`, 404},
		{"POST", "holds/" + id + "/release", `{}`, 400},
		{"PUT", "records/" + id + "/retention", `{"retention_until": "2033-02-30"}`, 400},
		{"PUT", "records/" + id + "/retention", `{"retention_until": "1999-12-31"}`, 400},
		{"PUT", "records/" + id + "/retention", `{"retention_until": "2033-01-31"}`, 404},
		{"PUT", "records/nope/retention", `{"retention_until": "2033-01-31"}`, 400},
		{"GET", "records?limit=0", ``, 400},
		{"GET", "records?limit=1001", ``, 400},
		{"GET", "records?limit=abc", ``, 400},
		{"GET", "records?held=yes", ``, 400},
		{"GET", "records?after=nope", ``, 400},
		{"POST", "purges/nope/approve", ``, 400},
		{"POST", "purges/" + id + "/approve", ``, 404},
		// A misspelt table, keys in another
		// case or written twice, a NUL in a title; an archive_ids purge
		// with a dry run.
		{"POST", "holds", `{"title": "t", "reason": "r", "table": "rule_evaluatons"}`, 400},
		{"POST", "holds", `{"title": "t", "TITLE": "u", "reason": "r", "table": "rule_evaluations"}`, 400},
		{"POST", "holds", `{"Title": "t", "reason": "r", "table": "rule_evaluations"}`, 400},
		{"POST", "holds", `{"title": "t", "title": "u", "reason": "r", "table": "rule_evaluations"}`, 400},
		{"POST", "holds", `{"title": "t\u0000", "reason": "r", "table": "rule_evaluations"}`, 400},
		{"POST", "holds/" + id + "/release", `{"reason": "r\u0000"}`, 400},
		{"POST", "purge", `{"limit": 1, "limit": 100}`, 400},
		{"POST", "purge", `{"archive_ids": ["` + id + `"], "dry_run": true}`, 400},
		{"POST", "purge", `{"archive_ids": null}`, 400},
		{"POST", "purge", `{"archive_ids": null, "dry_run": true}`, 400},
		{"POST", "purge", `{"archive_ids": ["` + id + `"], "limit": 0}`, 400},
		{"POST", "purge", `{"archive_ids": "` + id + `"}`, 400},
	} {
		code, _, body := call(t, tt.method, u+tt.path, tok, tt.body)
		require.Equal(t, tt.want, code, "%s %s %s: %v", tt.method, tt.path, tt.body, body)
	}
	for _, table := range []string{"archive_holds", "purges", "archive_lifecycle_log", "event_outbox"} {
		require.Zero(t, db.Count(t, "SELECT count(*) FROM "+table), "%s: nothing changed", table)
	}
}

// TestArchiveFetchByID (by id): a row is answered from the
// hot table, then from the verified archive that holds it, verbatim; an
// unknown id or table is 404, a corrupted object 409 archive_corrupt (the
// row is never served from it), a purged archive 410 with its time; every
// read is announced as rules.archive_read.
func TestArchiveFetchByID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, rules.Spec().MigrationSets()...)
	db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		SELECT now() - make_interval(days => 100, mins => g), 'r', jsonb_build_object('n', g, 'amount', 1.10), '{}' FROM generate_series(1, 5) g`)
	db.Exec(t, `INSERT INTO rule_evaluations (rule_id, input, output) VALUES ('hot', '{}', '{}')`)
	docs := archivetest.Docs(ctx, t, db.Pool, "rule_evaluations", "true")
	bucketURL := kerneltest.S3Bucket(t)
	st, err := store.Open(ctx, bucketURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	w := &fleetWorld{amqpURL: kerneltest.AMQPURL(t), exchange: "craig.test.api.fetch." + time.Now().Format("150405.000000")}
	t.Cleanup(func() { w.deleteBrokerObjects(t) })
	s := serve(t, runnerOf(rules.Spec()), []string{"CRAIG_RULES__DATABASE_URL=" + db.URL, "CRAIG_RULES__AMQP_URL=" + w.amqpURL,
		"CRAIG_RULES__AMQP_EXCHANGE=" + w.exchange, "CRAIG_RULES__HTTP_ADDR=" + freeLoopback(), "CRAIG_RULES__AUTH__JWT_HS256_SECRET=" + apiSecret,
		"CRAIG_RULES__ARCHIVE__ENABLED=true", "CRAIG_RULES__ARCHIVE__STORE__URL=" + bucketURL, "CRAIG_RULES__ARCHIVE__INTERVAL_SECONDS=0"})
	waitHealthy(t, s)
	u := "http://" + s.addr + "/admin/archive/"
	tok := mint(t, "ops:auditor", "archive:read archive:run archive:purge archive:hold")
	code, _, body := call(t, "POST", u+"run", tok, `{}`)
	require.Equal(t, http.StatusOK, code, body)
	ledger := archivetest.Ledger(ctx, t, db.Pool)
	require.Len(t, ledger, 1)
	t.Cleanup(func() {
		_, _ = st.DeleteIfExists(context.Background(), ledger[0].DataKey)
		_, _ = st.DeleteIfExists(context.Background(), ledger[0].ManifestKey)
	})
	hot := archivetest.Docs(ctx, t, db.Pool, "rule_evaluations", "true")
	require.Len(t, hot, 1)

	for id, doc := range docs {
		code, _, body := call(t, "GET", u+"rows/rule_evaluations/"+id.String(), tok, "")
		require.Equal(t, http.StatusOK, code, body)
		raw, err := json.Marshal(body["row"])
		require.NoError(t, err)
		require.JSONEq(t, doc, string(raw))
		if _, isHot := hot[id]; isHot {
			require.Equal(t, "hot", body["source"])
			require.Nil(t, body["archive_id"])
		} else {
			require.Equal(t, "archive", body["source"])
			require.Equal(t, ledger[0].ArchiveID.String(), body["archive_id"])
		}
	}
	require.Equal(t, int64(len(docs)), db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type = 'rules.archive_read'`), "every read is announced")
	code, _, _ = call(t, "GET", u+"rows/rule_evaluations/"+uuid.NewString(), tok, "")
	require.Equal(t, http.StatusNotFound, code)
	code, _, _ = call(t, "GET", u+"rows/audit_log/"+ledger[0].FirstRecordID.String(), tok, "")
	require.Equal(t, http.StatusNotFound, code, "not an archived table of rules")
	code, _, _ = call(t, "GET", u+"rows/rule_evaluations/"+ledger[0].FirstRecordID.String(), mint(t, "ops:x", "archive:run"), "")
	require.Equal(t, http.StatusForbidden, code)

	// The range stream: every archived row of [from, to), verbatim.
	req, err := http.NewRequest("GET", u+"rows/rule_evaluations?from="+time.Now().AddDate(0, 0, -200).UTC().Format(time.RFC3339)+"&to="+time.Now().Add(time.Minute).UTC().Format(time.RFC3339), nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	streamed, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(streamed))
	require.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	lines := strings.Split(strings.TrimSpace(string(streamed)), "\n")
	// Every archived row verbatim, then the hot row
	// (marked), then the summary.
	require.Len(t, lines, len(docs)+1, "every archived row, the hot one, the summary")
	for _, l := range lines[:len(docs)-1] {
		var v struct {
			ID uuid.UUID `json:"id"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &v))
		require.JSONEq(t, docs[v.ID], l)
	}
	var hotLine struct {
		Hot json.RawMessage `json:"hot"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(docs)-1]), &hotLine))
	require.JSONEq(t, hot[hotID(t, hot)], string(hotLine.Hot))
	var summary struct {
		Summary archiveread.RangeSummary `json:"summary"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(docs)]), &summary))
	require.Equal(t, len(docs)-1, summary.Summary.ArchivedRows)
	require.Equal(t, 1, summary.Summary.HotRows)
	require.True(t, summary.Summary.Complete)
	require.Equal(t, []uuid.UUID{ledger[0].ArchiveID}, summary.Summary.Archives)
	code, _, _ = call(t, "GET", u+"rows/rule_evaluations?from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z", tok, "")
	require.Equal(t, http.StatusBadRequest, code)

	// Verify: clean, shallow and deep; an object no ledger row names is an orphan.
	for _, deep := range []string{"false", "true"} {
		code, _, body = call(t, "POST", u+"verify", tok, `{"deep": `+deep+`}`)
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, 1.0, body["checked"])
		require.Equal(t, 0.0, body["failed"], body)
	}
	orphan := "retention-archives/rules/rule_evaluations/2026/01/01/" + uuid.NewString() + ".ndjson"
	require.NoError(t, st.PutCreate(ctx, orphan, []byte("{}\n"), store.ContentTypeNDJSON))
	t.Cleanup(func() { _, _ = st.DeleteIfExists(context.Background(), orphan) })
	code, _, body = call(t, "POST", u+"verify", tok, `{}`)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body["orphans"], orphan)
	code, _, _ = call(t, "POST", u+"verify", tok, `{"limit": 0}`)
	require.Equal(t, http.StatusBadRequest, code)
	code, _, body = call(t, "POST", u+"gc", tok, `{"older_than_days": 1, "dry_run": true}`)
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body["orphans"], orphan, "a fresh orphan is never collected")
	for _, bad := range []string{`{}`, `{"older_than_days": 0}`, `{"older_than_days": 3651}`} {
		code, _, _ = call(t, "POST", u+"gc", tok, bad)
		require.Equal(t, http.StatusBadRequest, code, bad)
	}

	// Corrupt the object (same key, other bytes): refused, never served.
	_, err = st.DeleteIfExists(ctx, ledger[0].DataKey)
	require.NoError(t, err)
	require.NoError(t, st.PutCreate(ctx, ledger[0].DataKey, []byte(`{"id":"`+ledger[0].FirstRecordID.String()+`","forged":true}`+"\n"), store.ContentTypeNDJSON))
	code, _, body = call(t, "GET", u+"rows/rule_evaluations/"+ledger[0].FirstRecordID.String(), tok, "")
	require.Equal(t, http.StatusConflict, code)
	require.Equal(t, map[string]any{"error": "archive_corrupt", "archive_id": ledger[0].ArchiveID.String(), "key": ledger[0].DataKey}, body)
	code, _, body = call(t, "POST", u+"verify", tok, `{"deep": true}`)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 1.0, body["failed"])
	failure := body["failures"].([]any)[0].(map[string]any)
	require.Equal(t, ledger[0].ArchiveID.String(), failure["archive_id"])
	require.Equal(t, "sha256", failure["kind"])
	require.Equal(t, "1", s.metric(t, `archive_verify_failures_total{kind="sha256"}`))
	code, _, body = call(t, "POST", u+"verify", tok, `{"deep": false}`)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 0.0, body["failed"], "shallow: both objects exist")
	code, _, body = call(t, "GET", u+"rows/rule_evaluations?from=2025-01-01T00:00:00Z&to=2030-01-01T00:00:00Z", tok, "")
	require.Equal(t, http.StatusConflict, code, "a range never streams a line of a corrupt object")
	require.Equal(t, map[string]any{"error": "archive_corrupt", "archive_id": ledger[0].ArchiveID.String(), "key": ledger[0].DataKey}, body)

	// Purged: 410 with the time.
	db.Exec(t, `UPDATE archive_ledger SET purged_at = now(), purged_by = 'ops:x' WHERE archive_id = $1`, ledger[0].ArchiveID)
	code, _, body = call(t, "GET", u+"rows/rule_evaluations/"+ledger[0].FirstRecordID.String(), tok, "")
	require.Equal(t, http.StatusGone, code)
	require.Equal(t, "purged", body["error"])
	require.NotEmpty(t, body["purged_at"])
}

// TestHoldPlacedBeforeArchiving: a range hold on
// rule_evaluations placed before a pass holds the archives the pass books:
// legal_hold in the ledger, the store's Object Lock legal hold on both
// objects before the rows' delete committed (a raw delete of every version
// is refused), and rules.archive_hold_placed staged for security's fleet
// ledger in the same transaction.
func TestHoldPlacedBeforeArchiving(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, rules.Spec().MigrationSets()...)
	db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		SELECT now() - make_interval(days => 100, mins => g), 'r', '{}', '{}' FROM generate_series(1, 5) g`)
	bucketURL := kerneltest.S3Bucket(t)
	st, err := store.Open(ctx, bucketURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	locked, err := st.ObjectLock(ctx)
	require.NoError(t, err)
	require.True(t, locked, "the test bucket has Object Lock (go tool mage store:up)")
	w := &fleetWorld{amqpURL: kerneltest.AMQPURL(t), exchange: "craig.test.heldbooking." + time.Now().Format("150405.000000")}
	t.Cleanup(func() { w.deleteBrokerObjects(t) })
	s := serve(t, runnerOf(rules.Spec()), []string{"CRAIG_RULES__DATABASE_URL=" + db.URL, "CRAIG_RULES__AMQP_URL=" + w.amqpURL,
		"CRAIG_RULES__AMQP_EXCHANGE=" + w.exchange, "CRAIG_RULES__HTTP_ADDR=" + freeLoopback(), "CRAIG_RULES__AUTH__JWT_HS256_SECRET=" + apiSecret,
		"CRAIG_RULES__ARCHIVE__ENABLED=true", "CRAIG_RULES__ARCHIVE__STORE__URL=" + bucketURL, "CRAIG_RULES__ARCHIVE__INTERVAL_SECONDS=0"})
	waitHealthy(t, s)
	u := "http://" + s.addr + "/admin/archive/"
	code, _, body := call(t, "POST", u+"holds", mint(t, "ops:carol", "archive:hold"), `{"title": "appeal", "reason": "subpoena", "table": "rule_evaluations"}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, _, body = call(t, "POST", u+"run", mint(t, "ops:alice", "archive:run"), `{"budget": 4}`)
	require.Equal(t, http.StatusOK, code, body)
	ledger := archivetest.Ledger(ctx, t, db.Pool)
	require.Len(t, ledger, 1)
	a := ledger[0]
	t.Cleanup(func() {
		for _, key := range []string{a.DataKey, a.ManifestKey} {
			_ = st.SetLegalHold(context.Background(), key, false)
			_, _ = st.DestroyAllVersions(context.Background(), key)
		}
	})
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM archive_ledger WHERE legal_hold`))
	for _, key := range []string{a.DataKey, a.ManifestKey} {
		on, err := st.LegalHold(ctx, key)
		require.NoError(t, err)
		require.True(t, on, "%s is under the store's legal hold", key)
		_, err = st.DestroyAllVersions(ctx, key)
		require.ErrorIs(t, err, store.ErrLocked)
	}
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type = 'rules.archive_hold_placed'
		AND payload -> 'legal_hold' ->> $1 = 'true'`, a.ArchiveID.String()))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM archive_lifecycle_log WHERE action = 'archive_hold_placed' AND archive_id = $1`, a.ArchiveID))
	require.Equal(t, 0, s.stop(t), s.stderr.String())
}

// hotID is the id of the one row of docs that is still hot.
func hotID(t *testing.T, docs map[uuid.UUID]string) uuid.UUID {
	t.Helper()
	require.Len(t, docs, 1)
	for id := range docs {
		return id
	}
	return uuid.Nil
}
