// Package kerneltest is the scratch-database test harness: every test gets a
// database of its own on a real PostgreSQL server, migrated once into a
// template (per migration-set fingerprint) and copied per test, and dropped
// when the test ends.
//
// The server is named by CRAIG_TEST_DATABASE_URL (default: the local server
// at 127.0.0.1:5432, user postgres). Where none is reachable and a Docker
// engine is, testcontainers-go starts one for the test process. A test that
// needs a server and has none FAILS when CI=true and is skipped otherwise.
package kerneltest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/craig/retention/kernel/migrate"
	"github.com/craig/retention/kernel/pgsession"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// Environment variables the harness reads.
const (
	EnvDatabaseURL = "CRAIG_TEST_DATABASE_URL"
	EnvAMQPURL     = "CRAIG_TEST_AMQP_URL"
)

// Defaults: the servers this machine kind runs before a session starts.
const (
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	DefaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
)

// probeTimeout bounds how long the harness waits to learn that a server is
// down; the servers are local, so a second is generous.
const probeTimeout = 2 * time.Second

// Missing reports a required server that is not reachable: a failure under
// CI=true (a missing server must never pass silently), a skip elsewhere.
func Missing(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required and not reachable (CI=true makes this a failure): %v", what, err)
	}
	t.Skipf("%s not reachable (set CI=true to make this a failure): %v", what, err)
}

// DB is one scratch database.
type DB struct {
	// Pool is connected to the scratch database.
	Pool *pgxpool.Pool
	// URL connects to the scratch database (for subprocesses).
	URL string
	// Name is the database name.
	Name string
}

// NewDB creates a scratch database with the given migration sets applied and
// drops it when the test ends.
func NewDB(t testing.TB, sets ...migrations.Set) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	server := serverURL(t)
	tpl, err := ensureTemplate(ctx, server, sets)
	if err != nil {
		t.Fatalf("kerneltest: template: %v", err)
	}
	name := "craig_t_" + randomHex(t, 8)
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatalf("kerneltest: connect %s: %v", settings.Redact(server), err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	if err := createFromTemplate(ctx, admin, name, tpl); err != nil {
		t.Fatalf("kerneltest: create scratch database: %v", err)
	}
	dbURL := withDatabase(t, server, name)
	pcfg, err := pgsession.ParsePoolConfig(dbURL)
	if err != nil {
		t.Fatalf("kerneltest: pool for %s: %v", name, err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatalf("kerneltest: pool for %s: %v", name, err)
	}
	t.Cleanup(func() {
		pool.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		c, err := pgx.Connect(cctx, server)
		if err != nil {
			t.Errorf("kerneltest: drop %s: %v", name, err)
			return
		}
		defer func() { _ = c.Close(context.Background()) }()
		if _, err := c.Exec(cctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("kerneltest: drop %s: %v", name, err)
		}
	})
	return &DB{Pool: pool, URL: dbURL, Name: name}
}

// ServiceDB is NewDB with every migration set the named service's database
// receives (transport first, then the service's own).
func ServiceDB(t testing.TB, service string) *DB {
	t.Helper()
	sets, err := migrations.ForService(service)
	if err != nil {
		t.Fatal(err)
	}
	return NewDB(t, sets...)
}

// Exec runs one statement on the scratch database and fails the test on error.
func (d *DB) Exec(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	tag, err := d.Pool.Exec(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("kerneltest: exec %q: %v", sql, err)
	}
	return tag.RowsAffected()
}

// Count returns the number of rows a query's single bigint column reports.
func (d *DB) Count(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := d.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("kerneltest: count %q: %v", sql, err)
	}
	return n
}

// AMQPURL returns the RabbitMQ URL for tests (CRAIG_TEST_AMQP_URL, default the
// local broker) after checking the broker accepts TCP connections.
func AMQPURL(t testing.TB) string {
	t.Helper()
	raw := os.Getenv(EnvAMQPURL)
	if raw == "" {
		raw = DefaultAMQPURL
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("kerneltest: %s=%q: %v", EnvAMQPURL, raw, err)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "5672")
	}
	conn, err := net.DialTimeout("tcp", host, probeTimeout)
	if err != nil {
		Missing(t, "RabbitMQ at "+host, err)
	}
	_ = conn.Close()
	return raw
}

