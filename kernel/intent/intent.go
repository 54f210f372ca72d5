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
	"time"

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
	// WorkDisposition is a disposition batch's rewrite (work id: the
	// batch).
	WorkDisposition Work = "disposition"
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

// LateUploadWindow is how long after an orphan's first destroy every
// sweep destroys its key again before its intent is deleted: a PUT a
// dying or cancelled client sent may still land after the destroy (a
// proxy or the store's own buffering holds it), and an S3 store takes a
// signed request for 15 minutes after its signature's time
// (RequestTimeTooSkewed after that); 5 minutes more cover clock skew.
const LateUploadWindow = 20 * time.Minute

// Pending counts the intents of tables whose object may still exist: not
// destroyed yet, or destroyed within the sweeper's late-upload window;
// those of the work except (uuid.Nil: none) are not counted.
func (s *Sweeper) Pending(ctx context.Context, tables []string, except uuid.UUID) (int64, error) {
	p := queries.CountUploadIntentsParams{Tables: tables, LateSeconds: s.late.Seconds()}
	if except != uuid.Nil {
		p.ExceptWorkID = pgtype.UUID{Bytes: except, Valid: true}
	}
	n, err := queries.New(s.pool).CountUploadIntents(ctx, p)
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
	late       time.Duration
}

// NewSweeper returns a sweeper for the service's database and store.
// objectLock says the bucket has Object Lock (a version may carry a legal
// hold, set by a booking that then rolled back: it is released first).
// destroyed counts orphans destroyed per table
// (archive_orphans_destroyed_total{table}); nil counts nothing.
func NewSweeper(pool *pgxpool.Pool, st *store.Store, objectLock bool, logger *slog.Logger, destroyed *prometheus.CounterVec) *Sweeper {
	return &Sweeper{pool: pool, store: st, objectLock: objectLock, logger: logger, destroyed: destroyed, late: LateUploadWindow}
}

// WithLateWindow returns a copy of the sweeper whose late-upload window is
// d (tests; LateUploadWindow otherwise).
func (s *Sweeper) WithLateWindow(d time.Duration) *Sweeper {
	c := *s
	c.late = d
	return &c
}

// Report is what one Sweep did.
type Report struct {
	// Destroyed are the orphans whose every version this sweep destroyed
	// (the first time, or a late upload that landed since).
	Destroyed []string `json:"destroyed"`
	// Forgotten are the intents deleted: their late-upload window passed
	// and the key was destroyed once more.
	Forgotten []string `json:"forgotten"`
	// Failed are the orphans the store did not destroy (their intents
	// stay for the next sweep).
	Failed []string `json:"failed"`
}

// Sweep destroys the objects of every intent no booking holds, a batch at
// a time, each intent's row locked while its key is destroyed. The first
// destroy marks the intent; each later sweep destroys the key again (a
// late upload that landed is destroyed, logged and counted), and once the
// late-upload window has passed since the first destroy, the intent is
// deleted. A store failure leaves that intent for the next sweep (in
// Failed) and goes on; a database failure ends the sweep with its error.
func (s *Sweeper) Sweep(ctx context.Context) (Report, error) {
	rep := Report{Destroyed: []string{}, Forgotten: []string{}, Failed: []string{}}
	if _, err := queries.New(s.pool).ClearBookedIntents(ctx); err != nil {
		return rep, fmt.Errorf("clear the intents of booked objects: %w", err)
	}
	after := ""
	for {
		n, last, err := s.batch(ctx, after, &rep)
		if err != nil || n < sweepBatch {
			return rep, err
		}
		after = last
	}
}

// batch sweeps the intents after key after; it returns how many it locked
// and the last key.
func (s *Sweeper) batch(ctx context.Context, after string, rep *Report) (int, string, error) {
	locked, last := 0, after
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		rows, err := q.LockOrphanIntents(ctx, queries.LockOrphanIntentsParams{LateSeconds: s.late.Seconds(), After: after, Lim: sweepBatch})
		if err != nil {
			return fmt.Errorf("lock orphan intents: %w", err)
		}
		locked = len(rows)
		for _, r := range rows {
			last = r.ObjectKey
			existed, err := s.destroy(ctx, r.ObjectKey)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				rep.Failed = append(rep.Failed, r.ObjectKey)
				s.logger.ErrorContext(ctx, "an orphan upload could not be destroyed; its intent stays for the next sweep",
					slog.String("key", r.ObjectKey), slog.String("table", r.TableName), slog.String("work", r.Work), slog.Any("error", err))
				continue
			}
			if err := s.settle(ctx, q, r, existed, rep); err != nil {
				return err
			}
		}
		return nil
	})
	return locked, last, err
}

// settle records a destroyed key: the first destroy marks the intent, one
// past the late-upload window deletes it, and a key that held a version
// (the first time, or a late upload since) is logged and counted.
func (s *Sweeper) settle(ctx context.Context, q *queries.Queries, r queries.LockOrphanIntentsRow, existed bool, rep *Report) error {
	switch {
	case !r.DestroyedAt.Valid:
		if err := q.MarkIntentDestroyed(ctx, r.ObjectKey); err != nil {
			return fmt.Errorf("mark the intent of %s destroyed: %w", r.ObjectKey, err)
		}
	case r.Expired:
		if _, err := q.DeleteUploadIntent(ctx, r.ObjectKey); err != nil {
			return fmt.Errorf("delete the intent of %s: %w", r.ObjectKey, err)
		}
		rep.Forgotten = append(rep.Forgotten, r.ObjectKey)
	}
	if !existed && r.DestroyedAt.Valid {
		return nil // destroyed before, nothing landed since
	}
	rep.Destroyed = append(rep.Destroyed, r.ObjectKey)
	if s.destroyed != nil {
		s.destroyed.WithLabelValues(r.TableName).Inc()
	}
	msg := "destroyed an orphan upload: its booking never committed (its rows are still hot or in another archive)"
	if r.DestroyedAt.Valid {
		msg = "destroyed a late upload of an orphan: it landed after the orphan was destroyed"
	}
	s.logger.WarnContext(ctx, msg, slog.String("key", r.ObjectKey), slog.String("table", r.TableName), slog.String("work", r.Work),
		slog.String("work_id", uuid.UUID(r.WorkID.Bytes).String()), slog.Time("recorded_at", r.RecordedAt.Time))
	return nil
}

// destroy destroys every version of key; existed says a version was there.
func (s *Sweeper) destroy(ctx context.Context, key string) (bool, error) {
	var existed bool
	var err error
	if s.objectLock {
		existed, err = s.store.DestroyReleased(ctx, key)
	} else {
		existed, err = s.store.DestroyAllVersions(ctx, key)
	}
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return existed, err
}
