//go:build mage

// Workspace tasks for the CRAIG retention toolkit, run from the repo root as
// "go tool mage <target>". Aliases: "test" runs test:all, "migrate" runs
// migrate:up and "bench" runs bench:run (a mage target cannot share its name
// with a namespace).
package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/migrate"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for goose
	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
	"gopkg.in/yaml.v3"
)

// Aliases gives the README's commands their short names.
var Aliases = map[string]any{
	"test":    Test.All,
	"migrate": Migrate.Up,
	"bench":   Bench.Run,
}

const (
	// defaultServerURL is the local PostgreSQL server (any database on it).
	defaultServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	// defaultAMQPURL is the local RabbitMQ broker.
	defaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
	// adminDatabase is the database connected to for CREATE/DROP DATABASE.
	adminDatabase = "postgres"
	// dialTimeout bounds every server probe and admin connection.
	dialTimeout = 5 * time.Second
)

// ---------------------------------------------------------------- generate

// Generate regenerates the sqlc query code (go tool sqlc generate).
func Generate() error {
	fmt.Println("==> go tool sqlc generate")
	if err := sh.RunV(mg.GoCmd(), "tool", "sqlc", "generate"); err != nil {
		return fmt.Errorf("sqlc generate: %w", err)
	}
	return nil
}

// Gen groups the code-generation checks.
type Gen mg.Namespace

// Verify fails when the committed sqlc code or any module's go.mod/go.sum is stale.
func (Gen) Verify() error {
	mg.Deps(Generate)
	mods, err := workspaceModules()
	if err != nil {
		return err
	}
	var errs []error
	for _, dir := range mods {
		fmt.Printf("==> go mod tidy (%s)\n", relPath(dir))
		if err := goIn(dir, "mod", "tidy"); err != nil {
			errs = append(errs, fmt.Errorf("go mod tidy in %s: %w", relPath(dir), err))
		}
	}
	paths, err := generatedPaths(mods)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if err := changedSinceCommit(paths); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		fmt.Println("generated code and every go.mod/go.sum match the commit")
	}
	return errors.Join(errs...)
}

// changedSinceCommit fails, printing the status and the diff, when git sees
// changes (tracked or untracked) under paths.
func changedSinceCommit(paths []string) error {
	changed, err := sh.Output("git", append([]string{"status", "--porcelain", "--untracked-files=all", "--"}, paths...)...)
	if err != nil {
		return fmt.Errorf("git status: %w", err)
	}
	if changed == "" {
		return nil
	}
	fmt.Println(changed)
	if err := sh.RunV("git", append([]string{"--no-pager", "diff", "--"}, paths...)...); err != nil {
		return fmt.Errorf("git diff: %w", err)
	}
	return fmt.Errorf("stale: generated code or go.mod/go.sum differ from the commit "+
		"(run `go tool mage generate` and `go mod tidy` in the module, then commit):\n%s", changed)
}

// generatedPaths lists what gen:verify checks: every module's go.mod and
// go.sum and every sqlc output directory.
func generatedPaths(mods []string) ([]string, error) {
	var paths []string
	for _, dir := range mods {
		paths = append(paths, filepath.Join(dir, "go.mod"), filepath.Join(dir, "go.sum"))
	}
	outs, err := sqlcOutputDirs("sqlc.yaml")
	if err != nil {
		return nil, err
	}
	return append(paths, outs...), nil
}

