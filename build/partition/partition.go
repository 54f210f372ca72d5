// Package partition converts a service's event_outbox into pg_partman daily partitions.
package partition

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/magefile/mage/mg"

	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/migrations"
)

// Partition groups the partitioning tasks.
type Partition mg.Namespace

// partitionTimeout bounds a conversion (the copy of every outbox row).
const partitionTimeout = time.Hour

// Outbox converts the event_outbox of CRAIG_PARTITION_DATABASE_URL into daily partitions made by pg_partman (retention off: the kernel retires them), in one transaction; stop the service first.
func (Partition) Outbox(ctx context.Context) error {
	dbURL := os.Getenv("CRAIG_PARTITION_DATABASE_URL")
	if dbURL == "" {
		return errors.New("set CRAIG_PARTITION_DATABASE_URL to the service database whose event_outbox to partition")
	}
	ctx, cancel := context.WithTimeout(ctx, partitionTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect %s: %w", settings.Redact(dbURL), err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var partitioned bool
	if err := conn.QueryRow(ctx, `SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass('event_outbox')`).Scan(&partitioned); err != nil {
		return fmt.Errorf("read event_outbox: %w", err)
	}
	if partitioned {
		fmt.Println("event_outbox is already partitioned: nothing to do")
		return nil
	}
	start := time.Now()
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, migrations.PartitionOutboxSQL())
		return err
	})
	if err != nil {
		return fmt.Errorf("convert event_outbox (nothing was changed): %w", err)
	}
	var rows, parts int64
	_ = conn.QueryRow(ctx, `SELECT count(*) FROM event_outbox`).Scan(&rows)
	_ = conn.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'event_outbox'::regclass`).Scan(&parts)
	fmt.Printf("event_outbox: %d rows in %d partitions (pg_partman, daily, retention off) in %v\n", rows, parts, time.Since(start).Round(time.Millisecond))
	return nil
}
