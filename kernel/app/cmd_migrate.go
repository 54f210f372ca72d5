package app

import (
	"context"
	"flag"
	"log/slog"

	"github.com/craig/retention/kernel/migrate"
	"github.com/jackc/pgx/v5/stdlib"
)

// migrateCmd is `<svc> migrate`: apply the transport and the service's
// migrations (goose, idempotent, under goose's session lock).
type migrateCmd[T any] struct{}

func (*migrateCmd[T]) define(*flag.FlagSet) {}
func (*migrateCmd[T]) check() error         { return nil }
func (*migrateCmd[T]) run(ctx context.Context, rt *runtime[T]) (int, error) {
	return exitFor(rt.migrate(ctx))
}

func (r *runtime[T]) migrate(ctx context.Context) error {
	pool, err := r.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer func() { _ = db.Close() }()
	n, err := migrate.Up(ctx, db, r.sets, nil)
	if err != nil {
		return err
	}
	if n > 0 {
		r.logger.Info("migrations applied", slog.String("service", r.spec.Name), slog.Int("applied", n))
	} else {
		r.logger.Debug("migrations already current", slog.String("service", r.spec.Name))
	}
	return nil
}
