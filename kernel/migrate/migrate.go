// Package migrate applies the embedded goose migration sets to a service
// database with goose's Provider API. Each set is tracked in its own version
// table, so the transport set and a service's own set version independently.
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"

	"github.com/craig/retention/migrations"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
)

// Lock waits of concurrent migrate runs: every set is applied under goose's
// PostgreSQL session lock (pg_advisory_lock on a connection of its own), so
// replicas booting together with `migrate` apply each migration once and
// the others wait, then find nothing to do.
const (
	// lockPollSeconds is how often a waiting run retries the lock.
	lockPollSeconds = 1
	// lockPolls bounds the wait: 10 minutes (a migration building an index
	// concurrently on a big table takes minutes).
	lockPolls = 600
)

// SetStatus is the state of one migration of one set.
type SetStatus struct {
	Set       string
	Version   int64
	Source    string
	Applied   bool
	AppliedAt string
}

func provider(db *sql.DB, set migrations.Set, logger *slog.Logger) (*goose.Provider, error) {
	store, err := database.NewStore(database.DialectPostgres, set.VersionTable)
	if err != nil {
		return nil, fmt.Errorf("migrate: store for set %s: %w", set.Name, err)
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(lockPollSeconds, lockPolls))
	if err != nil {
		return nil, fmt.Errorf("migrate: session locker: %w", err)
	}
	opts := []goose.ProviderOption{goose.WithStore(store), goose.WithDisableGlobalRegistry(true), goose.WithSessionLocker(locker)}
	if logger != nil {
		opts = append(opts, goose.WithSlog(logger))
	}
	p, err := goose.NewProvider("", db, set.FS, opts...)
	if errors.Is(err, goose.ErrNoMigrations) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("migrate: provider for set %s: %w", set.Name, err)
	}
	return p, nil
}

// Up applies every pending migration of every set, in order. It is
// idempotent: a database already at the latest version is left unchanged.
// It returns the number of migrations applied.
func Up(ctx context.Context, db *sql.DB, sets []migrations.Set, logger *slog.Logger) (int, error) {
	applied := 0
	for _, set := range sets {
		p, err := provider(db, set, logger)
		if err != nil {
			return applied, err
		}
		if p == nil {
			continue // a set with no migrations yet
		}
		results, err := p.Up(ctx)
		applied += len(results)
		if err != nil {
			return applied, fmt.Errorf("migrate: up set %s: %w", set.Name, err)
		}
	}
	return applied, nil
}

// Status reports every migration of every set and whether it is applied.
func Status(ctx context.Context, db *sql.DB, sets []migrations.Set) ([]SetStatus, error) {
	var out []SetStatus
	for _, set := range sets {
		p, err := provider(db, set, nil)
		if err != nil {
			return nil, err
		}
		if p == nil {
			continue
		}
		st, err := p.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("migrate: status set %s: %w", set.Name, err)
		}
		for _, s := range st {
			row := SetStatus{Set: set.Name, Version: s.Source.Version, Source: s.Source.Path, Applied: s.State == goose.StateApplied}
			if row.Applied {
				row.AppliedAt = s.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
			}
			out = append(out, row)
		}
	}
	return out, nil
}
