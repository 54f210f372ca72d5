// Command craigctl is the operator CLI of the CRAIG retention toolkit; see
// docs/runbook.md and `craigctl --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/craig/retention/internal/craigctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := craigctl.Run(ctx, os.Args[1:], craigctl.IO{
		In: os.Stdin, Out: os.Stdout, Err: os.Stderr,
		InTerminal:  term.IsTerminal(int(os.Stdin.Fd())),  //nolint:gosec // a file descriptor fits an int
		ErrTerminal: term.IsTerminal(int(os.Stderr.Fd())), //nolint:gosec // a file descriptor fits an int
		Getenv:      os.Getenv,
	})
	stop()
	os.Exit(code)
}
