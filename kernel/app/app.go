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
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/migrations"
)

// Exit codes of a service binary.
const (
	ExitOK    = 0 // the command did what was asked
	ExitFail  = 1 // the command ran and failed
	ExitUsage = 2 // bad arguments or invalid configuration: nothing was touched
	// ExitDisabled: the command needs a feature the operator has not
	// consented to (archive.enabled=false, D11).
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
	// LocalGroups returns the service's own sweep groups (each with its own
	// lock key); nil for a service with none.
	LocalGroups func(T) []sweep.Group
	// Archive is the service's archive-then-prune, or nil when it archives
	// nothing.
	Archive *ArchiveSpec[T]
}

// ArchiveSpec is what an archiving service contributes: its archive
// settings, its archived tables and its bookkeeping (ledger row and event),
// which runs inside each archive's delete transaction.
type ArchiveSpec[T any] struct {
	Settings func(T) archive.Settings
	Tables   func() []archive.TableSpec
	Bookkeep archive.BookkeepFunc
}

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
	cmd, rest := args[0], args[1:]
	if cmd == "archive" {
		if spec.Archive == nil {
			fmt.Fprintf(stderr, "%s: this service archives nothing\n", spec.Name)
			return ExitUsage
		}
		if len(rest) == 0 || rest[0] != "run" {
			fmt.Fprintf(stderr, "%s archive: expected \"archive run\"\n", spec.Name)
			return ExitUsage
		}
		rest = rest[1:]
	}
	fs := flag.NewFlagSet(spec.Name+" "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML settings file")
	var once, asJSON, dryRun, gate, strict *bool
	var budget *int
	var actor *string
	switch cmd {
	case "archive":
		budget = fs.Int("budget", archive.DefaultManualBudget, fmt.Sprintf("most batches this pass may run (1..%d)", archive.MaxManualBudget))
		asJSON = fs.Bool("json", false, "print the pass report as one JSON object")
		actor = fs.String("actor", defaultActor(), "who runs this pass (recorded as archived_by cli:<actor>)")
	case "sweep":
		once = fs.Bool("once", false, "run one sweep cycle now (required)")
		dryRun = fs.Bool("dry-run", false, "delete nothing; report what a cycle would delete")
		asJSON = fs.Bool("json", false, "print the report as one JSON object")
	case "invariants":
		gate = fs.Bool("gate", false, "exit 1 when any invariant is violated")
		asJSON = fs.Bool("json", false, "print the results as one JSON object")
	case "probe":
		strict = fs.Bool("strict", false, "exit 1 when a sweep plan scans a large table")
	case "serve", "migrate":
	default:
		fmt.Fprintf(stderr, "%s: unknown command %q\n", spec.Name, cmd)
		fmt.Fprintf(stderr, usage, spec.Name, strings.ToUpper(spec.Name))
		return ExitUsage
	}
	if err := fs.Parse(rest); err != nil {
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s %s: unexpected arguments %v\n", spec.Name, cmd, fs.Args())
		return ExitUsage
	}
	if cmd == "archive" && (*budget < 1 || *budget > archive.MaxManualBudget || strings.TrimSpace(*actor) == "") {
		fmt.Fprintf(stderr, "%s archive run: --budget must be between 1 and %d and --actor non-empty (got %d, %q)\n", spec.Name, archive.MaxManualBudget, *budget, *actor)
		return ExitUsage
	}
	if cmd == "sweep" && !*once {
		fmt.Fprintf(stderr, "%s sweep: --once is required (the scheduled sweep runs inside serve)\n", spec.Name)
		return ExitUsage
	}

	cfg, err := settings.Load(spec.Name, spec.Defaults, settings.Source{ConfigPath: *configPath, Environ: environ})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", spec.Name, err)
		return ExitUsage
	}
	tr := spec.Transport(cfg)
	logger := newLogger(stderr, tr.LogLevel)

	sets, err := migrations.ForService(spec.Name)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", spec.Name, err)
		return ExitUsage
	}
	rt := runtime[T]{spec: spec, cfg: cfg, tr: tr, logger: logger, sets: sets, stdout: stdout}
	switch cmd {
	case "migrate":
		err = rt.migrate(ctx)
	case "sweep":
		err = rt.sweepOnce(ctx, *dryRun, *asJSON)
	case "serve":
		err = rt.serve(ctx)
	case "invariants":
		var violated bool
		violated, err = rt.invariants(ctx, *asJSON)
		if err == nil && violated && *gate {
			return ExitFail
		}
		if err != nil {
			logger.Error("invariants failed", slog.Any("error", err))
			return ExitUsage // the gate's contract: 2 on error
		}
	case "archive":
		err = rt.archiveRun(ctx, *budget, *asJSON, CLIActor(*actor))
		if errors.Is(err, archive.ErrDisabled) {
			fmt.Fprintf(stderr, "%s archive run: refused: %v\n", spec.Name, err)
			return ExitDisabled
		}
	case "probe":
		var warned bool
		warned, err = rt.probe(ctx)
		if err == nil && warned && *strict {
			return ExitFail
		}
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			logger.Info("stopped", slog.String("command", cmd))
			return ExitFail
		}
		logger.Error("command failed", slog.String("command", cmd), slog.Any("error", err))
		return ExitFail
	}
	return ExitOK
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