// serverURL returns the admin URL of a reachable PostgreSQL server.
func serverURL(t testing.TB) string {
	t.Helper()
	raw := os.Getenv(EnvDatabaseURL)
	explicit := raw != ""
	if !explicit {
		raw = DefaultDatabaseURL
	}
	err := ping(raw)
	if err == nil {
		return raw
	}
	if !explicit {
		if u, cerr := containerURL(); cerr == nil {
			return u
		} else {
			err = errors.Join(err, cerr)
		}
	}
	Missing(t, "PostgreSQL at "+settings.Redact(raw), err)
	return ""
}

func ping(raw string) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	c, err := pgx.Connect(ctx, raw)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

// ensureTemplate creates (once per fingerprint, across concurrent test
// processes) a database with the sets applied and marks it a template.
func ensureTemplate(ctx context.Context, server string, sets []migrations.Set) (string, error) {
	fp, err := fingerprint(sets)
	if err != nil {
		return "", err
	}
	tpl := "craig_tpl_" + fp
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return "", fmt.Errorf("connect %s: %w", settings.Redact(server), err)
	}
	defer func() { _ = admin.Close(context.Background()) }()

	// Serialise template creation across test binaries running in parallel.
	sum := sha256.Sum256([]byte("kerneltest-template:" + tpl))
	lockKey := int64(binary.BigEndian.Uint64(sum[:8]))
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return "", fmt.Errorf("template lock: %w", err)
	}
	defer func() { _, _ = admin.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", lockKey) }()

	var isTemplate *bool
	err = admin.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", tpl).Scan(&isTemplate)
	switch {
	case err == nil && isTemplate != nil && *isTemplate:
		return tpl, nil
	case err == nil:
		// A half-built template from an interrupted run: rebuild it.
		if _, err := admin.Exec(ctx, "DROP DATABASE "+pgx.Identifier{tpl}.Sanitize()+" WITH (FORCE)"); err != nil {
			return "", fmt.Errorf("drop stale template: %w", err)
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return "", fmt.Errorf("look up template: %w", err)
	}
	if err := buildTemplate(ctx, admin, server, tpl, sets); err != nil {
		return "", err
	}
	return tpl, nil
}

// buildTemplate creates database tpl on server, migrates it with sets and
// marks it a template.
func buildTemplate(ctx context.Context, admin *pgx.Conn, server, tpl string, sets []migrations.Set) error {
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{tpl}.Sanitize()); err != nil {
		return fmt.Errorf("create template: %w", err)
	}
	u, err := replaceDatabase(server, tpl)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return err
	}
	db := stdlib.OpenDBFromPool(pool)
	_, merr := migrate.Up(ctx, db, sets, nil)
	_ = db.Close()
	pool.Close()
	if merr != nil {
		return fmt.Errorf("migrate template: %w", merr)
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{tpl}.Sanitize()+" WITH IS_TEMPLATE true"); err != nil {
		return fmt.Errorf("mark template: %w", err)
	}
	return nil
}

func createFromTemplate(ctx context.Context, admin *pgx.Conn, name, tpl string) error {
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{tpl}.Sanitize()
	var err error
	// CREATE DATABASE refuses while another session is connected to the
	// template (55006); that window is short, so retry briefly.
	for attempt := 0; attempt < 50; attempt++ {
		if _, err = admin.Exec(ctx, stmt); err == nil || !strings.Contains(err.Error(), "55006") {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return err
}

// fingerprint hashes the names and contents of every file of every set, so a
// changed migration gets a fresh template.
func fingerprint(sets []migrations.Set) (string, error) {
	h := sha256.New()
	for _, set := range sets {
		var names []string
		err := fs.WalkDir(set.FS, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				names = append(names, p)
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("fingerprint set %s: %w", set.Name, err)
		}
		sort.Strings(names)
		fmt.Fprintf(h, "set %s %s\n", set.Name, set.VersionTable)
		for _, n := range names {
			b, err := fs.ReadFile(set.FS, n)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(h, "file %s %d\n", n, len(b))
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func withDatabase(t testing.TB, server, name string) string {
	u, err := replaceDatabase(server, name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func replaceDatabase(server, name string) (string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", fmt.Errorf("parse server url: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// container holds the one testcontainers PostgreSQL a test process may start.
var container struct {
	once sync.Once
	url  string
	err  error
}
