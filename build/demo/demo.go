// Package demo seeds, sweeps and archives demo databases on the local server and prints what the kernel did.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/craig/retention/build/walkthrough"

	"github.com/craig/retention/build/binaries"
	"github.com/craig/retention/build/pgadmin"
	"github.com/craig/retention/build/store"
	"github.com/craig/retention/build/versitygw"
	"github.com/craig/retention/build/workspace"

	"github.com/craig/retention/kernel/settings"
	kstore "github.com/craig/retention/kernel/store"
	"github.com/jackc/pgx/v5"
	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
)

// sweepReport is the JSON `<service> sweep --once --json` prints.
type sweepReport struct {
	LockAcquired bool `json:"lock_acquired"`
	Tables       []struct {
		Table   string `json:"table"`
		Deleted int64  `json:"deleted"`
	} `json:"tables"`
}

// demoRow is one line of the demo's before/after table.
type demoRow struct {
	service, table         string
	before, deleted, after int64
	reported               bool // the sweep report names the table
}

// Demo seeds craig_demo_<service> databases (walkthrough.EnvName names others), runs one sweep per service, archives the aged rule evaluations and prints before/after counts, archives and ledger rows.
func Demo(ctx context.Context) error {
	in, err := walkthrough.InstanceFromEnv()
	if err != nil {
		return err
	}
	server, err := demoPrepare(ctx, in)
	if err != nil {
		return err
	}
	return walkthrough.Run(ctx, server, in, false)
}

// DemoUp runs the demo, then leaves rules' and security's serve running with their archive APIs for craigctl (the runbook's walk-through) until interrupted; it prints the environment to export.
func DemoUp(ctx context.Context) error {
	in, err := walkthrough.InstanceFromEnv()
	if err != nil {
		return err
	}
	server, err := demoPrepare(ctx, in)
	if err != nil {
		return err
	}
	return walkthrough.Run(ctx, server, in, true)
}

// demoPrepare is the demo up to its serves: the databases seeded and swept,
// the aged rows archived; it returns the server URL.
func demoPrepare(ctx context.Context, in walkthrough.Instance) (string, error) {
	server := workspace.EnvOr("CRAIG_DEMO_SERVER_URL", workspace.DefaultServerURL)
	if _, err := pgadmin.WithDatabase(server, workspace.AdminDatabase); err != nil {
		return "", fmt.Errorf("CRAIG_DEMO_SERVER_URL: %w", err)
	}
	mg.CtxDeps(ctx, binaries.Build, store.Store.Up)
	if err := demoResetStore(ctx, in.StoreURL, []string{"rules", "security"}); err != nil {
		return "", err
	}
	// Every service is swept, in name order; each has its seed file
	// (queries/demo/<service>.sql).
	services, err := workspace.ServiceNames()
	if err != nil {
		return "", err
	}
	var rows []demoRow
	reports := map[string]string{}
	for _, service := range services {
		r, report, err := demoService(ctx, server, in.Database(service), service)
		if err != nil {
			return "", fmt.Errorf("demo %s: %w", service, err)
		}
		rows = append(rows, r...)
		reports[service] = report
	}
	printDemoTable(rows)
	for _, service := range services {
		fmt.Printf("\n%s sweep --once --json:\n%s\n", service, reports[service])
	}
	for _, a := range []struct {
		service string
		tables  []string
	}{{"rules", []string{"rule_evaluations"}}, {"security", []string{"audit_log", "dead_letter_audit"}}} {
		if err := demoArchive(ctx, server, in, a.service, a.tables); err != nil {
			return "", err
		}
	}
	return server, nil
}

// demoResetStore destroys what an earlier demo left under each archiving
// service's prefix of the demo's store (its archives, certificates and
// journal of acts): the demo's databases are created anew, and a journal
// of acts they never saw would make them refuse to work as restored from
// a backup.
func demoResetStore(ctx context.Context, storeURL string, services []string) error {
	// The demo opens its store with the archivers' credentials (the local
	// store's, unless the environment names others).
	for k, v := range versitygw.ArchiverEnv("", "", storeURL) {
		if strings.HasPrefix(k, "AWS_") && os.Getenv(k) == "" {
			if err := os.Setenv(k, v); err != nil {
				return err
			}
		}
	}
	st, err := kstore.Open(ctx, storeURL)
	if err != nil {
		return fmt.Errorf("the demo's store: %w", err)
	}
	defer func() { _ = st.Close() }()
	for _, svc := range services {
		objs, err := st.ListObjects(ctx, kstore.Prefix+svc+"/")
		if err != nil {
			return fmt.Errorf("the demo's store: list %s: %w", svc, err)
		}
		for _, o := range objs {
			if _, err := st.DestroyReleased(ctx, o.Key); err != nil {
				return fmt.Errorf("the demo's store: %w", err)
			}
		}
		if len(objs) > 0 {
			fmt.Printf("==> %d object(s) an earlier demo left under %s%s/ destroyed\n", len(objs), kstore.Prefix, svc)
		}
	}
	return nil
}

