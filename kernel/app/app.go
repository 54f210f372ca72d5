// Package app is the service binary every CRAIG service shares: its
// subcommands (serve, migrate, sweep), its HTTP surface (/metrics, /healthz,
// /readyz and the admin API) and the wiring of the kernel's workers. A
// service contributes a Spec (its name, settings type and local sweeps); its
// main function is one line:
//
//	func main() { os.Exit(app.Main(exchange.Spec(), os.Args[1:], os.Stdout, os.Stderr, os.Environ())) }
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"os/user"
	"strings"
	"syscall"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/disposition"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/migrations"
)

// Exit codes of a service binary.
const (
	ExitOK    = 0 // the command did what was asked
	ExitFail  = 1 // the command ran and failed
	ExitUsage = 2 // bad arguments or invalid configuration: nothing was touched
	// ExitDisabled: the command needs a feature the operator has not
	// consented to (archive.enabled=false).
	ExitDisabled = 3
)

// Spec describes one service to the shared binary.
type Spec[T any] struct {
	// Name is the service name: it selects the migration sets, the
	// environment prefix CRAIG_<NAME>__ and the prune jitter.
	Name string
	// Defaults is the settings value before the file and environment.
	Defaults T
	// Transport extracts the shared transport settings.
	Transport func(T) settings.Transport
	// Locals are the service's own swept tables, each one value (Local);
	// the kernel derives its group, lock key and window validation.
	Locals []Local[T]
	// Archive is the service's archive-then-prune, or nil when it archives
	// nothing.
	Archive *ArchiveSpec[T]
	// Inbound is the service's consumption of events, or nil when it
	// consumes none.
	Inbound *InboundSpec[T]
	// Migrations is the service's own migration set (its package under
	// migrations/<service>); the kernel adds its own sets around it
	// (MigrationSets).
	Migrations migrations.Set
}

// MigrationSets are every set the service's database receives, in order:
// the kernel's transport set, the service's own, and for an archiving
// service the kernel's archive set.
func (s Spec[T]) MigrationSets() []migrations.Set {
	sets := []migrations.Set{migrations.Transport()}
	if s.Migrations.FS != nil {
		sets = append(sets, s.Migrations)
	}
	if s.Archive != nil {
		sets = append(sets, migrations.Archive())
	}
	return sets
}

// Local is one service-local swept table: a team adds a table with a
// migration, one batch-delete query and this value. The kernel derives the
// rest: the table's sweep group (named after the table), its advisory lock
// key (lease.KeyFor(service, table)), its settings key
// <table>_retention_days (default DefaultWindowDays, 0..3650, 0 disables;
// its environment variable and its row in docs/configuration.md), and, from
// the policy's AgeColumn, Eligible and Keep, its dry run, backlog gauge,
// watchdogs, plan check and conformance suite.
type Local[T any] struct {
	// Sweep is the table's declaration: Table, AgeColumn, Eligible, Keep,
	// Invariant and DeleteBatch. The kernel adds the bounds (PolicyFor):
	// the window from the settings key, batch sizes, timeouts, pacing.
	Sweep prune.Declaration
	// DefaultWindowDays is the window when <table>_retention_days is not
	// set; 0 means the kernel's settings.DefaultLocalRetentionDays (30).
	DefaultWindowDays int
	// Doc describes the table's window in the configuration reference
	// (what its rows are and which the sweep deletes); empty: one derived
	// from the policy.
	Doc string
}

// defaultWindow is the local's window when its key is not set.
func (l Local[T]) defaultWindow() int {
	if l.DefaultWindowDays == 0 {
		return settings.DefaultLocalRetentionDays
	}
	return l.DefaultWindowDays
}

// PolicyFor is the local's policy with its window from the loaded
// settings' transport (its default when they were not loaded, as in a
// test's spec.Defaults).
func (l Local[T]) PolicyFor(tr settings.Transport) prune.Policy {
	p := prune.Policy{Declaration: l.Sweep}
	p.WindowDays = l.defaultWindow()
	if v, ok := tr.Derived.Get(WindowKey(l.Sweep.Table)); ok {
		p.WindowDays = v
	}
	p.RetirePartitions = true // a range-partitioned local table retires whole partitions
	return p
}

// WindowKey is the settings key of a local table's window.
func WindowKey(table string) string { return table + "_retention_days" }

// ArchiveSpec is what an archiving service contributes: its archive
// settings, its archived tables and its bookkeeping (ledger row and event),
// which runs inside each archive's delete transaction.
type ArchiveSpec[T any] struct {
	Settings func(T) archive.Settings
	// Records are the records schedule's settings (records.*); nil: the
	// defaults (no auto_destroy).
	Records func(T) disposition.Settings
	Tables  func() []archive.TableSpec
	// Bookkeeper is the kernel's one bookkeeping, with the service's event
	// type and source (and, for security, its own fleet row).
	Bookkeeper archive.Bookkeeper
}

