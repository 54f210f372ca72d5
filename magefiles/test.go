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
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
)

// Test groups the test runs; every one iterates all workspace modules.
type Test mg.Namespace

// All runs EVERYTHING: unit and scratch suites in every workspace module, then the fault suite (test:faults); needs PostgreSQL and RabbitMQ, starts the S3 store and the streaming replica (alias: test).
func (t Test) All(ctx context.Context) error {
	mg.CtxDeps(ctx, Store.Up, Replica.Up)
	return errors.Join(runTests(true), t.Faults(ctx))
}

// Unit runs the unit tests (no scratch tag) of every workspace module; no servers needed.
func (Test) Unit() error { return runTests(false) }

// Scratch runs the scratch suites of every workspace module (starts the S3 store); like test, it includes each package's unit tests.
func (t Test) Scratch(ctx context.Context) error { return t.All(ctx) }

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