// demoArchiveBudget lets the demo's one pass archive every aged row it seeds
// (2,500 evaluations at rules' batch of 1,000; security's in one batch each).
const demoArchiveBudget = "10"

// demoPass is the part of `rules archive run --json` the demo prints.
type demoPass struct {
	More   bool `json:"more"`
	Tables []struct {
		Table    string `json:"table"`
		Archived int64  `json:"archived"`
		Archives []struct {
			ArchiveID   string `json:"archive_id"`
			DataKey     string `json:"data_key"`
			ManifestKey string `json:"manifest_key"`
			RecordCount int    `json:"record_count"`
		} `json:"archives"`
	} `json:"tables"`
}

// demoArchive turns a service's archiver on for one manual pass over its
// demo database (it is OFF by default everywhere) and prints what it
// wrote.
func demoArchive(ctx context.Context, server string, in walkthrough.Instance, service string, tables []string) error {
	dbURL, err := pgadmin.WithDatabase(server, in.Database(service))
	if err != nil {
		return err
	}
	fmt.Printf("\n==> ARCHIVER ENABLED FOR THE DEMO ONLY: %s=true, store %s\n", settings.EnvVar(service, "archive.enabled"), in.StoreURL)
	env := in.ArchiverEnv(service, dbURL)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect %s: %w", settings.Redact(dbURL), err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	before, err := countRows(ctx, conn, tables)
	if err != nil {
		return err
	}
	bin := workspace.ServiceBinary(service)
	fmt.Printf("==> %s archive run --json --budget %s --actor demo:mage\n", bin, demoArchiveBudget)
	out, err := sh.OutputWith(env, bin, "archive", "run", "--json", "--budget", demoArchiveBudget, "--actor", "demo:mage")
	if err != nil {
		return fmt.Errorf("%s archive run: %w\n%s", bin, err, out)
	}
	var pass demoPass
	if err := json.Unmarshal([]byte(out), &pass); err != nil {
		return fmt.Errorf("%s archive run: unreadable report: %w\n%s", bin, err, out)
	}
	after, err := countRows(ctx, conn, tables)
	if err != nil {
		return err
	}
	fmt.Println()
	for _, t := range tables {
		fmt.Printf("%s: %d before, %d after\n", t, before[t], after[t])
	}
	fmt.Printf("(more: %v)\n\n", pass.More)
	fmt.Println("| archive_id | records | data_key | manifest_key |")
	fmt.Println("|---|---:|---|---|")
	for _, t := range pass.Tables {
		for _, a := range t.Archives {
			fmt.Printf("| %s | %d | %s | %s |\n", a.ArchiveID, a.RecordCount, a.DataKey, a.ManifestKey)
		}
	}
	return printLedger(ctx, conn)
}

// printLedger prints the demo's archive_ledger rows as a table.
func printLedger(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `SELECT archive_id::text, record_count, first_record_id::text, last_record_id::text,
		to_char(first_record_at, 'YYYY-MM-DD HH24:MI:SS'), to_char(last_record_at, 'YYYY-MM-DD HH24:MI:SS'),
		store_endpoint, store_bucket, archived_by FROM archive_ledger ORDER BY archived_at, archive_id`)
	if err != nil {
		return fmt.Errorf("read archive_ledger: %w", err)
	}
	defer rows.Close()
	fmt.Println("\narchive_ledger:")
	fmt.Println("| archive_id | records | first_record_id | last_record_id | first_record_at | last_record_at | endpoint | bucket | archived_by |")
	fmt.Println("|---|---:|---|---|---|---|---|---|---|")
	for rows.Next() {
		var id, first, last, firstAt, lastAt, endpoint, bucket, by string
		var n int
		if err := rows.Scan(&id, &n, &first, &last, &firstAt, &lastAt, &endpoint, &bucket, &by); err != nil {
			return fmt.Errorf("read archive_ledger: %w", err)
		}
		fmt.Printf("| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", id, n, first, last, firstAt, lastAt, endpoint, bucket, by)
	}
	return rows.Err()
}

