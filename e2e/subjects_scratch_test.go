package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/internal/craigctl"
	"github.com/craig/retention/kernel/kerneltest"
)

// demoCase is the case the subject proof asks for: the demo seeds it in
// rules (an aged evaluation, archived, and a fresh one, hot) and in
// security (an aged audit entry and an aged dead letter, both archived).
const demoCase = "7"

// TestSubjectFetchAcrossTheDemoFleet ("everything about one case"): on the
// demo's data, `craigctl subject fetch case:7 --fleet` returns exactly the
// rows whose declared subject is case 7, hot and archived, from rules and
// security, each line naming its service (the rows counted in each
// database through the same subject functions before archiving are the
// seeds'; after it, the hot ones still are and the archived ones are in
// the ledger's archives); a subject with no rows is empty, not an error; a
// subject hold on rules alone is what `fleet check` reports until
// security has it too.
func TestSubjectFetchAcrossTheDemoFleet(t *testing.T) {
	t.Parallel()
	kerneltest.NeedsServer(t, "PostgreSQL, RabbitMQ and the S3 store")
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	d := startDemo(t, root)
	c := ctl{t: t, env: d.state}
	work := t.TempDir()
	fleet := filepath.Join(work, "fleet.yaml")
	copyFile(t, d.state["FLEET_FILE"], fleet, 0o600)

	out := filepath.Join(work, "case7.ndjson")
	c.ok("subject", "fetch", "case:"+demoCase, "--fleet", fleet, "--out", out)
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	type line struct {
		Service   string          `json:"service"`
		Table     string          `json:"table"`
		Source    string          `json:"source"`
		ArchiveID *string         `json:"archive_id"`
		Row       json.RawMessage `json:"row"`
	}
	got := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var ln line
		require.NoError(t, json.Unmarshal([]byte(l), &ln), l)
		require.Equal(t, ln.Source == "archive", ln.ArchiveID != nil, l)
		got[ln.Service+"/"+ln.Table+"/"+ln.Source]++
		var row map[string]any
		require.NoError(t, json.Unmarshal(ln.Row, &row))
		switch ln.Table {
		case "rule_evaluations":
			require.EqualValues(t, 7, row["input"].(map[string]any)["case_id"], l)
		case "audit_log":
			require.Equal(t, "case-"+demoCase, row["subject_id"], l)
		case "dead_letter_audit":
			require.EqualValues(t, 7, row["payload"].(map[string]any)["case_id"], l)
		}
	}
	require.Equal(t, map[string]int{
		"rules/rule_evaluations/archive": 1, "rules/rule_evaluations/hot": 1,
		"security/audit_log/archive": 1, "security/dead_letter_audit/archive": 1,
	}, got, "exactly case 7's rows, hot and archived, from both services")
	// The hot rows of case 7 are what the subject functions find in the
	// databases now; the archived ones left them.
	for svc, want := range map[string]int64{"rules": 1, "security": 0} {
		conn, err := pgx.Connect(context.Background(), d.dbURL(t, svc))
		require.NoError(t, err)
		var n int64
		q := map[string]string{
			"rules":    `SELECT count(*) FROM rule_evaluations WHERE rule_evaluations_case(input) = $1`,
			"security": `SELECT (SELECT count(*) FROM audit_log WHERE audit_log_case(subject_id) = $1) + (SELECT count(*) FROM dead_letter_audit WHERE dead_letter_audit_case(payload) = $1)`,
		}[svc]
		require.NoError(t, conn.QueryRow(context.Background(), q, "case:"+demoCase).Scan(&n))
		_ = conn.Close(context.Background())
		require.Equal(t, want, n, "%s: hot rows of case 7", svc)
	}

	code, stdout, _ := c.run("", false, "subject", "fetch", "case:999999", "--service", "rules", "--json")
	require.Equal(t, craigctl.ExitOK, code)
	require.Empty(t, stdout, "a subject with no rows: an empty stream")

	c.ok("archive", "hold", "create", "--service", "rules", "--title", "fair hearing, case 7", "--reason", "subpoena", "--subject", "case:"+demoCase)
	code, stdout, _ = c.run("", false, "fleet", "check", "--config", fleet)
	require.Equal(t, craigctl.ExitFailed, code, stdout)
	require.Contains(t, stdout, "subject_hold_everywhere")
	require.Contains(t, stdout, "not on security")
	c.ok("archive", "hold", "create", "--service", "security", "--title", "fair hearing, case 7", "--reason", "subpoena", "--subject", "case:"+demoCase)
	code, stdout, _ = c.run("", false, "fleet", "check", "--config", fleet)
	require.Equal(t, craigctl.ExitOK, code, stdout)
	d.stop(t)
}
