// Package craigctl is the operator CLI of the retention toolkit: one tool
// for every service's archive lifecycle API (runs, purges, holds, retention
// dates, records, fetching and verifying archives, orphan GC) and for the
// fleet-wide window check no single service can make.
//
// It talks to a service only over its authenticated admin API; it never
// touches a database or the store itself.
package craigctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/spf13/cobra"
)

// Exit codes of craigctl (documented in the runbook; scripts rely on them).
const (
	ExitOK       = 0 // done
	ExitFailed   = 1 // the call failed, or found a problem (verify, fleet check)
	ExitUsage    = 2 // the command line (or a value it sent) is wrong
	ExitDisabled = 3 // the service's archiver is disabled (archive.enabled)
	ExitRefused  = 4 // the operator did not confirm a destructive command
	ExitAuth     = 5 // no token, an invalid one, or one without the scope
)

// IO is what craigctl reads and writes; main passes the process's, tests
// their own.
type IO struct {
	In       io.Reader
	Out, Err io.Writer
	// InTerminal: In is an interactive terminal, so a confirmation prompt
	// may be answered. Without it a destructive command needs --yes.
	InTerminal bool
	// ErrTerminal: Err is a terminal, so progress is drawn on it.
	ErrTerminal bool
	// Getenv reads the environment (CRAIG_TOKEN, CRAIG_<SVC>_URL).
	Getenv func(string) string
	// HTTP is the client to use (nil: one with bounded dials).
	HTTP *http.Client
}

// ExitError carries an exit code with its cause.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

func usageErr(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

// Run runs craigctl with args (without the program name) and returns its
// exit code; errors are printed on io.Err.
func Run(ctx context.Context, args []string, io IO) int {
	root := newRoot(&io)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	code := exitCode(err)
	_, _ = fmt.Fprintf(io.Err, "craigctl: %v\n", err)
	if code == ExitUsage {
		_, _ = fmt.Fprintln(io.Err, "Run 'craigctl --help' for usage.")
	}
	return code
}

// exitCode maps an error to its exit code: an ExitError's own, an API
// answer's by status, anything else (network, decoding) failed.
func exitCode(err error) int {
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.ExitCode()
	}
	return ExitFailed
}

// newRoot builds the command tree.
func newRoot(io *IO) *cobra.Command {
	o := &options{io: io}
	root := &cobra.Command{
		Use:   "craigctl",
		Short: "Operate the CRAIG retention toolkit: archives, holds, purges, fleet windows",
		Long: `craigctl drives a service's authenticated admin API.

Target a service with --service NAME and --url URL (or CRAIG_<SVC>_URL, for
example CRAIG_RULES_URL); the bearer token comes from CRAIG_TOKEN or
--token-file. --json prints the API's JSON for scripts.

Exit codes: 0 ok, 1 failed, 2 usage, 3 archiver disabled, 4 refused by the
operator, 5 authentication or authorization.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErr("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return usageErr("a command is required (archive, disposition, fleet, outbox, schedule, subject)")
		},
	}
	root.SetIn(io.In)
	root.SetOut(io.Out)
	root.SetErr(io.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr("%w", err) })
	o.bindGlobal(root)
	root.AddCommand(newArchiveCmd(o), newFleetCmd(o), newSubjectCmd(o), newScheduleCmd(o), newDispositionCmd(o), newOutboxCmd(o))
	return root
}
