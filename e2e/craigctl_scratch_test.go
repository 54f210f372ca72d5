package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/internal/craigctl"
	"github.com/craig/retention/kernel/archivetest"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/services/rules"
	"github.com/craig/retention/services/security"
)

// ctl runs craigctl in-process against a served service.
type ctl struct {
	t   *testing.T
	env map[string]string
}

func (c ctl) run(stdin string, tty bool, args ...string) (int, string, string) {
	c.t.Helper()
	var out, errOut bytes.Buffer
	code := craigctl.Run(context.Background(), args, craigctl.IO{In: strings.NewReader(stdin), Out: &out, Err: &errOut, InTerminal: tty,
		Getenv: func(k string) string { return c.env[k] }})
	require.NotContains(c.t, out.String()+errOut.String(), c.env["CRAIG_TOKEN"], "the token is never printed")
	return code, out.String(), errOut.String()
}

// ok runs a command that must succeed and returns its stdout.
func (c ctl) ok(args ...string) string {
	c.t.Helper()
	code, out, errOut := c.run("", false, args...)
	require.Equal(c.t, craigctl.ExitOK, code, "craigctl %s: %s", strings.Join(args, " "), errOut)
	return out
}

// TestCraigctlAgainstRules ("fetch a record for a hearing"):
// every craigctl archive command against rules `serve` on the real store:
// a pass, the ledger, a row by id and a range for a hearing (whole file),
// a deep verify, a hold that keeps a purge away, a purge refused at the
// prompt and then confirmed, the purged row answering 410, orphan GC, and
// a token without the scope exiting 5.
func TestCraigctlAgainstRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t, rules.Spec().MigrationSets()...)
	db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
		SELECT now() - make_interval(days => 100, mins => g), 'r', jsonb_build_object('case', g), '{}' FROM generate_series(1, 7) g`)
	docs := archivetest.Docs(ctx, t, db.Pool, "rule_evaluations", "true")
	bucketURL := kerneltest.S3Bucket(t)
	st, err := store.Open(ctx, bucketURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	w := &fleetWorld{amqpURL: kerneltest.AMQPURL(t), exchange: "craig.test.ctl." + time.Now().Format("150405.000000")}
	t.Cleanup(func() { w.deleteBrokerObjects(t) })
	s := serve(t, runnerOf(rules.Spec()), []string{"CRAIG_RULES__DATABASE_URL=" + db.URL, "CRAIG_RULES__AMQP_URL=" + w.amqpURL,
		"CRAIG_RULES__AMQP_EXCHANGE=" + w.exchange, "CRAIG_RULES__HTTP_ADDR=" + freeLoopback(), "CRAIG_RULES__AUTH__JWT_HS256_SECRET=" + apiSecret,
		"CRAIG_RULES__ARCHIVE__ENABLED=true", "CRAIG_RULES__ARCHIVE__STORE__URL=" + bucketURL, "CRAIG_RULES__ARCHIVE__INTERVAL_SECONDS=0"})
	waitHealthy(t, s)
	c := ctl{t: t, env: map[string]string{"CRAIG_RULES_URL": "http://" + s.addr,
		"CRAIG_TOKEN": mint(t, "ops:alice", "archive:read archive:run archive:purge archive:hold")}}

	out := c.ok("archive", "run", "--service", "rules", "--budget", "4")
	require.Regexp(t, `rule_evaluations\s+7\s+0\s+1`, out)
	ledger := archivetest.Ledger(ctx, t, db.Pool)
	require.Len(t, ledger, 1)
	id := ledger[0].ArchiveID.String()
	t.Cleanup(func() {
		_, _ = st.DeleteIfExists(context.Background(), ledger[0].DataKey)
		_, _ = st.DeleteIfExists(context.Background(), ledger[0].ManifestKey)
	})
	require.Equal(t, "ops:alice", ledger[0].ArchivedBy)

	var recs struct {
		Records []map[string]any `json:"records"`
	}
	require.NoError(t, json.Unmarshal([]byte(c.ok("archive", "records", "list", "--service", "rules", "--json")), &recs))
	require.Len(t, recs.Records, 1)
	require.Equal(t, id, recs.Records[0]["archive_id"])
	require.Contains(t, c.ok("archive", "records", "list", "--service", "rules", "--table", "rule_evaluations"), id)

	// A row by id, and the hearing's range into a file.
	for rowID, doc := range docs {
		code, out, errOut := c.run("", false, "archive", "fetch", "rule_evaluations", "--service", "rules", "--id", rowID.String())
		require.Equal(t, craigctl.ExitOK, code, errOut)
		require.JSONEq(t, doc, out)
		require.Contains(t, errOut, "archive "+id)
	}
	file := filepath.Join(t.TempDir(), "hearing.ndjson")
	c.ok("archive", "fetch", "rule_evaluations", "--service", "rules", "--from", time.Now().AddDate(0, 0, -200).Format(time.DateOnly),
		"--to", time.Now().Format(time.RFC3339), "--out", file)
	got, err := os.ReadFile(file)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	require.Len(t, lines, len(docs))
	for _, l := range lines {
		var r struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &r))
		require.Contains(t, fmt.Sprint(docs), r.ID)
	}

	require.Contains(t, c.ok("archive", "verify", "--service", "rules", "--deep"), "deep verify: 1 archive(s) checked, 0 failed")

	// A hold keeps the purge away; released, the prompt still guards it.
	var h map[string]any
	require.NoError(t, json.Unmarshal([]byte(c.ok("archive", "hold", "create", "--service", "rules", "--json", "--title", "hearing 2026-114",
		"--reason", "subpoena", "--archive-id", id)), &h))
	holdID := h["id"].(string)
	require.Contains(t, c.ok("archive", "hold", "list", "--service", "rules"), holdID)
	c.ok("archive", "retention", "set", id, time.Now().AddDate(0, 0, -1).Format(time.DateOnly), "--service", "rules")
	require.Contains(t, c.ok("archive", "purge", "--service", "rules", "--limit", "5", "--dry-run"), "nothing to purge")
	c.ok("archive", "hold", "release", holdID, "--service", "rules", "--reason", "hearing closed")
	require.Contains(t, c.ok("archive", "purge", "--service", "rules", "--limit", "5", "--dry-run"), id)
	code, _, errOut := c.run("no\n", true, "archive", "purge", "--service", "rules", "--limit", "5")
	require.Equal(t, craigctl.ExitRefused, code, errOut)
	require.Contains(t, errOut, "This destroys exactly these 1 archive(s) of rules")
	_, err = st.Get(ctx, ledger[0].DataKey)
	require.NoError(t, err, "refused: the archive is still there")
	code, out, errOut = c.run("yes\n", true, "archive", "purge", "--service", "rules", "--limit", "5", "--json")
	require.Equal(t, craigctl.ExitOK, code, errOut)
	var purged struct {
		Purged      []string `json:"purged"`
		Certificate string   `json:"certificate"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &purged), out)
	require.Equal(t, []string{id}, purged.Purged)
	require.NotEmpty(t, purged.Certificate)
	t.Cleanup(func() { _, _ = st.DeleteIfExists(context.Background(), purged.Certificate) })
	_, err = st.Get(ctx, ledger[0].DataKey)
	require.ErrorIs(t, err, store.ErrNotFound)
	code, _, errOut = c.run("", false, "archive", "fetch", "rule_evaluations", "--service", "rules", "--id", ledger[0].FirstRecordID.String())
	require.Equal(t, craigctl.ExitFailed, code)
	require.Contains(t, errOut, "410 purged")

	require.Contains(t, c.ok("archive", "gc", "--service", "rules", "--older-than", "1", "--dry-run"), "no orphan objects")

	reader := ctl{t: t, env: map[string]string{"CRAIG_RULES_URL": "http://" + s.addr, "CRAIG_TOKEN": mint(t, "ops:bob", "archive:read")}}
	code, _, errOut = reader.run("", false, "archive", "run", "--service", "rules")
	require.Equal(t, craigctl.ExitAuth, code)
	require.Contains(t, errOut, "archive:run")
}

