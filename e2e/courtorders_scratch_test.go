package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/internal/craigctl"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/store"
)

// orderCanary is seeded in every row of the expunged subject: after the
// order it must be in no row of either service's database, no object of
// the bucket, no line the services logged.
const orderCanary = "CANARY-ORDER-QX7734"

// TestCourtOrdersAcrossTheDemoFleet: subjects A (case 7, the demo's own
// rows plus rows carrying the canary) and B (case 880088) share archives
// in rules and security, hot and archived. Sealing A on rules alone fails
// `fleet check` until security has it; expunging A across the fleet
// (requested by one operator, approved by another) leaves every B row
// fetching and verifying, A's rows unknown, no version of the objects
// that held them, and the canary nowhere.
func TestCourtOrdersAcrossTheDemoFleet(t *testing.T) {
	t.Parallel()
	kerneltest.NeedsServer(t, "PostgreSQL, RabbitMQ and the S3 store")
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	d := startDemo(t, root)
	c := ctl{t: t, env: d.state}
	approver := ctl{t: t, env: map[string]string{"CRAIG_TOKEN": d.state["SECOND_OPERATOR_TOKEN"],
		"CRAIG_RULES_URL": d.state["CRAIG_RULES_URL"], "CRAIG_SECURITY_URL": d.state["CRAIG_SECURITY_URL"]}}
	work := t.TempDir()
	fleet := filepath.Join(work, "fleet.yaml")
	copyFile(t, d.state["FLEET_FILE"], fleet, 0o600)
	seedOrderRows(t, d)
	c.ok("archive", "run", "--service", "rules")
	c.ok("archive", "run", "--service", "security")
	bBefore := fleetRows(t, c, work, "case:880088")
	require.Len(t, bBefore, 8, "B: 3 archived + 1 hot in rules, 3 archived + 1 hot in security")
	aRows := fleetRows(t, c, work, "case:7")
	require.GreaterOrEqual(t, len(aRows), 12)

	c.ok("subject", "seal", "case:7", "--service", "rules", "--order-ref", "WIC-781-7", "--reason", "sealed juvenile record", "--yes")
	code, stdout, _ := c.run("", false, "fleet", "check", "--config", fleet)
	require.Equal(t, craigctl.ExitFailed, code, stdout)
	require.Contains(t, stdout, "court_order_everywhere")
	c.ok("subject", "seal", "case:7", "--fleet", fleet, "--order-ref", "WIC-781-7", "--reason", "sealed juvenile record", "--yes")
	code, stdout, _ = c.run("", false, "fleet", "check", "--config", fleet)
	require.Equal(t, craigctl.ExitOK, code, stdout)
	require.Empty(t, fleetRows(t, c, work, "case:7"), "sealed: no read returns A's rows")
	sealedReadMatrix(t, d, aRows)
	c.ok("subject", "unseal", "case:7", "--fleet", fleet, "--order-ref", "WIC-781-7-LIFT", "--reason", "for the expungement", "--yes")

	req := c.ok("subject", "expunge", "case:7", "--fleet", fleet, "--order-ref", "CAPTA-7", "--reason", "unsubstantiated report", "--yes")
	require.Equal(t, 2, strings.Count(req, "expunge_id"), req)
	code, _, errOut := c.run("", false, "subject", "approve-expunge", "--fleet", fleet, "--order-ref", "CAPTA-7", "--yes")
	require.Equal(t, craigctl.ExitAuth, code, "the requester cannot approve: %s", errOut)
	done := approver.ok("subject", "approve-expunge", "--fleet", fleet, "--order-ref", "CAPTA-7", "--yes")
	for _, line := range strings.Split(strings.TrimSpace(done), "\n") {
		var ans struct {
			Service     string `json:"service"`
			Rewritten   int    `json:"rewritten"`
			RowsRemoved int    `json:"rows_removed"`
			Salt        string `json:"salt"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &ans), line)
		require.Positive(t, ans.Rewritten, line)
		require.Len(t, ans.Salt, 64, "the salt, once, for the court's file")
	}
	again := approver.ok("subject", "approve-expunge", "--fleet", fleet, "--order-ref", "CAPTA-7", "--yes")
	require.NotContains(t, again, `"salt"`, "a second approval changes nothing and gives no salt")

	require.ElementsMatch(t, withoutArchiveIDs(t, bBefore), withoutArchiveIDs(t, fleetRows(t, c, work, "case:880088")),
		"every B row still fetches (and verifies), verbatim, from the rewritten archives")
	require.Empty(t, fleetRows(t, c, work, "case:7"))
	c.ok("archive", "verify", "--service", "rules", "--deep")
	c.ok("archive", "verify", "--service", "security", "--deep")
	code, stdout, _ = c.run("", false, "fleet", "check", "--config", fleet)
	require.Equal(t, craigctl.ExitOK, code, stdout)
	requireCanaryGone(t, d)
	requireFleetLineage(t, d)
	d.stop(t)
	require.NotContains(t, d.out.String(), orderCanary, "no log line of the run holds the canary")
	require.NotContains(t, d.out.String(), "case:7\"", "no log line names the subject")
}

// seedOrderRows writes aged rows (archived by the next pass) and hot rows
// of A (with the canary) and B in both services, so they share archives.
func seedOrderRows(t *testing.T, d *runbookDemo) {
	t.Helper()
	ctx := context.Background()
	for svc, stmts := range map[string][]string{
		"rules": {`INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			SELECT now() - interval '400 days' + make_interval(secs => g), 'court-order', jsonb_build_object('case_id', CASE WHEN g % 2 = 0 THEN 7 ELSE 880088 END, 'note', CASE WHEN g % 2 = 0 THEN $1 ELSE 'b' END), '{}'
			FROM generate_series(1, 6) AS g`,
			`INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			VALUES (now(), 'court-order', jsonb_build_object('case_id', 7, 'note', $1::text), '{}'), (now(), 'court-order', '{"case_id": 880088}', '{}')`},
		"security": {`INSERT INTO audit_log (occurred_at, actor, action, subject_id, detail)
			SELECT now() - interval '400 days' + make_interval(secs => g), 'court-order', 'viewed', CASE WHEN g % 2 = 0 THEN 'case-7' ELSE 'case-880088' END, jsonb_build_object('note', CASE WHEN g % 2 = 0 THEN $1 ELSE 'b' END)
			FROM generate_series(1, 6) AS g`,
			`INSERT INTO audit_log (actor, action, subject_id, detail)
			VALUES ('court-order', 'viewed', 'case-7', jsonb_build_object('note', $1::text)), ('court-order', 'viewed', 'case-880088', '{}')`},
	} {
		conn, err := pgx.Connect(ctx, d.dbURL(t, svc))
		require.NoError(t, err)
		for _, s := range stmts {
			_, err := conn.Exec(ctx, s, orderCanary)
			require.NoError(t, err, svc)
		}
		_ = conn.Close(ctx)
	}
}

// fleetRows fetches a subject across the fleet: its lines, verbatim.
func fleetRows(t *testing.T, c ctl, work, s string) []string {
	t.Helper()
	f, err := os.CreateTemp(work, strings.ReplaceAll(s, ":", "_")+"-*.ndjson")
	require.NoError(t, err)
	out := f.Name()
	require.NoError(t, f.Close())
	require.NoError(t, os.Remove(out)) // a fetch writes a new file
	c.ok("subject", "fetch", s, "--fleet", filepath.Join(work, "fleet.yaml"), "--out", out)
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	if strings.TrimSpace(string(raw)) == "" {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(raw)), "\n")
}

// requireCanaryGone: no row of any table of either database holds the
// canary; no version is left of any object an expungement superseded; no
// object of the bucket holds the canary.
func requireCanaryGone(t *testing.T, d *runbookDemo) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, d.in.StoreURL)
	require.NoError(t, err)
	defer func() { _ = st.Close() }()
	for _, svc := range []string{"rules", "security"} {
		conn, err := pgx.Connect(ctx, d.dbURL(t, svc))
		require.NoError(t, err)
		rows, err := conn.Query(ctx, `SELECT quote_ident(table_name) FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
		require.NoError(t, err)
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, tbl := range tables {
			var n int64
			require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+tbl+` AS t WHERE strpos(t::text, $1) > 0`, orderCanary).Scan(&n))
			require.Zero(t, n, "%s.%s holds the canary", svc, tbl)
		}
		rows, err = conn.Query(ctx, `SELECT data_key FROM archive_ledger WHERE expunge_id IS NOT NULL UNION ALL SELECT manifest_key FROM archive_ledger WHERE expunge_id IS NOT NULL`)
		require.NoError(t, err)
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.NotEmpty(t, keys, "%s rewrote archives", svc)
		for _, k := range keys {
			n, err := st.VersionCount(ctx, k)
			require.NoError(t, err)
			require.Zero(t, n, "no version of %s is left", k)
		}
		_ = conn.Close(ctx)
		objs, err := st.ListObjects(ctx, "retention-archives/"+svc+"/")
		require.NoError(t, err)
		for _, o := range objs {
			b, err := st.Get(ctx, o.Key)
			require.NoError(t, err)
			require.NotContains(t, string(b), orderCanary, o.Key)
		}
	}
}

