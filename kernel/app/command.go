package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
)

// command is one subcommand of the shared binary, one file each
// (cmd_<name>.go): its flags, their validation, and its run.
type command[T any] interface {
	// define registers the command's flags (besides --config).
	define(fs *flag.FlagSet)
	// check validates the parsed flags. An error is a usage error: exit 2,
	// and nothing was touched (settings are not even loaded).
	check() error
	// run runs the command and returns its exit code; an error is logged
	// (a cancellation at INFO) and makes a zero code ExitFail.
	run(ctx context.Context, rt *runtime[T]) (int, error)
}

// errUnknownCommand is returned by lookup for a name no command has.
var errUnknownCommand = errors.New("unknown command")

// lookup finds the command args name, and returns its name, the command
// and its arguments ("archive run" is one command of archiving services).
func lookup[T any](spec Spec[T], args []string) (string, command[T], []string, error) {
	name, rest := args[0], args[1:]
	switch name {
	case "serve":
		return name, &serveCmd[T]{}, rest, nil
	case "migrate":
		return name, &migrateCmd[T]{}, rest, nil
	case "sweep":
		return name, &sweepCmd[T]{}, rest, nil
	case "invariants":
		return name, &invariantsCmd[T]{}, rest, nil
	case "probe":
		return name, &probeCmd[T]{}, rest, nil
	case "reconcile":
		if spec.Archive == nil {
			return name, nil, nil, errors.New("this service archives nothing: it keeps no journal of acts")
		}
		return name, &reconcileCmd[T]{}, rest, nil
	case "archive":
		if spec.Archive == nil {
			return name, nil, nil, errors.New("this service archives nothing")
		}
		switch {
		case len(rest) > 0 && rest[0] == "run":
			return name, &archiveCmd[T]{}, rest[1:], nil
		case len(rest) > 0 && rest[0] == "index-subjects":
			return name + " index-subjects", &indexSubjectsCmd[T]{}, rest[1:], nil
		}
		return name, nil, nil, errors.New(`archive: expected "archive run" or "archive index-subjects"`)
	}
	return name, nil, nil, fmt.Errorf("%w %q", errUnknownCommand, name)
}

// exitFor is the exit code of a command that either succeeded or failed.
func exitFor(err error) (int, error) {
	if err != nil {
		return ExitFail, err
	}
	return ExitOK, nil
}
