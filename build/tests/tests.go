// Package tests runs the test suites: every module's, the unit-only and conformance subsets, one service's, and the fault suite with its fuzzers.
package tests

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/craig/retention/build/replica"

	"github.com/craig/retention/build/pgadmin"
	"github.com/craig/retention/build/store"
	"github.com/craig/retention/build/workspace"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/magefile/mage/mg"
)

// Test groups the test runs; every one iterates all workspace modules.
type Test mg.Namespace

// All runs EVERYTHING: every workspace module's go test ./... (unit, database and conformance suites), then the fault suite (test:faults); needs PostgreSQL and RabbitMQ, starts the S3 store and the streaming replica (alias: test).
func (t Test) All(ctx context.Context) error {
	mg.CtxDeps(ctx, store.Store.Up, replica.Replica.Up)
	return errors.Join(runTests(ctx, nil, false), t.Faults(ctx), dropTemplates(ctx))
}

// Clean drops the scratch-database templates a plain go test left (<prefix>_tpl_*, CRAIG_TEST_DB_PREFIX, default craig_t): marked as templates, dropdb refuses them; the other test targets drop them when they end.
func (Test) Clean(ctx context.Context) error { return dropTemplates(ctx) }

// Unit runs go test -short in every workspace module: what needs no server (database, broker and store tests skip themselves).
func (Test) Unit(ctx context.Context) error { return runTests(ctx, nil, true) }

// Scratch runs every workspace module's go test ./... (unit, database and conformance suites) without the replica and the fault suite; needs PostgreSQL and RabbitMQ, starts the S3 store, edits no server configuration.
func (Test) Scratch(ctx context.Context) error {
	mg.CtxDeps(ctx, store.Store.Up)
	// The replica tests skip (they are test:all's, which starts one).
	if err := os.Setenv(noReplicaEnv, noReplica); err != nil {
		return err
	}
	return errors.Join(runTests(ctx, nil, false), dropTemplates(ctx))
}

// Conformance runs every conformance suite (TestConformance*: each service's tables, the store drivers); needs PostgreSQL, starts the S3 store.
func (Test) Conformance(ctx context.Context) error {
	mg.CtxDeps(ctx, store.Store.Up)
	return errors.Join(runTests(ctx, nil, false, "-run", "^TestConformance"), dropTemplates(ctx))
}

// AddTable runs the proof that a table is one registration in full: on a copy of the repository with the tables of e2e/testdata/addtable added (a swept table to exchange and financial, an archived one to rules and security), go tool mage generate, then go test work at the copy's root (every module's whole suite; about half an hour here); .ci/run's e2e runs the same proof with the services' suites only. Needs PostgreSQL and RabbitMQ, starts the S3 store.
func (Test) AddTable(ctx context.Context) error {
	mg.CtxDeps(ctx, store.Store.Up)
	if err := checkServers(); err != nil {
		return err
	}
	if err := os.Setenv(noReplicaEnv, noReplica); err != nil {
		return err
	}
	if err := os.Setenv("CRAIG_ADDTABLE_WORK", "1"); err != nil {
		return err
	}
	return errors.Join(workspace.GoIn(".", "test", "-count=1", "-timeout", "85m", "-v", "-run", "^TestAddTablesToExistingServices$", "./e2e/"),
		dropTemplates(ctx))
}

// Service runs one service module's go test ./... (for example: go tool mage test:service rules); needs PostgreSQL and RabbitMQ, starts the S3 store.
func (Test) Service(ctx context.Context, name string) error {
	dir := filepath.Join("services", name)
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return fmt.Errorf("test:service %q: no module services/%s (the services are the directories under services/)", name, name)
	}
	mg.CtxDeps(ctx, store.Store.Up)
	if err := os.Setenv(noReplicaEnv, noReplica); err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	return errors.Join(runTests(ctx, []string{abs}, false), dropTemplates(ctx))
}