// Producer is the service as the fleet ledger knows it (security's
// vocabulary), derived from its archive spec; ok is false when it archives
// nothing.
func (s Spec[T]) Producer() (archive.Producer, bool) {
	if s.Archive == nil {
		return archive.Producer{}, false
	}
	return archive.ProducerOf(s.Name, s.Archive.Bookkeeper, s.Archive.Tables()), true
}

// RetentionKey is the settings key of an archived table's retention
// schedule.
func RetentionKey(table string) string { return "archive.retention." + table + "_days" }

// HotWindowKey is the settings key of an archived table's own hot window
// (0: the service's archive.hot_window_days).
func HotWindowKey(table string) string { return "archive.hot_window." + table + "_days" }

// DefaultDatabaseURL is the local development database of a service.
func DefaultDatabaseURL(service string) string {
	return "postgres://postgres@127.0.0.1:5432/craig_" + service + "?sslmode=disable"
}

const usage = `usage: %[1]s <command> [flags]

commands:
  serve                         run the outbox worker (drain + hourly sweep) and the HTTP server
  migrate                       apply the transport and %[1]s migrations (idempotent)
  sweep --once [--dry-run] [--json]
                                run one full sweep cycle now and print a per-table report;
                                --dry-run deletes nothing and reports what a cycle would delete
  invariants [--gate] [--json]  report rows overrunning each sweep's window + grace;
                                --gate exits 1 when any is violated (2 on error)
  probe [--strict]              check the database and EXPLAIN every sweep's selection;
                                --strict exits 1 when a sweep would scan a large table;
                                when the archiver is enabled, also run its store probe
  archive run [--budget N] [--json] [--actor NAME]
                                (archiving services) run one archive pass now; exit 3
                                when the archiver is disabled
  archive index-subjects [--limit N] [--json] [--actor NAME]
                                (archiving services) index by subject the archives booked
                                before the subject index or without a key; exit 3 without
                                archive.subject_key_file or a store, 1 when an archive is left
  reconcile [--json]            (archiving services) after a database restore, re-apply every
                                act of the store's journal the database lacks; exit 1 while
                                still behind, 3 without a store

every command accepts --config FILE (YAML); environment variables CRAIG_%[2]s__<KEY> override it.
`

// Main runs one command until it finishes or the process receives SIGINT or
// SIGTERM, and returns the process exit code.
func Main[T any](spec Spec[T], args []string, stdout, stderr io.Writer, environ []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, spec, args, stdout, stderr, environ)
}

// Run is Main with the caller's context: cancelling ctx stops serve
// gracefully (exit 0) and interrupts the other commands.
func Run[T any](ctx context.Context, spec Spec[T], args []string, stdout, stderr io.Writer, environ []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(stderr, usage, spec.Name, strings.ToUpper(spec.Name))
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	name, cmd, rest, err := lookup(spec, args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", spec.Name, err)
		if errors.Is(err, errUnknownCommand) {
			fmt.Fprintf(stderr, usage, spec.Name, strings.ToUpper(spec.Name))
		}
		return ExitUsage
	}
	fs := flag.NewFlagSet(spec.Name+" "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML settings file")
	cmd.define(fs)
	if err := fs.Parse(rest); err != nil {
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s %s: unexpected arguments %v\n", spec.Name, name, fs.Args())
		return ExitUsage
	}
	if err := cmd.check(); err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", spec.Name, name, err)
		return ExitUsage
	}
	rt, err := newRuntime(spec, *configPath, environ, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", spec.Name, err)
		return ExitUsage
	}
	code, err := cmd.run(ctx, rt)
	switch {
	case err == nil:
		return code
	case errors.Is(err, context.Canceled):
		rt.logger.Info("stopped", slog.String("command", name))
	default:
		rt.logger.Error("command failed", slog.String("command", name), slog.Any("error", err))
	}
	if code == ExitOK {
		code = ExitFail
	}
	return code
}

// CLIActorPrefix marks every act attributed from the command line: an
// operator with database credentials is trusted with them, but a CLI act can
// never pose as the scheduler (archive.SystemActor) or an API identity.
const CLIActorPrefix = "cli:"

// CLIActor is how a CLI act's --actor is recorded: "cli:" + the value, the
// value trimmed, once (an --actor already starting with cli: is not
// prefixed again).
func CLIActor(actor string) string {
	a := strings.TrimSpace(actor)
	if strings.HasPrefix(a, CLIActorPrefix) {
		return a
	}
	return CLIActorPrefix + a
}

// defaultActor attributes a manual CLI pass to the operating-system user.
func defaultActor() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "unknown"
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level)) // validated by settings
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}
