// Package migrate applies and lists the services' migrations and adds new migration files.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/craig/retention/build/pgadmin"
	"github.com/craig/retention/build/workspace"

	"github.com/craig/retention/kernel/migrate"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/migrations"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for goose
	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
)

// Migrations groups the goose migration targets (also run as migrate:up,
// migrate:status and migrate:new).
type Migrations mg.Namespace

// Migrate applies pending migrations to every service database, creating missing databases: each service's binary runs its own `migrate` (migrations:up; migrations:status shows what is applied, migrations:new <set> <name> adds a file).
func Migrate(ctx context.Context) error { return Migrations{}.Up(ctx) }

// Up applies pending migrations to every service database (CRAIG_<SVC>__DATABASE_URL, default craig_<svc> on the local server), creating missing databases; each service's own binary runs its `migrate`, so exactly the sets it embeds are applied (alias: migrate:up).
func (Migrations) Up(ctx context.Context) error {
	services, err := workspace.ServiceNames()
	if err != nil {
		return err
	}
	for _, service := range services {
		dbURL := workspace.DatabaseURL(service)
		if err := pgadmin.EnsureDatabase(ctx, dbURL); err != nil {
			return fmt.Errorf("%s: %w", service, err)
		}
		fmt.Printf("==> go run ./services/%[1]s/cmd/%[1]s migrate (%[2]s)\n", service, settings.Redact(dbURL))
		env := map[string]string{workspace.DatabaseEnv(service): dbURL}
		if err := sh.RunWithV(env, mg.GoCmd(), "run", "./services/"+service+"/cmd/"+service, "migrate"); err != nil {
			return fmt.Errorf("%s migrate: %w", service, err)
		}
	}
	return nil
}

// Status prints every migration of every service database and whether it is applied.
func (Migrations) Status(ctx context.Context) error {
	services, err := workspace.ServiceNames()
	if err != nil {
		return err
	}
	for _, service := range services {
		dbURL := workspace.DatabaseURL(service)
		fmt.Printf("\n%s (%s)\n", service, settings.Redact(dbURL))
		exists, err := pgadmin.DatabaseExists(ctx, dbURL)
		if err != nil {
			return fmt.Errorf("%s: %w", service, err)
		}
		if !exists {
			fmt.Println("  database does not exist: run `go tool mage migrate`")
			continue
		}
		err = withDB(ctx, dbURL, func(db *sql.DB) error {
			sets, err := setsIn(ctx, db, service)
			if err != nil {
				return err
			}
			rows, err := migrate.Status(ctx, db, sets)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "  SET\tVERSION\tSTATE\tAPPLIED AT\tFILE")
			for _, r := range rows {
				state := "pending"
				if r.Applied {
					state = "applied"
				}
				fmt.Fprintf(w, "  %s\t%d\t%s\t%s\t%s\n", r.Set, r.Version, state, r.AppliedAt, r.Source)
			}
			return w.Flush()
		})
		if err != nil {
			return fmt.Errorf("%s: %w", service, err)
		}
	}
	return nil
}

var (
	migrationNameRx = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	migrationFileRx = regexp.MustCompile(`^(\d+)_.+\.sql$`)
)

// New creates migrations/<set>/NNNNN_<name>.sql, the next goose migration of a set (args: set name).
func (Migrations) New(set, name string) error {
	services, err := workspace.ServiceNames()
	if err != nil {
		return err
	}
	sets := append([]string{migrations.TransportSetName, migrations.ArchiveSetName}, services...)
	if !slices.Contains(sets, set) {
		return fmt.Errorf("unknown migration set %q (known: %s)", set, strings.Join(sets, ", "))
	}
	if len(name) > 60 || !migrationNameRx.MatchString(name) {
		return fmt.Errorf("bad migration name %q: use lower_snake_case (a-z, 0-9, _), at most 60 characters", name)
	}
	dir := filepath.Join("migrations", set)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	var last int64
	for _, e := range entries {
		if m := migrationFileRx.FindStringSubmatch(e.Name()); m != nil {
			v, err := strconv.ParseInt(m[1], 10, 64)
			if err != nil {
				return fmt.Errorf("migration %s: version: %w", e.Name(), err)
			}
			last = max(last, v)
		}
	}
	path := filepath.Join(dir, fmt.Sprintf("%05d_%s.sql", last+1, name))
	body := fmt.Sprintf("-- %s: describe the change and why. Migrations are append-only:\n"+
		"-- once this file has landed, never edit it; add a new one.\n\n"+
		"-- +goose Up\n\n-- +goose Down\n", strings.ReplaceAll(name, "_", " "))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create migration: %w", err)
	}
	if _, err := io.WriteString(f, body); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fmt.Println("created", path)
	return nil
}

// setsIn are a service database's sets for status: transport and the
// service's own, and the archive set where the database has its version
// table (an archiving service's).
func setsIn(ctx context.Context, db *sql.DB, service string) ([]migrations.Set, error) {
	sets := workspace.MigrationSetsOnDisk(service)
	var archives bool
	if err := db.QueryRowContext(ctx, "SELECT to_regclass($1) IS NOT NULL", sets[2].VersionTable).Scan(&archives); err != nil {
		return nil, fmt.Errorf("look for %s: %w", sets[2].VersionTable, err)
	}
	if !archives {
		sets = sets[:2]
	}
	return sets, nil
}

// withDB opens a database/sql handle (pgx driver) for goose.
func withDB(ctx context.Context, dbURL string, fn func(*sql.DB) error) error {
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		return fmt.Errorf("open %s: %w", settings.Redact(dbURL), err)
	}
	defer func() { _ = db.Close() }()
	pctx, cancel := context.WithTimeout(ctx, workspace.DialTimeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		return fmt.Errorf("connect %s: %w", settings.Redact(dbURL), err)
	}
	return fn(db)
}
