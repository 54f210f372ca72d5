package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/craig/retention/kernel/migrate"
	"github.com/craig/retention/kernel/pgsession"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// dbPrefix starts the name of every database the benchmark creates; the run
// id follows, so concurrent runs never share a database.
const dbPrefix = "craig_bench_"

// server creates and drops the run's scratch databases. Only databases it
// created itself are ever dropped.
type server struct {
	url     string
	runID   string
	version int // server_version_num

	mu      sync.Mutex
	admin   *pgx.Conn
	created []string
}

func newServer(ctx context.Context, rawURL string) (*server, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(cctx, rawURL)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", settings.Redact(rawURL), err)
	}
	s := &server{url: rawURL, admin: admin, runID: randomHex(4)}
	if err := admin.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&s.version); err != nil {
		_ = admin.Close(ctx)
		return nil, fmt.Errorf("server version: %w", err)
	}
	return s, nil
}

// name is the run's database name for suffix.
func (s *server) name(suffix string) string { return dbPrefix + s.runID + "_" + suffix }

// dbURL connects to one of the server's databases.
func (s *server) dbURL(name string) (string, error) {
	u, err := url.Parse(s.url)
	if err != nil {
		return "", fmt.Errorf("parse database url: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// create makes a database, empty or as a copy of template (a database of
// this run nobody is connected to), and returns its URL.
func (s *server) create(ctx context.Context, name, template string) (string, error) {
	if !strings.HasPrefix(name, dbPrefix+s.runID+"_") {
		return "", fmt.Errorf("refusing to create %q: not a database of this run", name)
	}
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		stmt += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
		if s.version >= 150000 {
			// A file copy writes no WAL for the copied pages and leaves every
			// copy in the same state (right after a checkpoint).
			stmt += " STRATEGY FILE_COPY"
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.admin.Exec(ctx, stmt); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	s.created = append(s.created, name)
	return s.dbURL(name)
}

// drop removes a database this run created (disconnecting its sessions).
func (s *server) drop(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.created, name)
	if i < 0 {
		return fmt.Errorf("refusing to drop %q: this run did not create it", name)
	}
	if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	s.created = slices.Delete(s.created, i, i+1)
	return nil
}

// close drops every database the run still has and closes the admin
// connection.
func (s *server) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	for _, name := range slices.Clone(s.created) {
		if err := s.drop(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, s.admin.Close(ctx))
	return errors.Join(errs...)
}

// migrateDB applies migration sets to a database of the run.
func migrateDB(ctx context.Context, dbURL string, sets []migrations.Set) error {
	pool, err := pgsession.NewPool(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer func() { _ = db.Close() }()
	if _, err := migrate.Up(ctx, db, sets, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// withConn runs fn on a fresh connection to dbURL.
func withConn(ctx context.Context, dbURL string, fn func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect %s: %w", settings.Redact(dbURL), err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	return fn(conn)
}

// scratch is one database copied from a template for one measurement.
type scratch struct {
	name, url string
}

// copyOf creates a fresh copy of template for one measurement.
func (s *server) copyOf(ctx context.Context, template, label string, round int) (scratch, error) {
	name := s.name(fmt.Sprintf("%s_r%d_%s", template[len(dbPrefix+s.runID+"_"):], round, label))
	u, err := s.create(ctx, name, template)
	if err == nil {
		settle()
	}
	return scratch{name: name, url: u}, err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}