// sqlcOutputDirs returns the gen.go.out directory of every sqlc package.
func sqlcOutputDirs(config string) ([]string, error) {
	raw, err := os.ReadFile(config)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", config, err)
	}
	var cfg struct {
		SQL []struct {
			Gen struct {
				Go struct {
					Out string `yaml:"out"`
				} `yaml:"go"`
			} `yaml:"gen"`
		} `yaml:"sql"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("parse %s: %w", config, err)
	}
	var outs []string
	for _, s := range cfg.SQL {
		if s.Gen.Go.Out != "" {
			outs = append(outs, s.Gen.Go.Out)
		}
	}
	return outs, nil
}

// ----------------------------------------------------------------- migrate

// Migrate groups the goose migration targets.
type Migrate mg.Namespace

// Up applies pending migrations to every service database, creating missing databases (alias: migrate).
func (Migrate) Up(ctx context.Context) error {
	for _, service := range migrations.ServiceNames() {
		dbURL := serviceDatabaseURL(service)
		if err := ensureDatabase(ctx, dbURL); err != nil {
			return fmt.Errorf("%s: %w", service, err)
		}
		sets, err := migrations.ForService(service)
		if err != nil {
			return err
		}
		err = withDB(ctx, dbURL, func(db *sql.DB) error {
			n, err := migrate.Up(ctx, db, sets, nil)
			fmt.Printf("%s: %d migration(s) applied (%s)\n", service, n, settings.Redact(dbURL))
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", service, err)
		}
	}
	return nil
}

// Status prints every migration of every service database and whether it is applied.
func (Migrate) Status(ctx context.Context) error {
	for _, service := range migrations.ServiceNames() {
		dbURL := serviceDatabaseURL(service)
		fmt.Printf("\n%s (%s)\n", service, settings.Redact(dbURL))
		exists, err := databaseExists(ctx, dbURL)
		if err != nil {
			return fmt.Errorf("%s: %w", service, err)
		}
		if !exists {
			fmt.Println("  database does not exist: run `go tool mage migrate`")
			continue
		}
		sets, err := migrations.ForService(service)
		if err != nil {
			return err
		}
		err = withDB(ctx, dbURL, func(db *sql.DB) error {
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
func (Migrate) New(set, name string) error {
	sets := append([]string{migrations.TransportSetName}, migrations.ServiceNames()...)
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

// serviceDatabaseURL is CRAIG_<SERVICE>__DATABASE_URL or the local craig_<service>.
func serviceDatabaseURL(service string) string {
	return envOr(serviceDatabaseEnv(service), app.DefaultDatabaseURL(service))
}

func serviceDatabaseEnv(service string) string {
	return settings.EnvVar(service, "database_url")
}

// withDB opens a database/sql handle (pgx driver) for goose.
func withDB(ctx context.Context, dbURL string, fn func(*sql.DB) error) error {
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		return fmt.Errorf("open %s: %w", settings.Redact(dbURL), err)
	}
	defer db.Close()
	pctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		return fmt.Errorf("connect %s: %w", settings.Redact(dbURL), err)
	}
	return fn(db)
}

// ---------------------------------------------------------------- database

// withAdmin connects to the admin database of the server dbURL names.
func withAdmin(ctx context.Context, dbURL string, fn func(conn *pgx.Conn, database string) error) error {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return fmt.Errorf("parse database url %s: %w", settings.Redact(dbURL), err)
	}
	database := cfg.Database
	cfg.Database = adminDatabase
	cctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to %s on %s:%d: %w", adminDatabase, cfg.Host, cfg.Port, err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	return fn(conn, database)
}

func databaseExists(ctx context.Context, dbURL string) (bool, error) {
	var exists bool
	err := withAdmin(ctx, dbURL, func(conn *pgx.Conn, database string) error {
		return conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", database).Scan(&exists)
	})
	if err != nil {
		return false, fmt.Errorf("look up database: %w", err)
	}
	return exists, nil
}

// ensureDatabase creates the database dbURL names if it does not exist.
func ensureDatabase(ctx context.Context, dbURL string) error {
	return withAdmin(ctx, dbURL, func(conn *pgx.Conn, database string) error {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", database).Scan(&exists); err != nil {
			return fmt.Errorf("look up database %s: %w", database, err)
		}
		if exists {
			return nil
		}
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{database}.Sanitize())
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: created concurrently
			return nil
		}
		if err != nil {
			return fmt.Errorf("create database %s: %w", database, err)
		}
		fmt.Println("created database", database)
		return nil
	})
}

// recreateDatabase drops (disconnecting its sessions) and creates the database dbURL names.
func recreateDatabase(ctx context.Context, dbURL string) error {
	return withAdmin(ctx, dbURL, func(conn *pgx.Conn, database string) error {
		ident := pgx.Identifier{database}.Sanitize()
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", database, err)
		}
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
			return fmt.Errorf("create database %s: %w", database, err)
		}
		return nil
	})
}

// withDatabase returns the server URL with its database replaced.
func withDatabase(serverURL, database string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", fmt.Errorf("parse server url: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", fmt.Errorf("server url %s must be a postgres:// URL", settings.Redact(serverURL))
	}
	u.Path = "/" + database
	return u.String(), nil
}

// -------------------------------------------------------------------- test

// Test groups the test runs; every one iterates all workspace modules.
type Test mg.Namespace

// All runs EVERYTHING: unit and scratch suites in every workspace module; needs PostgreSQL and RabbitMQ, starts the S3 store (alias: test).
func (Test) All(ctx context.Context) error {
	mg.CtxDeps(ctx, Store.Up)
	return runTests(true)
}

// Unit runs the unit tests (no scratch tag) of every workspace module; no servers needed.
func (Test) Unit() error { return runTests(false) }

// Scratch runs the scratch suites of every workspace module (starts the S3 store); like test, it includes each package's unit tests.
func (Test) Scratch(ctx context.Context) error {
	mg.CtxDeps(ctx, Store.Up)
	return runTests(true)
}

// runTests runs go test in every workspace module, printing output live, and
// fails when any module fails (after running them all). The scratch suites
// are the files tagged `//go:build scratch`; they need real servers.
func runTests(scratch bool) error {
	tags := ""
	if scratch {
		if err := checkServers(); err != nil {
			return err
		}
		tags = "scratch"
	}
	return eachModule("test", tags, "-count=1")
}

// eachModule runs `go <verb> [-tags <tags>] <flags> ./...` in every workspace
// module that has packages, printing output live, and joins the failures
// after running them all.
func eachModule(verb, tags string, flags ...string) error {
	mods, err := workspaceModules()
	if err != nil {
		return err
	}
	args := []string{verb}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	args = append(append(args, flags...), "./...")
	var errs []error
	for _, dir := range mods {
		ok, err := hasPackages(dir, tags)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			fmt.Printf("==> go %s: no packages in %s, skipped\n", verb, relPath(dir))
			continue
		}
		fmt.Printf("==> go %s (%s)\n", strings.Join(args, " "), relPath(dir))
		if err := goIn(dir, args...); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", relPath(dir), err))
		}
	}
	return errors.Join(errs...)
}