// The replica's URL variable, and the value that says there is none (its
// tests skip: kerneltest.Replica).
const (
	noReplicaEnv = "CRAIG_TEST_REPLICA_URL"
	noReplica    = "none"
)

// runTests runs go test ./... in the given module directories (nil: every
// workspace module), printing output live, and fails when any module fails
// (after running them all). short passes -short: no server needed.
func runTests(_ context.Context, dirs []string, short bool, extra ...string) error {
	// 20 minutes, not go test's 10: e2e's proof that a table is one
	// registration runs four suites on a copy of the repository.
	flags := []string{"-count=1", "-timeout", "20m"}
	if short {
		flags = append(flags, "-short")
	} else if err := checkServers(); err != nil {
		return err
	}
	flags = append(flags, extra...)
	if dirs == nil {
		return workspace.EachModule("test", "", flags...)
	}
	return workspace.InModules(dirs, "test", "", flags...)
}

// dropTemplates drops the scratch-database templates of this run's prefix
// (CRAIG_TEST_DB_PREFIX, default craig_t): kerneltest keeps one per
// migration fingerprint while the run's test processes share it.
func dropTemplates(ctx context.Context) error {
	prefix := workspace.EnvOr("CRAIG_TEST_DB_PREFIX", "craig_t")
	server := workspace.EnvOr("CRAIG_TEST_DATABASE_URL", workspace.DefaultServerURL)
	return pgadmin.WithAdmin(ctx, server, func(conn *pgx.Conn, _ string) error {
		rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE starts_with(datname, $1) AND datistemplate", prefix+"_tpl_")
		if err != nil {
			return fmt.Errorf("list test templates: %w", err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("list test templates: %w", err)
		}
		for _, n := range names {
			id := pgx.Identifier{n}.Sanitize()
			if _, err := conn.Exec(ctx, "ALTER DATABASE "+id+" IS_TEMPLATE false"); err != nil {
				return fmt.Errorf("drop test template %s: %w", n, err)
			}
			if _, err := conn.Exec(ctx, "DROP DATABASE "+id+" WITH (FORCE)"); err != nil {
				return fmt.Errorf("drop test template %s: %w", n, err)
			}
		}
		if len(names) > 0 {
			fmt.Printf("==> dropped %d test template(s) %s_tpl_*\n", len(names), prefix)
		}
		return nil
	})
}

// checkServers fails naming every test server that does not accept TCP
// connections (it does not start them; .ci/run does, and the S3 store is
// started by the test targets' store:up dependency). The addresses are those
// the scratch harness uses: CRAIG_TEST_DATABASE_URL and CRAIG_TEST_AMQP_URL,
// defaulting to the local servers.
func checkServers() error {
	pg, err := pgconn.ParseConfig(workspace.EnvOr("CRAIG_TEST_DATABASE_URL", workspace.DefaultServerURL))
	if err != nil {
		return fmt.Errorf("CRAIG_TEST_DATABASE_URL: %w", err)
	}
	amqp, err := url.Parse(workspace.EnvOr("CRAIG_TEST_AMQP_URL", workspace.DefaultAMQPURL))
	if err != nil {
		return fmt.Errorf("CRAIG_TEST_AMQP_URL: %w", err)
	}
	var errs []error
	for _, s := range []struct{ name, addr, env string }{
		{"PostgreSQL", net.JoinHostPort(pg.Host, strconv.Itoa(int(pg.Port))), "CRAIG_TEST_DATABASE_URL"},
		{"RabbitMQ", net.JoinHostPort(amqp.Hostname(), cmp.Or(amqp.Port(), "5672")), "CRAIG_TEST_AMQP_URL"},
	} {
		conn, err := net.DialTimeout("tcp", s.addr, workspace.DialTimeout)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s is down: nothing answers at %s (start it, or point %s elsewhere): %w", s.name, s.addr, s.env, err))
			continue
		}
		_ = conn.Close()
	}
	return errors.Join(errs...)
}
