//go:build mage

package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
)

// Test groups the test runs; every one iterates all workspace modules.
type Test mg.Namespace

// All runs EVERYTHING: every workspace module's go test ./... (unit, database and conformance suites), then the fault suite (test:faults); needs PostgreSQL and RabbitMQ, starts the S3 store and the streaming replica (alias: test).
func (t Test) All(ctx context.Context) error {
	mg.CtxDeps(ctx, Store.Up, Replica.Up)
	return errors.Join(runTests(ctx, nil, false), t.Faults(ctx), dropTemplates(ctx))
}

// Unit runs go test -short in every workspace module: what needs no server (database, broker and store tests skip themselves).
func (Test) Unit(ctx context.Context) error { return runTests(ctx, nil, true) }

// Scratch runs every workspace module's go test ./... (unit, database and conformance suites) without the replica and the fault suite; needs PostgreSQL and RabbitMQ, starts the S3 store, edits no server configuration.
func (Test) Scratch(ctx context.Context) error {
	mg.CtxDeps(ctx, Store.Up)
	// The replica tests skip (they are test:all's, which starts one).
	if err := os.Setenv(noReplicaEnv, noReplica); err != nil {
		return err
	}
	return errors.Join(runTests(ctx, nil, false), dropTemplates(ctx))
}

// Conformance runs every conformance suite (TestConformance*: each service's tables, the store drivers); needs PostgreSQL, starts the S3 store.
func (Test) Conformance(ctx context.Context) error {
	mg.CtxDeps(ctx, Store.Up)
	return errors.Join(runTests(ctx, nil, false, "-run", "^TestConformance"), dropTemplates(ctx))
}

// Service runs one service module's go test ./... (for example: go tool mage test:service rules); needs PostgreSQL and RabbitMQ, starts the S3 store.
func (Test) Service(ctx context.Context, name string) error {
	dir := filepath.Join("services", name)
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return fmt.Errorf("test:service %q: no module services/%s (the services are the directories under services/)", name, name)
	}
	mg.CtxDeps(ctx, Store.Up)
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
		return eachModule("test", "", flags...)
	}
	return inModules(dirs, "test", "", flags...)
}

// dropTemplates drops the scratch-database templates of this run's prefix
// (CRAIG_TEST_DB_PREFIX, default craig_t): kerneltest keeps one per
// migration fingerprint while the run's test processes share it.
func dropTemplates(ctx context.Context) error {
	prefix := envOr("CRAIG_TEST_DB_PREFIX", "craig_t")
	server := envOr("CRAIG_TEST_DATABASE_URL", defaultServerURL)
	return withAdmin(ctx, server, func(conn *pgx.Conn, _ string) error {
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

// eachModule runs `go <verb> [-tags <tags>] <flags> ./...` in every workspace
// module that has packages, printing output live, and joins the failures
// after running them all.
func eachModule(verb, tags string, flags ...string) error {
	mods, err := workspaceModules()
	if err != nil {
		return err
	}
	return inModules(mods, verb, tags, flags...)
}

// inModules runs `go <verb> [-tags <tags>] <flags> ./...` in each module
// directory given (eachModule's loop).
func inModules(mods []string, verb, tags string, flags ...string) error {
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