// withoutArchiveIDs are subject lines as service, table, source and row
// (a rewritten archive has a new id).
func withoutArchiveIDs(t *testing.T, lines []string) []string {
	t.Helper()
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		var v struct {
			Service, Table, Source string
			Row                    json.RawMessage
		}
		require.NoError(t, json.Unmarshal([]byte(l), &v), l)
		out = append(out, v.Service+" "+v.Table+" "+v.Source+" "+string(v.Row))
	}
	return out
}

// sealedReadMatrix: while case 7 is sealed on rules, each read path
// answers for its rows as for rows that do not exist, unless the token has
// archive:sealed-read AND the request names the order; /metrics names
// neither the subject nor the canary.
func sealedReadMatrix(t *testing.T, d *runbookDemo, aRows []string) {
	t.Helper()
	// demoUp's readers, minted by its identity provider.
	tok := func(scope string) string {
		name := map[string]string{"archive:read": "READER_TOKEN", "archive:read archive:sealed-read": "SEALED_READER_TOKEN"}[scope]
		require.NotEmpty(t, d.state[name], "demoUp writes %s", name)
		return d.state[name]
	}
	var ids []string // rules' rows of case 7, archived and hot
	for _, l := range aRows {
		var v struct {
			Service string `json:"service"`
			Row     struct {
				ID string `json:"id"`
			} `json:"row"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &v))
		if v.Service == "rules" {
			ids = append(ids, v.Row.ID)
		}
	}
	require.NotEmpty(t, ids)
	base := d.state["CRAIG_RULES_URL"] + "/admin"
	get := func(path, token, ref string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		if ref != "" {
			req.Header.Set("X-Craig-Order-Ref", ref)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	rng := "/archive/rows/rule_evaluations?from=2024-01-01T00:00:00Z&to=2027-06-01T00:00:00Z"
	for _, m := range []struct {
		scope, ref string
		sees       bool
	}{
		{"archive:read", "", false},
		{"archive:read", "WIC-781-7", false},
		{"archive:read archive:sealed-read", "", false},
		{"archive:read archive:sealed-read", "WIC-781-7", true},
	} {
		token := tok(m.scope)
		for _, id := range ids {
			code, body := get("/archive/rows/rule_evaluations/"+id, token, m.ref)
			if m.sees {
				require.Equal(t, http.StatusOK, code, body)
				require.Contains(t, body, id)
				continue
			}
			unknownCode, unknown := get("/archive/rows/rule_evaluations/"+uuid.NewString(), token, m.ref)
			require.Equal(t, unknownCode, code, "%v: a sealed row answers as an unknown one", m)
			require.Equal(t, errorCode(t, unknown), errorCode(t, body))
		}
		code, body := get(rng, token, m.ref)
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, m.sees, strings.Contains(body, ids[0]), "%v: the range stream", m)
		code, body = get("/subjects/case:7/rows", token, m.ref)
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, m.sees, strings.Contains(body, ids[0]), "%v: the subject stream", m)
	}
	resp, err := http.Get(d.state["CRAIG_RULES_URL"] + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	require.NotContains(t, string(metrics), "case:7")
	require.NotContains(t, string(metrics), orderCanary)
}

func errorCode(t *testing.T, body string) string {
	t.Helper()
	var v struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &v), body)
	return v.Error
}

// requireFleetLineage: security's fleet ledger records, for both
// producers, every archive the expungement superseded (stamped purged,
// with the order and its successor) once the events have arrived.
func requireFleetLineage(t *testing.T, d *runbookDemo) {
	t.Helper()
	ctx := context.Background()
	want := map[string]int64{}
	for svc, source := range map[string]string{"rules": "craig-rules", "security": "craig-security"} {
		conn, err := pgx.Connect(ctx, d.dbURL(t, svc))
		require.NoError(t, err)
		var n int64
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM archive_ledger WHERE expunge_id IS NOT NULL`).Scan(&n))
		_ = conn.Close(ctx)
		want[source] = n
	}
	conn, err := pgx.Connect(ctx, d.dbURL(t, "security"))
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	eventually(t, "security's fleet ledger records the lineage", func() bool {
		for source, n := range want {
			var got int64
			err := conn.QueryRow(ctx, `SELECT count(*) FROM archive_records WHERE source_service = $1 AND expunge_id IS NOT NULL
				AND purged_at IS NOT NULL AND (superseded_by IS NULL OR superseded_by IN (SELECT archive_id FROM archive_records))`, source).Scan(&got)
			if err != nil || got != n {
				return false
			}
		}
		return true
	})
}