// TestCraigctlFleetCheck: fleet check reads rules' and security's windows
// from their GET /admin/retention (rules with a JWT, security with its
// admin token) and fails on security's inbox one day short of rules'
// outbox and under rules' replay clamp, which neither service can see
// alone.
func TestCraigctlFleetCheck(t *testing.T) {
	t.Parallel()
	w := &fleetWorld{amqpURL: kerneltest.AMQPURL(t), exchange: "craig.test.ctl.fleet." + time.Now().Format("150405.000000")}
	t.Cleanup(func() { w.deleteBrokerObjects(t) })
	rulesDB, secDB := kerneltest.NewDB(t, rules.Spec().MigrationSets()...), kerneltest.NewDB(t, security.Spec().MigrationSets()...)
	r := serve(t, runnerOf(rules.Spec()), []string{"CRAIG_RULES__DATABASE_URL=" + rulesDB.URL, "CRAIG_RULES__AMQP_URL=" + w.amqpURL,
		"CRAIG_RULES__AMQP_EXCHANGE=" + w.exchange, "CRAIG_RULES__HTTP_ADDR=" + freeLoopback(), "CRAIG_RULES__AUTH__JWT_HS256_SECRET=" + apiSecret})
	const adminToken = "security-admin-token-0123456789abcdef0123"
	secEnv := func(inbox string) []string {
		return []string{"CRAIG_SECURITY__DATABASE_URL=" + secDB.URL, "CRAIG_SECURITY__AMQP_URL=" + w.amqpURL,
			"CRAIG_SECURITY__AMQP_EXCHANGE=" + w.exchange, "CRAIG_SECURITY__HTTP_ADDR=" + freeLoopback(), "CRAIG_SECURITY__ADMIN_TOKEN=" + adminToken,
			"CRAIG_SECURITY__EVENT_OUTBOX_RETENTION_DAYS=29", "CRAIG_SECURITY__EVENT_INBOX_RETENTION_DAYS=" + inbox, "CRAIG_SECURITY__REPLAY_MAX_AGE_DAYS=29"}
	}
	sec := serve(t, runnerOf(security.Spec()), secEnv("30"))
	waitHealthy(t, r)
	waitHealthy(t, sec)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "security.token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(adminToken+"\n"), 0o600))
	fleet := filepath.Join(dir, "fleet.yaml")
	write := func(secAddr string) {
		require.NoError(t, os.WriteFile(fleet, fmt.Appendf(nil, "services:\n  - name: rules\n    url: http://%s\n  - name: security\n    url: http://%s\n    token_file: %s\n",
			r.addr, secAddr, tokenFile), 0o600))
	}
	write(sec.addr)
	c := ctl{t: t, env: map[string]string{"CRAIG_TOKEN": mint(t, "ops:alice", "archive:read")}}
	code, out, errOut := c.run("", false, "fleet", "check", "--config", fleet, "--json")
	require.Equal(t, craigctl.ExitFailed, code, errOut)
	var rep struct {
		OK         bool                 `json:"ok"`
		Services   []craigctl.Windows   `json:"services"`
		Violations []craigctl.Violation `json:"violations"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, []craigctl.Violation{{Rule: craigctl.RuleInboxOutlivesOutbox, Producer: "rules", Consumer: "security",
		Detail: "security event_inbox_retention_days=30 < rules event_outbox_retention_days=30 + 1"},
		{Rule: craigctl.RuleReplayWithinInbox, Producer: "rules", Consumer: "security",
			Detail: "rules replay_max_age_days=30 > security event_inbox_retention_days=30 - 1"}}, rep.Violations)
	require.Equal(t, 30, rep.Services[0].Tables["event_outbox"], "rules' swept tables are reported")

	require.Equal(t, 0, sec.stop(t), sec.stderr.String())
	sec = serve(t, runnerOf(security.Spec()), secEnv("31"))
	waitHealthy(t, sec)
	write(sec.addr)
	code, out, errOut = c.run("", false, "fleet", "check", "--config", fleet)
	require.Equal(t, craigctl.ExitOK, code, errOut)
	require.Contains(t, out, "ok: 2 service(s)")
}