// demoService recreates, migrates and seeds one service's demo database, then
// counts its tables around one sweep. It returns the table rows and the
// sweep's JSON report (indented).
func demoService(ctx context.Context, server, database, service string) ([]demoRow, string, error) {
	dbURL, err := pgadmin.WithDatabase(server, database)
	if err != nil {
		return nil, "", err
	}
	fmt.Printf("\n==> %s: recreate %s\n", service, settings.Redact(dbURL))
	if err := pgadmin.RecreateDatabase(ctx, dbURL); err != nil {
		return nil, "", err
	}
	env := map[string]string{workspace.DatabaseEnv(service): dbURL}
	bin := workspace.ServiceBinary(service)
	fmt.Printf("==> %s migrate\n", bin)
	if err := sh.RunWithV(env, bin, "migrate"); err != nil {
		return nil, "", fmt.Errorf("%s migrate: %w", bin, err)
	}

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, "", fmt.Errorf("connect %s: %w", settings.Redact(dbURL), err)
	}
	defer func() { _ = conn.Close(context.Background()) }()

	if err := seedDemo(ctx, conn, service); err != nil {
		return nil, "", err
	}
	tables, err := userTables(ctx, conn, service)
	if err != nil {
		return nil, "", err
	}
	before, err := countRows(ctx, conn, tables)
	if err != nil {
		return nil, "", err
	}

	fmt.Printf("==> %s sweep --once --json\n", bin)
	out, err := sh.OutputWith(env, bin, "sweep", "--once", "--json")
	if err != nil {
		return nil, "", fmt.Errorf("%s sweep: %w", bin, err)
	}
	report, pretty, err := parseSweepReport(out)
	if err != nil {
		return nil, "", fmt.Errorf("%s sweep: %w", bin, err)
	}
	if !report.LockAcquired {
		fmt.Printf("WARNING: %s sweep did not acquire its lock; nothing was swept\n", service)
	}

	after, err := countRows(ctx, conn, tables)
	if err != nil {
		return nil, "", err
	}
	return demoRows(service, tables, before, after, report), pretty, nil
}

// seedDemo runs the transport seed, then the service's own if it has one.
func seedDemo(ctx context.Context, conn *pgx.Conn, service string) error {
	for _, seed := range []string{filepath.Join("queries", "demo", "transport.sql"), filepath.Join("queries", "demo", service+".sql")} {
		if _, err := os.Stat(seed); errors.Is(err, fs.ErrNotExist) && !strings.HasSuffix(seed, "transport.sql") {
			continue
		}
		fmt.Printf("==> seed %s\n", seed)
		if err := execFile(ctx, conn, seed); err != nil {
			return err
		}
	}
	return nil
}

// demoRows is a row per table: its counts around the sweep and what the
// sweep reported deleting.
func demoRows(service string, tables []string, before, after map[string]int64, report sweepReport) []demoRow {
	rows := make([]demoRow, 0, len(tables))
	for _, t := range tables {
		r := demoRow{service: service, table: t, before: before[t], after: after[t]}
		for _, rt := range report.Tables {
			if rt.Table == t {
				r.deleted += rt.Deleted
				r.reported = true
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// execFile runs a SQL file of several statements (simple protocol).
func execFile(ctx context.Context, conn *pgx.Conn, path string) error {
	body, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read seed: %w", err)
	}
	if _, err := conn.PgConn().Exec(ctx, string(body)).ReadAll(); err != nil {
		return fmt.Errorf("seed %s: %w", path, err)
	}
	return nil
}

// userTables lists the service's tables in the public schema, without the
// goose version tables.
func userTables(ctx context.Context, conn *pgx.Conn, service string) ([]string, error) {
	var versionTables []string
	for _, s := range workspace.MigrationSetsOnDisk(service) {
		versionTables = append(versionTables, s.VersionTable)
	}
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = 'public' AND table_type = 'BASE TABLE' AND NOT (table_name = ANY ($1))
		ORDER BY table_name`, versionTables)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	return tables, nil
}

func countRows(ctx context.Context, conn *pgx.Conn, tables []string) (map[string]int64, error) {
	counts := make(map[string]int64, len(tables))
	for _, t := range tables {
		var n int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{"public", t}.Sanitize()).Scan(&n); err != nil {
			return nil, fmt.Errorf("count %s: %w", t, err)
		}
		counts[t] = n
	}
	return counts, nil
}

// parseSweepReport decodes the one JSON object of `sweep --once --json` and
// returns it indented (field order kept) for printing.
func parseSweepReport(out string) (sweepReport, string, error) {
	var report sweepReport
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&report); err != nil {
		return report, "", fmt.Errorf("stdout is not a JSON report: %w\n%s", err, out)
	}
	if dec.More() {
		return report, "", fmt.Errorf("stdout holds more than one JSON value:\n%s", out)
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, []byte(strings.TrimSpace(out)), "", "  "); err != nil {
		return report, "", fmt.Errorf("indent report: %w", err)
	}
	return report, pretty.String(), nil
}

// printDemoTable prints the markdown before/after table and notes any table
// whose count change disagrees with what the sweep reported.
func printDemoTable(rows []demoRow) {
	fmt.Println("\n| service | table | before | deleted | after |")
	fmt.Println("|---|---|---:|---:|---:|")
	var notes []string
	for _, r := range rows {
		deleted := "–" // not swept: the report does not name the table
		if r.reported {
			deleted = strconv.FormatInt(r.deleted, 10)
		}
		fmt.Printf("| %s | %s | %d | %s | %d |\n", r.service, r.table, r.before, deleted, r.after)
		expected := r.before
		if r.reported {
			expected -= r.deleted
		}
		if r.after != expected {
			notes = append(notes, fmt.Sprintf("%s.%s: before - deleted != after", r.service, r.table))
		}
	}
	for _, n := range notes {
		fmt.Println("NOTE:", n)
	}
}