// hasPackages reports whether the module in dir has any package under the
// build tags (go test and go vet fail on a module that has none, such as the
// root module while it holds only this magefile). Broken packages still
// count (-e): the real command reports them.
func hasPackages(dir, tags string) (bool, error) {
	var out bytes.Buffer
	_, err := sh.Exec(nil, &out, io.Discard, mg.GoCmd(), "-C", dir, "list", "-e", "-tags="+tags, "./...")
	if err != nil {
		return false, fmt.Errorf("go list in %s: %w", relPath(dir), err)
	}
	return strings.TrimSpace(out.String()) != "", nil
}

// checkServers fails naming every test server that does not accept TCP
// connections (it does not start them; .ci/run does, and the S3 store is
// started by the test targets' store:up dependency). The addresses are those
// the scratch harness uses: CRAIG_TEST_DATABASE_URL and CRAIG_TEST_AMQP_URL,
// defaulting to the local servers.
func checkServers() error {
	pg, err := pgconn.ParseConfig(envOr("CRAIG_TEST_DATABASE_URL", defaultServerURL))
	if err != nil {
		return fmt.Errorf("CRAIG_TEST_DATABASE_URL: %w", err)
	}
	amqp, err := url.Parse(envOr("CRAIG_TEST_AMQP_URL", defaultAMQPURL))
	if err != nil {
		return fmt.Errorf("CRAIG_TEST_AMQP_URL: %w", err)
	}
	var errs []error
	for _, s := range []struct{ name, addr, env string }{
		{"PostgreSQL", net.JoinHostPort(pg.Host, strconv.Itoa(int(pg.Port))), "CRAIG_TEST_DATABASE_URL"},
		{"RabbitMQ", net.JoinHostPort(amqp.Hostname(), cmp.Or(amqp.Port(), "5672")), "CRAIG_TEST_AMQP_URL"},
	} {
		conn, err := net.DialTimeout("tcp", s.addr, dialTimeout)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s is down: nothing answers at %s (start it, or point %s elsewhere): %w", s.name, s.addr, s.env, err))
			continue
		}
		_ = conn.Close()
	}
	return errors.Join(errs...)
}

// ------------------------------------------------------------------- store

// The local S3 server of the tests and the demo: versitygw (Apache-2.0) with
// its posix backend, pinned, installed once per machine and cached outside
// the repo, listening on loopback only.
const (
	// versitygwVersion pins the server; the cache directory is per version,
	// so a bump installs afresh.
	versitygwVersion = "v1.8.0"
	versitygwPackage = "github.com/versity/versitygw/cmd/versitygw"
	// storeAddr is loopback only: the root credentials below are public.
	storeAddr = "127.0.0.1:7070"
	// storeAccessKey and storeSecretKey are versitygw's root user; the tests'
	// defaults (kerneltest) and the README name the same pair.
	storeAccessKey = "craig"
	storeSecretKey = "craigsecret"
	// storeRegion is what the bucket URL signs with (versitygw's default too).
	storeRegion = "us-east-1"
	storeBucket = "craig-archive"
	// storeHealthPath is versitygw's unauthenticated readiness endpoint
	// (--health): answering it means the S3 API is serving.
	storeHealthPath = "/health"
	// storeStartTimeout bounds the wait for a started versitygw to answer;
	// it starts in well under a second.
	storeStartTimeout = 30 * time.Second
	// storeStopTimeout bounds the wait after SIGTERM before SIGKILL; a
	// graceful shutdown takes about a second.
	storeStopTimeout = 10 * time.Second
	// storeDataDirEnv overrides the data directory; it must be on a
	// filesystem with user extended attributes.
	storeDataDirEnv = "CRAIG_STORE_DATA_DIR"
	// storeCheckXattr is the user extended attribute the data-directory check
	// writes and reads back (versitygw keeps object metadata in user.*).
	storeCheckXattr = "user.craig-retention-check"
)

