// Package intent makes every object the archiver writes known before it is
// written (ADR-069). An upload is first recorded as an intent naming its
// key, committed before the PUT; the transaction that books the object
// clears the intent. An intent left behind (its booking never committed: a
// SIGKILL, a cancelled request, a database timeout) names an orphan whose
// rows are still hot or booked elsewhere, and a Sweeper destroys every
// version of it and deletes the intent.
//
// The intent row arbitrates between a booking and a sweep: Clear fails
// unless it deletes every intent of the booking, and Sweep holds each
// intent's row lock while it destroys the object, deleting the row in the
// same transaction. Whichever commits first wins; the other changes
// nothing. A sweep therefore never destroys a booked object, whoever runs
// it and whenever. It is run by holders of the archive lease (a pass at
// its start and end, an expungement before it rewrites): no other lease
// work is between its PUT and its booking then.
package intent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/store"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Work names what wrote an object (archive_upload_intents.work).
type Work string

// The kinds of work that upload.
const (
	// WorkArchive is an archive pass's batch (work id: the archive id).
	WorkArchive Work = "archive"
	// WorkExpungement is an expungement's rewrite (work id: the order).
	WorkExpungement Work = "expungement"
)

// ErrSwept: a booking found fewer intents than it wrote: a sweep took
// them, so its objects may be destroyed and it must not book them.
var ErrSwept = errors.New("intent: the upload's intent was swept (its objects are destroyed); the booking is rolled back")

// DB is what Record, Clear and Pending run on: a pool, a connection or a
// transaction.
type DB = queries.DBTX

// Record records the objects keys that work is about to write, about rows
// of table, by actor. It must commit before the first PUT: call it on a
// pool or a connection outside any transaction.
func Record(ctx context.Context, db DB, work Work, workID uuid.UUID, table, actor string, keys ...string) error {
	err := queries.New(db).RecordUploadIntents(ctx, queries.RecordUploadIntentsParams{
		Work: string(work), WorkID: pgtype.UUID{Bytes: workID, Valid: true}, TableName: table, RecordedBy: actor, Keys: keys})
	if err != nil {
		return fmt.Errorf("record the upload intent of %v: %w", keys, err)
	}
	return nil
}

// Clear deletes the intents of keys in the booking's transaction tx; it
// returns ErrSwept unless it deleted every one.
func Clear(ctx context.Context, tx pgx.Tx, keys ...string) error {
	n, err := queries.New(tx).ClearUploadIntents(ctx, keys)
	if err != nil {
		return fmt.Errorf("clear the upload intents of %v: %w", keys, err)
	}
	if n != int64(len(keys)) {
		return fmt.Errorf("%w: %d of %d intents of %v left", ErrSwept, n, len(keys), keys)
	}
	return nil
}

// Pending counts the intents of tables: objects written and not booked.
func Pending(ctx context.Context, db DB, tables []string) (int64, error) {
	n, err := queries.New(db).CountUploadIntents(ctx, tables)
	if err != nil {
		return 0, fmt.Errorf("count upload intents: %w", err)
	}
	return n, nil
}

// sweepBatch bounds the intents one transaction of a sweep locks: each is
// a store round trip or two while the transaction stays open.
const sweepBatch = 100

// Sweeper destroys orphans: the objects of intents nobody holds.
type Sweeper struct {
	pool       *pgxpool.Pool
	store      *store.Store
	objectLock bool
	logger     *slog.Logger
	destroyed  *prometheus.CounterVec
}

// NewSweeper returns a sweeper for the service's database and store.
// objectLock says the bucket has Object Lock (a version may carry a legal
// hold, set by a booking that then rolled back: it is released first).
// destroyed counts orphans destroyed per table
// (archive_orphans_destroyed_total{table}); nil counts nothing.
func NewSweeper(pool *pgxpool.Pool, st *store.Store, objectLock bool, logger *slog.Logger, destroyed *prometheus.CounterVec) *Sweeper {
	return &Sweeper{pool: pool, store: st, objectLock: objectLock, logger: logger, destroyed: destroyed}
}

// Report is what one Sweep did.
type Report struct {
	// Destroyed are the orphans whose every version is gone (their
	// intents deleted).
	Destroyed []string `json:"destroyed"`
	// Failed are the orphans the store did not destroy (their intents
	// stay for the next sweep).
	Failed []string `json:"failed"`
}

// Sweep destroys the objects of every intent no booking holds, a batch
// at a time, each intent's row locked while its object is destroyed and
// deleted in the same transaction. A store failure leaves that intent for
// the next sweep (in Failed) and goes on; a database failure ends the
// sweep with its error.
func (s *Sweeper) Sweep(ctx context.Context) (Report, error) {
	rep := Report{Destroyed: []string{}, Failed: []string{}}
	for {
		n, err := s.batch(ctx, &rep)
		if err != nil || n < sweepBatch {
			return rep, err
		}
	}
}

// batch sweeps one batch; it returns how many intents it locked.
func (s *Sweeper) batch(ctx context.Context, rep *Report) (int, error) {
	locked := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		rows, err := q.LockOrphanIntents(ctx, sweepBatch)
		if err != nil {
			return fmt.Errorf("lock orphan intents: %w", err)
		}
		locked = len(rows)
		for _, r := range rows {
			if skip := failedBefore(rep, r.ObjectKey); skip {
				continue // a store that refused it once in this sweep is not asked again
			}
			if err := s.destroy(ctx, r.ObjectKey); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				rep.Failed = append(rep.Failed, r.ObjectKey)
				s.logger.ErrorContext(ctx, "an orphan upload could not be destroyed; its intent stays for the next sweep",
					slog.String("key", r.ObjectKey), slog.String("table", r.TableName), slog.String("work", r.Work), slog.Any("error", err))
				continue
			}
			if _, err := q.DeleteUploadIntent(ctx, r.ObjectKey); err != nil {
				return fmt.Errorf("delete the intent of %s: %w", r.ObjectKey, err)
			}
			rep.Destroyed = append(rep.Destroyed, r.ObjectKey)
			if s.destroyed != nil {
				s.destroyed.WithLabelValues(r.TableName).Inc()
			}
			s.logger.WarnContext(ctx, "destroyed an orphan upload: its booking never committed (its rows are still hot or in another archive)",
				slog.String("key", r.ObjectKey), slog.String("table", r.TableName), slog.String("work", r.Work),
				slog.String("work_id", uuid.UUID(r.WorkID.Bytes).String()), slog.Time("recorded_at", r.RecordedAt.Time))
		}
		return nil
	})
	if err != nil {
		// What was destroyed stays destroyed (reported so); an intent whose
		// delete rolled back is swept again, and an object already gone is
		// not an error then.
		return 0, err
	}
	if len(rep.Failed) > 0 && locked == len(rep.Failed) {
		return 0, nil // only what the store refuses is left
	}
	return locked, nil
}

func failedBefore(rep *Report, key string) bool {
	for _, k := range rep.Failed {
		if k == key {
			return true
		}
	}
	return false
}

// destroy destroys every version of key; nothing there is not an error.
func (s *Sweeper) destroy(ctx context.Context, key string) error {
	var err error
	if s.objectLock {
		_, err = s.store.DestroyReleased(ctx, key)
	} else {
		_, err = s.store.DestroyAllVersions(ctx, key)
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}
