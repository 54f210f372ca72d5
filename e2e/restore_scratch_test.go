package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/services/rules"
)

// restoreCanary is in every row of case 7: after its expungement, and
// after a restore brought the rows back and reconcile removed them again,
// it must be in no database row and no object version.
const restoreCanary = "CANARY-RESTORE-PDP11"

// TestAfterRestoringADatabase (the runbook's "After restoring a
// database", through rules' binary): the database is backed up with
// pg_dump; case 8 is then sealed and held and case 7 expunged over the
// API. The database is dropped and restored from the dump: `archive run`
// refuses with restored_behind_journal, serve answers purges and reads
// 503 restored_behind_journal, `reconcile` re-applies the three acts (a
// second run re-applies nothing), and then case 7's canary is in no row
// and no object version, case 8 reads as sealed and its hold is active.
func TestAfterRestoringADatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, rules.Spec().MigrationSets()...)
	db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		SELECT now() - make_interval(days => 100, mins => g), 'r',
		       jsonb_build_object('case_id', 7 + g % 2, 'note', CASE WHEN g % 2 = 0 THEN $1 ELSE 'kept' END), '{}'
		FROM generate_series(1, 8) g`, restoreCanary)
	db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		SELECT now() - make_interval(days => 1, mins => g), 'r', jsonb_build_object('case_id', 7, 'note', $1::text), '{}'
		FROM generate_series(1, 2) g`, restoreCanary) // hot
	bucketURL := kerneltest.S3Bucket(t)
	st, err := store.Open(ctx, bucketURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	keyFile := filepath.Join(t.TempDir(), "subject.key")
	require.NoError(t, os.WriteFile(keyFile, []byte("e2e restore subject key, 32 bytes or more\n"), 0o600))
	w := &fleetWorld{amqpURL: kerneltest.AMQPURL(t), exchange: "craig.test.restore." + time.Now().Format("150405.000000")}
	t.Cleanup(func() { w.deleteBrokerObjects(t) })
	env := func(dbURL string) []string {
		return []string{"CRAIG_RULES__DATABASE_URL=" + dbURL, "CRAIG_RULES__AMQP_URL=" + w.amqpURL, "CRAIG_RULES__AMQP_EXCHANGE=" + w.exchange,
			"CRAIG_RULES__HTTP_ADDR=" + freeLoopback(), "CRAIG_RULES__AUTH__JWT_HS256_SECRET=" + apiSecret, "CRAIG_RULES__ARCHIVE__ENABLED=true",
			"CRAIG_RULES__ARCHIVE__STORE__URL=" + bucketURL, "CRAIG_RULES__ARCHIVE__INTERVAL_SECONDS=0", "CRAIG_RULES__ARCHIVE__SUBJECT_KEY_FILE=" + keyFile}
	}
	run := runnerOf(rules.Spec())
	code, _, errOut := runCmd(t, run, env(db.URL), "archive", "run", "--json")
	require.Equal(t, app.ExitOK, code, errOut)
	backup := kerneltest.Backup(t, db)
	// Rows archived after the backup: hot again in the restored database.
	db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		SELECT now() - make_interval(days => 95, mins => g), 'r',
		       jsonb_build_object('case_id', 7 + g % 2, 'note', CASE WHEN g % 2 = 0 THEN $1 ELSE 'kept' END), '{}'
		FROM generate_series(1, 4) g`, restoreCanary)
	code, _, errOut = runCmd(t, run, env(db.URL), "archive", "run", "--json")
	require.Equal(t, app.ExitOK, code, errOut)

	s := serve(t, run, env(db.URL))
	waitHealthy(t, s)
	u := "http://" + s.addr + "/admin/"
	code, _, body := call(t, "POST", u+"subjects/case:8/seal", mint(t, "ops:alice", "archive:seal"), `{"order_ref": "WIC-8", "reason": "sealed juvenile record"}`)
	require.Equal(t, http.StatusOK, code, body)
	code, _, body = call(t, "POST", u+"archive/holds", mint(t, "ops:carol", "archive:hold"), `{"title": "case 8 hearing", "reason": "subpoena", "subjects": ["case:8"]}`)
	require.Equal(t, http.StatusCreated, code, body)
	holdID := body["id"].(string)
	code, _, body = call(t, "POST", u+"subjects/case:7/expunge", mint(t, "ops:alice", "archive:purge"), `{"order_ref": "JV-7", "reason": "unsubstantiated", "holds": ["`+holdID+`"]}`)
	require.Equal(t, http.StatusAccepted, code, body)
	code, _, body = call(t, "POST", u+"subjects/expungements/"+body["expunge_id"].(string)+"/approve", mint(t, "ops:bob", "archive:purge"), `{}`)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 0, s.stop(t), s.stderr.String())

	// Last night's backup replaces the database.
	restored := kerneltest.Restore(t, backup)
	require.Positive(t, restored.Count(t, `SELECT count(*) FROM rule_evaluations WHERE input ->> 'note' = $1`, restoreCanary), "the dump holds case 7's rows")
	require.Zero(t, restored.Count(t, `SELECT count(*) FROM subject_seals`), "and no seal")
	code, _, errOut = runCmd(t, run, env(restored.URL), "archive", "run", "--json")
	require.NotEqual(t, app.ExitOK, code)
	require.Contains(t, errOut, "restored_behind_journal")
	s = serve(t, run, env(restored.URL))
	waitHealthy(t, s)
	u = "http://" + s.addr + "/admin/"
	code, _, body = call(t, "POST", u+"archive/purge", mint(t, "ops:alice", "archive:purge"), `{"limit": 10}`)
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Equal(t, "restored_behind_journal", body["error"])
	req, err := http.NewRequest(http.MethodGet, u+"subjects/case:8/rows", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+mint(t, "ops:dana", "archive:read"))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "a read could show a case whose seal the restore forgot")
	require.Eventually(t, func() bool {
		return s.metric(t, `retention_invariant_violations{invariant="restored_behind_journal"}`) == "3"
	},
		30*time.Second, 50*time.Millisecond, "the invariant counts the three acts the database lacks")
	require.Equal(t, 0, s.stop(t), s.stderr.String())

	code, out, errOut := runCmd(t, run, env(restored.URL), "reconcile", "--json")
	require.Equal(t, app.ExitOK, code, errOut)
	var rep struct {
		Reapplied []struct {
			Act string `json:"act"`
		} `json:"reapplied"`
		After struct {
			Missing []int64 `json:"missing"`
		} `json:"after"`
	}
	require.NoError(t, json.Unmarshal(out, &rep), string(out))
	var acts []string
	for _, r := range rep.Reapplied {
		acts = append(acts, r.Act)
	}
	require.Equal(t, []string{"seal", "hold_placed", "expunge"}, acts)
	require.Empty(t, rep.After.Missing)
	code, out, errOut = runCmd(t, run, env(restored.URL), "reconcile")
	require.Equal(t, app.ExitOK, code, errOut)
	require.Contains(t, string(out), "nothing to reconcile", "a second run changes nothing")

	// The canary is in no row and no object version.
	tables := restored.Count(t, `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	require.Positive(t, tables)
	rows, err := restored.Pool.Query(ctx, `SELECT quote_ident(table_name) FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	require.NoError(t, err)
	var names []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		names = append(names, n)
	}
	require.NoError(t, rows.Err())
	for _, n := range names {
		require.Zero(t, restored.Count(t, `SELECT count(*) FROM `+n+` AS t WHERE strpos(t::text, $1) > 0`, restoreCanary), "table %s", n)
	}
	keys, err := st.List(ctx, "retention-archives/", 0)
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	for _, k := range keys {
		_, err := st.GetMatching(ctx, k, func(b []byte) bool { return bytes.Contains(b, []byte(restoreCanary)) })
		require.ErrorIs(t, err, store.ErrNoMatchingVersion, "no version of %s holds the canary", k)
	}

	// The service works again: case 8 is sealed, its hold active, and no
	// archive object is unknown (the copies of rows hot again are gone).
	s = serve(t, run, env(restored.URL))
	waitHealthy(t, s)
	u = "http://" + s.addr + "/admin/"
	code, _, body = call(t, "POST", u+"archive/verify", mint(t, "ops:dana", "archive:read"), `{"deep": true}`)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, float64(0), body["failed"], body)
	require.Equal(t, float64(0), body["orphan_count"], body)
	req, err = http.NewRequest(http.MethodGet, u+"subjects/case:8/rows", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+mint(t, "ops:dana", "archive:read archive:sealed-read"))
	req.Header.Set("X-Craig-Order-Ref", "WIC-8")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	var sealedRead bytes.Buffer
	_, _ = sealedRead.ReadFrom(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, sealedRead.String())
	require.Equal(t, 6, strings.Count(sealedRead.String(), `"kept"`),
		"case 8's rows, those archived after the backup too (the successor, their only copy, booked again): %s", sealedRead.String())
	code, _, body = call(t, "GET", u+"archive/holds", mint(t, "ops:dana", "archive:read"), "")
	require.Equal(t, http.StatusOK, code, body)
	holds, _ := json.Marshal(body["holds"])
	require.Contains(t, string(holds), holdID)
	require.Contains(t, string(holds), `"active":true`)
	req, err = http.NewRequest(http.MethodGet, u+"subjects/case:8/rows", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+mint(t, "ops:dana", "archive:read"))
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, buf.String())
	require.False(t, strings.Contains(buf.String(), `"kept"`), "case 8 reads as sealed again: %s", buf.String())
	require.Equal(t, 0, s.stop(t), s.stderr.String())
}