// Store groups the local S3 server (versitygw) targets.
type Store mg.Namespace

// Up installs versitygw once (cached), starts it on 127.0.0.1:7070 (craig/craigsecret) and creates bucket craig-archive; a no-op when it is up.
func (Store) Up(ctx context.Context) error {
	p, err := storeLayout()
	if err != nil {
		return err
	}
	unlock, err := lockStore(p)
	if err != nil {
		return err
	}
	defer unlock()

	if pid, ok := runningStore(p); ok {
		if err := waitStoreReady(ctx, nil); err != nil {
			return fmt.Errorf("versitygw (pid %d) is running but does not answer (log %s; try `go tool mage store:down`): %w", pid, p.log, err)
		}
		if err := ensureBucket(ctx); err != nil {
			return err
		}
		fmt.Printf("store is up: versitygw pid %d at http://%s, bucket %s (log %s)\n", pid, storeAddr, storeBucket, p.log)
		return nil
	}
	if storeListening() {
		// Not ours (no live pid file), e.g. a CI service container: use it
		// when it is an S3 server that takes our credentials.
		if err := ensureBucket(ctx); err != nil {
			return fmt.Errorf("%s is taken by a process store:up did not start, and it is not a usable S3 server: %w", storeAddr, err)
		}
		fmt.Printf("store is up: an S3 server store:up did not start answers at http://%s; bucket %s is ready\n", storeAddr, storeBucket)
		return nil
	}

	if err := installVersitygw(p); err != nil {
		return err
	}
	data, err := storeDataDir(p)
	if err != nil {
		return err
	}
	start := time.Now()
	pid, err := startVersitygw(ctx, p, data)
	if err != nil {
		return err
	}
	if err := ensureBucket(ctx); err != nil {
		return err
	}
	fmt.Printf("store is up: versitygw pid %d at http://%s in %s, bucket %s, data %s (log %s)\n",
		pid, storeAddr, time.Since(start).Round(time.Millisecond), storeBucket, data, p.log)
	return nil
}

// Down stops the versitygw store:up started (SIGTERM via its pid file, SIGKILL after 10 s); a no-op when none runs.
func (Store) Down() error {
	p, err := storeLayout()
	if err != nil {
		return err
	}
	unlock, err := lockStore(p)
	if err != nil {
		return err
	}
	defer unlock()

	pid, ok := runningStore(p)
	if !ok {
		fmt.Printf("store is not running (no live versitygw in %s)\n", p.pid)
		if storeListening() {
			fmt.Printf("NOTE: something store:up did not start still listens on %s\n", storeAddr)
		}
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop versitygw (pid %d): %w", pid, err)
	}
	deadline := time.Now().Add(storeStopTimeout)
	for processAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if processAlive(pid) {
		fmt.Printf("versitygw (pid %d) ignored SIGTERM for %s: killing it\n", pid, storeStopTimeout)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill versitygw (pid %d): %w", pid, err)
		}
	}
	if err := os.Remove(p.pid); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove pid file: %w", err)
	}
	fmt.Printf("store is down: stopped versitygw pid %d\n", pid)
	return nil
}

// storePaths are store:up's files: the cached binary and the state
// directory (pid, log, lock), under the user cache directory
// ($XDG_CACHE_HOME or ~/.cache)/craig-retention, outside the repo.
type storePaths struct {
	root, binDir, bin, state, pid, log, lock string
}

func storeLayout() (storePaths, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return storePaths{}, fmt.Errorf("user cache directory: %w", err)
	}
	root := filepath.Join(cache, "craig-retention")
	binDir := filepath.Join(root, "versitygw-"+versitygwVersion)
	state := filepath.Join(root, "store")
	return storePaths{
		root:   root,
		binDir: binDir,
		bin:    filepath.Join(binDir, "versitygw"),
		state:  state,
		pid:    filepath.Join(state, "versitygw.pid"),
		log:    filepath.Join(state, "versitygw.log"),
		lock:   filepath.Join(state, "store.lock"),
	}, nil
}

// lockStore serialises store:up and store:down across processes (two test
// runs starting at once must not both start a server).
func lockStore(p storePaths) (unlock func(), err error) {
	if err := os.MkdirAll(p.state, 0o755); err != nil {
		return nil, fmt.Errorf("store state directory: %w", err)
	}
	f, err := os.OpenFile(p.lock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("store lock %s: %w", p.lock, err)
	}
	return func() { _ = f.Close() }, nil // closing releases the flock
}

