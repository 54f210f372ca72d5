// Package kerneltest is the scratch-database test harness: every test gets a
// database of its own on a real PostgreSQL server, migrated once into a
// template (per migration-set fingerprint) and copied per test, and dropped
// when the test ends.
//
// The server is named by CRAIG_TEST_DATABASE_URL (default: the local server
// at 127.0.0.1:5432, user postgres). Where none is reachable and a Docker
// engine is, testcontainers-go starts one for the test process. A test that
// needs a server and has none FAILS with one line saying what to set (a
// missing server never passes silently, in CI or not); `go test -short`
// skips every test that needs a server.
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
	"regexp"
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
	// EnvDBPrefix names the prefix of every database the harness creates:
	// scratch databases <prefix>_<random>, templates <prefix>_tpl_<hash>.
	EnvDBPrefix = "CRAIG_TEST_DB_PREFIX"
)

// DefaultDBPrefix is the database name prefix when CRAIG_TEST_DB_PREFIX is
// unset: short, and unlike any service database (craig_<service>).
const DefaultDBPrefix = "craig_t"

// dbPrefixPattern keeps a prefix a plain lower-case identifier short enough
// that <prefix>_tpl_<16 hex> fits PostgreSQL's 63-byte names.
var dbPrefixPattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// DBPrefix returns the database name prefix (CRAIG_TEST_DB_PREFIX or the
// default), or an error naming the variable when the value is not a plain
// lower-case identifier of at most 32 characters.
func DBPrefix() (string, error) {
	p := os.Getenv(EnvDBPrefix)
	if p == "" {
		return DefaultDBPrefix, nil
	}
	if !dbPrefixPattern.MatchString(p) {
		return "", fmt.Errorf("%s=%q: want a lower-case identifier of at most 32 characters ([a-z][a-z0-9_]*)", EnvDBPrefix, p)
	}
	return p, nil
}

// TemplatePrefix is the name prefix of the harness's templates under a
// database prefix (go tool mage drops them when a test run ends).
func TemplatePrefix(dbPrefix string) string { return dbPrefix + "_tpl_" }

// Defaults: the servers this machine kind runs before a session starts.
const (
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	DefaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
)

// probeTimeout bounds how long the harness waits to learn that a server is
// down; the servers are local, so a second is generous.
const probeTimeout = 2 * time.Second

// Missing fails the test on a required server that is not reachable, in one
// line naming what to set or start: a missing server must never pass
// silently, in CI or on a laptop (go test -short skips these tests instead).
func Missing(t testing.TB, what, fix string, err error) {
	t.Helper()
	t.Fatalf("%s is not reachable (%s): %s; go test -short skips the tests that need it", what, oneLine(err), fix)
}

// Optional reports a server only some suites need (the streaming replica)
// that is not reachable: a failure under CI=true, where every suite runs,
// and a skip elsewhere (go tool mage test:scratch runs without one).
func Optional(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not reachable (%s); CI=true runs every suite", what, oneLine(err))
	}
	t.Skipf("%s is not reachable (%s); set CI=true to make this a failure", what, oneLine(err))
}

// NeedsServer skips the test under go test -short: it needs a real server.
func NeedsServer(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: -short skips it", what)
	}
}

// oneLine joins an error's lines (errors.Join and pgx separate with newlines).
func oneLine(err error) string {
	if err == nil {
		return "no answer"
	}
	return strings.Join(strings.Fields(err.Error()), " ")
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
	NeedsServer(t, "PostgreSQL")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	prefix, err := DBPrefix()
	if err != nil {
		t.Fatalf("kerneltest: %v", err)
	}
	server := serverURL(t)
	tpl, err := ensureTemplate(ctx, server, TemplatePrefix(prefix), sets)
	if err != nil {
		t.Fatalf("kerneltest: template: %v", err)
	}
	name := prefix + "_" + randomHex(t, 8)
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
	NeedsServer(t, "RabbitMQ")
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
		Missing(t, "RabbitMQ at "+host, "set "+EnvAMQPURL+" or start the broker", err)
	}
	_ = conn.Close()
	return raw
}

// ServerURL is the admin URL of the reachable test server (for a test that
// runs a program creating databases of its own, such as the demo); a
// server that is not reachable fails the test (Missing).
func ServerURL(t testing.TB) string {
	t.Helper()
	return serverURL(t)
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
	Missing(t, "PostgreSQL at "+settings.Redact(raw), "set "+EnvDatabaseURL+", start a server, or start Docker (testcontainers-go then starts one)", err)
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
func ensureTemplate(ctx context.Context, server, tplPrefix string, sets []migrations.Set) (string, error) {
	fp, err := fingerprint(sets)
	if err != nil {
		return "", err
	}
	tpl := tplPrefix + fp
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
		// A half-built template from an interrupted run: rebuild it (IF
		// EXISTS: a sweep of a dead run's databases may drop it first).
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{tpl}.Sanitize()+" WITH (FORCE)"); err != nil {
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