// runningStore returns the pid of the versitygw the pid file names when that
// process is alive and runs the cached binary; it removes a stale pid file.
func runningStore(p storePaths) (int, bool) {
	raw, err := os.ReadFile(p.pid)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err == nil && pid > 0 && processAlive(pid) {
		// A recycled pid runs something else; a zombie has no cmdline.
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err == nil {
			if argv0, _, _ := strings.Cut(string(cmdline), "\x00"); argv0 == p.bin {
				return pid, true
			}
		}
	}
	_ = os.Remove(p.pid)
	return 0, false
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// storeListening reports whether anything accepts TCP connections on storeAddr.
func storeListening() bool {
	conn, err := net.DialTimeout("tcp", storeAddr, dialTimeout)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// installVersitygw installs the pinned versitygw into its cache directory
// unless it is there. It builds outside the workspace (GOWORK=off) into a
// temporary GOBIN and renames the binary into place, so an interrupted
// install never leaves a partial binary behind.
func installVersitygw(p storePaths) error {
	if fi, err := os.Stat(p.bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return nil
	}
	if err := os.MkdirAll(p.binDir, 0o755); err != nil {
		return fmt.Errorf("versitygw cache directory: %w", err)
	}
	tmp, err := os.MkdirTemp(p.root, "versitygw-install-")
	if err != nil {
		return fmt.Errorf("versitygw install directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	fmt.Printf("==> go install %s@%s into %s (once per machine; takes minutes)\n", versitygwPackage, versitygwVersion, p.binDir)
	start := time.Now()
	env := map[string]string{"GOWORK": "off", "GOBIN": tmp}
	if err := sh.RunWithV(env, mg.GoCmd(), "install", versitygwPackage+"@"+versitygwVersion); err != nil {
		return fmt.Errorf("install versitygw %s: %w", versitygwVersion, err)
	}
	if err := os.Rename(filepath.Join(tmp, "versitygw"), p.bin); err != nil {
		return fmt.Errorf("install versitygw: %w", err)
	}
	fmt.Printf("installed versitygw %s in %s\n", versitygwVersion, time.Since(start).Round(time.Second))
	return nil
}

// storeDataDir picks the data directory: $CRAIG_STORE_DATA_DIR when set,
// else the first of <cache>/craig-retention/store/data and
// <tmp>/craig-retention-store/data whose filesystem keeps user extended
// attributes, where versitygw's posix backend stores object metadata.
func storeDataDir(p storePaths) (string, error) {
	candidates := []string{filepath.Join(p.state, "data"), filepath.Join(os.TempDir(), "craig-retention-store", "data")}
	if dir := os.Getenv(storeDataDirEnv); dir != "" {
		candidates = []string{dir}
	}
	var errs []error
	for _, dir := range candidates {
		err := checkUserXattr(dir)
		if err == nil {
			return dir, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("no usable data directory for versitygw, whose posix backend keeps object metadata in user extended attributes "+
		"(set %s to a writable directory on a filesystem that keeps them: ext4, xfs, btrfs; tmpfs from Linux 6.6):\n%w",
		storeDataDirEnv, errors.Join(errs...))
}

// checkUserXattr creates dir and writes, reads back and removes a user
// extended attribute on a scratch file in it.
func checkUserXattr(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".xattr-check-")
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	name := f.Name()
	_ = f.Close()
	defer func() { _ = os.Remove(name) }()
	if err := syscall.Setxattr(name, storeCheckXattr, []byte("1"), 0); err != nil {
		return fmt.Errorf("%s: set %s: %w", dir, storeCheckXattr, err)
	}
	buf := make([]byte, 8)
	n, err := syscall.Getxattr(name, storeCheckXattr, buf)
	if err != nil || string(buf[:n]) != "1" {
		return fmt.Errorf("%s: read back %s: got %q: %w", dir, storeCheckXattr, buf[:max(n, 0)], err)
	}
	return nil
}

// startVersitygw starts versitygw detached (its own session, so it outlives
// mage and a terminal's Ctrl-C), writes the pid file and waits until it
// answers. The previous run's log is kept as versitygw.log.prev.
func startVersitygw(ctx context.Context, p storePaths, data string) (int, error) {
	if err := os.Rename(p.log, p.log+".prev"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("rotate store log: %w", err)
	}
	logFile, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, fmt.Errorf("store log: %w", err)
	}
	defer func() { _ = logFile.Close() }() // the child keeps its own descriptor
	args := []string{
		"--port", storeAddr, // loopback only (the default ":7070" is every interface)
		"--access", storeAccessKey, "--secret", storeSecretKey, // root user (single-account mode)
		"--region", storeRegion,
		"--health", storeHealthPath,
		"posix", data, // backend: top-level directories are buckets
	}
	fmt.Printf("==> %s %s\n", p.bin, strings.Join(args, " "))
	cmd := exec.Command(p.bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start versitygw: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := os.WriteFile(p.pid, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return 0, fmt.Errorf("write pid file: %w", err)
	}
	if err := waitStoreReady(ctx, exited); err != nil {
		_ = cmd.Process.Kill()
		_ = os.Remove(p.pid)
		tail, _ := os.ReadFile(p.log)
		return 0, fmt.Errorf("versitygw did not come up: %w\n%s", err, tail)
	}
	return pid, nil
}

// waitStoreReady polls the health endpoint until it answers 200, the
// started process exits (exited, may be nil) or storeStartTimeout passes.
func waitStoreReady(ctx context.Context, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, storeStartTimeout)
	defer cancel()
	client := &http.Client{Timeout: dialTimeout}
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+storeAddr+storeHealthPath, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", storeHealthPath, resp.Status)
		}
		last = err
		select {
		case err := <-exited:
			return fmt.Errorf("versitygw exited: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("no answer at http://%s%s within %s: %w", storeAddr, storeHealthPath, storeStartTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ensureBucket creates storeBucket unless it exists (HEAD, then PUT).
func ensureBucket(ctx context.Context) error {
	resp, err := s3Request(ctx, http.MethodHead, "/"+storeBucket)
	if err != nil {
		return fmt.Errorf("head bucket %s: %w", storeBucket, err)
	}
	switch resp.status {
	case http.StatusOK:
		return nil
	case http.StatusNotFound:
	default:
		return fmt.Errorf("head bucket %s at %s: HTTP %d (wrong credentials? store:up uses %s)", storeBucket, storeAddr, resp.status, storeAccessKey)
	}
	resp, err = s3Request(ctx, http.MethodPut, "/"+storeBucket)
	if err != nil {
		return fmt.Errorf("create bucket %s: %w", storeBucket, err)
	}
	// 409 BucketAlreadyOwnedByYou: a concurrent creator won; the bucket is there.
	if resp.status != http.StatusOK && resp.status != http.StatusConflict {
		return fmt.Errorf("create bucket %s: HTTP %d: %s", storeBucket, resp.status, resp.body)
	}
	fmt.Printf("created bucket %s\n", storeBucket)
	return nil
}

type s3Response struct {
	status int
	body   string
}

// s3Request sends one bodiless, path-style S3 request to storeAddr, signed
// with AWS Signature Version 4 as the root user (enough for the bucket
// calls of store:up; the archive itself goes through kernel/store).
func s3Request(ctx context.Context, method, path string) (s3Response, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+storeAddr+path, nil)
	if err != nil {
		return s3Response{}, err
	}
	now := time.Now().UTC()
	amzDate, day := now.Format("20060102T150405Z"), now.Format("20060102")
	emptySHA256 := sha256Hex("")
	req.Header.Set("x-amz-date", amzDate)
	req.Header.Set("x-amz-content-sha256", emptySHA256)
	const signedHeaders = "host;x-amz-content-sha256;x-amz-date"
	canonical := strings.Join([]string{
		method, path, "", // no query
		"host:" + storeAddr, "x-amz-content-sha256:" + emptySHA256, "x-amz-date:" + amzDate, "",
		signedHeaders, emptySHA256,
	}, "\n")
	scope := day + "/" + storeRegion + "/s3/aws4_request"
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + sha256Hex(canonical)
	key := []byte("AWS4" + storeSecretKey)
	for _, part := range []string{day, storeRegion, "s3", "aws4_request"} {
		key = hmacSHA256(key, part)
	}
	req.Header.Set("Authorization", fmt.Sprintf("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s",
		storeAccessKey, scope, signedHeaders, hex.EncodeToString(hmacSHA256(key, toSign))))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s3Response{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return s3Response{}, fmt.Errorf("read response: %w", err)
	}
	return s3Response{status: resp.StatusCode, body: string(body)}, nil
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// ------------------------------------------------------------------- bench

// Bench groups the benchmark targets (bench/, README "Performance").
type Bench mg.Namespace

// Run benchmarks the kernel against the ceiling and its peers on scratch databases and the S3 store (sizes: CRAIG_BENCH_* env), writing bench/results/<date>.json (alias: bench).
func (Bench) Run(ctx context.Context) error {
	mg.CtxDeps(ctx, buildServices, Store.Up)
	fmt.Println("==> go run ./bench/cmd/bench -rules-bin", serviceBinary("rules"))
	return sh.RunV(mg.GoCmd(), "run", "./bench/cmd/bench", "-rules-bin", serviceBinary("rules"))
}

// Smoke runs the benchmark at tiny sizes as its scratch test (TestBenchSmoke, also part of test); starts the S3 store.
func (Bench) Smoke(ctx context.Context) error {
	mg.CtxDeps(ctx, Store.Up)
	fmt.Println("==> go test -tags scratch -count=1 -run TestBenchSmoke ./bench")
	return sh.RunV(mg.GoCmd(), "test", "-tags", "scratch", "-count=1", "-run", "TestBenchSmoke", "./bench")
}

// -------------------------------------------------------------------- lint

// Lint fails on unformatted Go files (gofmt -l) and on go vet findings in every module and the magefile.
func Lint() error {
	var errs []error
	if err := gofmtCheck(); err != nil {
		errs = append(errs, err)
	}
	if err := eachModule("vet", "scratch"); err != nil {
		errs = append(errs, fmt.Errorf("go vet: %w", err))
	}
	fmt.Println("==> go vet -tags mage magefile.go")
	if err := sh.RunV(mg.GoCmd(), "vet", "-tags", "mage", "magefile.go"); err != nil {
		errs = append(errs, fmt.Errorf("go vet magefile.go: %w", err))
	}
	return errors.Join(errs...)
}

// gofmtCheck runs gofmt -l on every Go file git knows of (tracked, or
// untracked and not ignored).
func gofmtCheck() error {
	fmt.Println("==> gofmt -l")
	out, err := sh.Output("git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.go")
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	for f := range strings.Lines(out) {
		f = strings.TrimSpace(f)
		if _, err := os.Stat(f); err == nil && !slices.Contains(files, f) {
			files = append(files, f) // skip deleted-but-tracked files and duplicates
		}
	}
	if len(files) == 0 {
		return nil
	}
	goroot, err := sh.Output(mg.GoCmd(), "env", "GOROOT")
	if err != nil {
		return fmt.Errorf("go env GOROOT: %w", err)
	}
	unformatted, err := sh.Output(filepath.Join(goroot, "bin", "gofmt"), append([]string{"-l"}, files...)...)
	if err != nil {
		return fmt.Errorf("gofmt: %w", err)
	}
	if unformatted != "" {
		return fmt.Errorf("gofmt: these files need formatting (run gofmt -w):\n%s", unformatted)
	}
	return nil
}

// -------------------------------------------------------------------- demo

// demoServices are swept by the demo, in order.
var demoServices = migrations.ServiceNames()

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

// Demo seeds craig_demo_<service> databases, runs one sweep per service, archives the aged rule evaluations and prints before/after counts, archives and ledger rows.
func Demo(ctx context.Context) error {
	server := envOr("CRAIG_DEMO_SERVER_URL", defaultServerURL)
	if _, err := withDatabase(server, adminDatabase); err != nil {
		return fmt.Errorf("CRAIG_DEMO_SERVER_URL: %w", err)
	}
	mg.CtxDeps(ctx, buildServices, Store.Up)
	var rows []demoRow
	reports := map[string]string{}
	for _, service := range demoServices {
		r, report, err := demoService(ctx, server, service)
		if err != nil {
			return fmt.Errorf("demo %s: %w", service, err)
		}
		rows = append(rows, r...)
		reports[service] = report
	}
	printDemoTable(rows)
	for _, service := range demoServices {
		fmt.Printf("\n%s sweep --once --json:\n%s\n", service, reports[service])
	}
	return demoArchive(ctx, server)
}

// demoArchiveBudget lets the demo's one pass archive every aged row it seeds
// (2,500 at the default batch of 1,000).
const demoArchiveBudget = "10"

// demoArchive turns the rules archiver on for one manual pass over the demo
// database (it is OFF by default everywhere, D11) and prints what it wrote.
func demoArchive(ctx context.Context, server string) error {
	dbURL, err := withDatabase(server, "craig_demo_rules")
	if err != nil {
		return err
	}
	storeURL := "s3://" + storeBucket + "?endpoint=http://" + storeAddr + "&region=" + storeRegion + "&use_path_style=true&disable_https=true"
	fmt.Printf("\n==> ARCHIVER ENABLED FOR THE DEMO ONLY: CRAIG_RULES__ARCHIVE__ENABLED=true, store %s\n", storeURL)
	env := map[string]string{
		serviceDatabaseEnv("rules"):        dbURL,
		"CRAIG_RULES__ARCHIVE__ENABLED":    "true",
		"CRAIG_RULES__ARCHIVE__STORE__URL": storeURL,
		"AWS_ACCESS_KEY_ID":                envOr("AWS_ACCESS_KEY_ID", storeAccessKey),
		"AWS_SECRET_ACCESS_KEY":            envOr("AWS_SECRET_ACCESS_KEY", storeSecretKey),
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect %s: %w", settings.Redact(dbURL), err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	before, err := countRows(ctx, conn, []string{"rule_evaluations"})
	if err != nil {
		return err
	}
	bin := serviceBinary("rules")
	fmt.Printf("==> %s archive run --json --budget %s --actor demo:mage\n", bin, demoArchiveBudget)
	out, err := sh.OutputWith(env, bin, "archive", "run", "--json", "--budget", demoArchiveBudget, "--actor", "demo:mage")
	if err != nil {
		return fmt.Errorf("%s archive run: %w\n%s", bin, err, out)
	}
	var pass struct {
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
	if err := json.Unmarshal([]byte(out), &pass); err != nil {
		return fmt.Errorf("%s archive run: unreadable report: %w\n%s", bin, err, out)
	}
	after, err := countRows(ctx, conn, []string{"rule_evaluations"})
	if err != nil {
		return err
	}
	fmt.Printf("\nrule_evaluations: %d before, %d after (more: %v)\n\n", before["rule_evaluations"], after["rule_evaluations"], pass.More)
	fmt.Println("| archive_id | records | data_key | manifest_key |")
	fmt.Println("|---|---:|---|---|")
	for _, t := range pass.Tables {
		for _, a := range t.Archives {
			fmt.Printf("| %s | %d | %s | %s |\n", a.ArchiveID, a.RecordCount, a.DataKey, a.ManifestKey)
		}
	}
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

// Build compiles every service binary into bin/ (bin/exchange, bin/financial, bin/rules, bin/security).
func Build() error { return buildServices() }

// buildServices builds every service binary into bin/<service>.
func buildServices() error {
	for _, service := range demoServices {
		fmt.Printf("==> go build -o bin/%[1]s ./services/%[1]s/cmd/%[1]s\n", service)
		if err := sh.RunV(mg.GoCmd(), "build", "-o", serviceBinary(service), "./services/"+service+"/cmd/"+service); err != nil {
			return fmt.Errorf("build %s: %w", service, err)
		}
	}
	return nil
}

func serviceBinary(service string) string { return filepath.Join("bin", service) }

// demoService recreates, migrates and seeds one service's demo database, then
// counts its tables around one sweep. It returns the table rows and the
// sweep's JSON report (indented).
func demoService(ctx context.Context, server, service string) ([]demoRow, string, error) {
	dbURL, err := withDatabase(server, "craig_demo_"+service)
	if err != nil {
		return nil, "", err
	}
	fmt.Printf("\n==> %s: recreate %s\n", service, settings.Redact(dbURL))
	if err := recreateDatabase(ctx, dbURL); err != nil {
		return nil, "", err
	}
	env := map[string]string{serviceDatabaseEnv(service): dbURL}
	bin := serviceBinary(service)
	fmt.Printf("==> %s migrate\n", bin)
	if err := sh.RunWithV(env, bin, "migrate"); err != nil {
		return nil, "", fmt.Errorf("%s migrate: %w", bin, err)
	}

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, "", fmt.Errorf("connect %s: %w", settings.Redact(dbURL), err)
	}
	defer func() { _ = conn.Close(context.Background()) }()

	// Every service gets the transport seed, then its own seed if it has one.
	for _, seed := range []string{filepath.Join("queries", "demo", "transport.sql"), filepath.Join("queries", "demo", service+".sql")} {
		if _, err := os.Stat(seed); errors.Is(err, fs.ErrNotExist) && !strings.HasSuffix(seed, "transport.sql") {
			continue
		}
		fmt.Printf("==> seed %s\n", seed)
		if err := execFile(ctx, conn, seed); err != nil {
			return nil, "", err
		}
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
	return rows, pretty, nil
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
	sets, err := migrations.ForService(service)
	if err != nil {
		return nil, err
	}
	var versionTables []string
	for _, s := range sets {
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

// ------------------------------------------------------------------ shared

// workspaceModules returns the directory of every module of go.work.
func workspaceModules() ([]string, error) {
	work, err := sh.Output(mg.GoCmd(), "env", "GOWORK")
	if err != nil {
		return nil, fmt.Errorf("go env GOWORK: %w", err)
	}
	if work == "" || work == "off" {
		return nil, errors.New("not in workspace mode (GOWORK is off or go.work is missing): run from the repo root")
	}
	out, err := sh.Output(mg.GoCmd(), "list", "-m", "-f", "{{.Dir}}")
	if err != nil {
		return nil, fmt.Errorf("go list -m: %w", err)
	}
	var dirs []string
	for d := range strings.Lines(out) {
		if d = strings.TrimSpace(d); d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs, nil
}

// goIn runs `go <args>` in dir, printing output live.
func goIn(dir string, args ...string) error {
	return sh.RunV(mg.GoCmd(), append([]string{"-C", dir}, args...)...)
}

// relPath shows a path relative to the working directory when it can.
func relPath(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return path
	}
	return rel
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
