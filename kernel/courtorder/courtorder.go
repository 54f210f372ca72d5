// Package courtorder carries out court orders about one subject (a case, a
// person) on a service's records (ADR-067):
//
//   - Seal: an access state. While a subject is sealed, every read path of
//     the service answers for its rows exactly as for rows that do not
//     exist (archiveread leaves them out); a read with archive:sealed-read
//     and an order reference sees them and is announced with it. Objects
//     are not changed, and retention runs as before.
//   - Expunge: the subject's rows are removed from the hot tables and from
//     every archive that holds them. An affected archive is rewritten
//     without them as a new create-only object whose manifest names what it
//     supersedes; the new one is verified and booked, the old one stamped
//     superseded in the same transaction, and only then is every version of
//     the old objects destroyed. Always dual control. A certificate records
//     the act with a salted commitment to the subject instead of the
//     subject; the salt is returned once, to the court's file.
//
// Nothing here writes a subject in clear: the service names it by its keyed
// hash, and a pending order keeps the subject sealed under the subject key
// until it completes.
package courtorder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/intent"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sentinels callers map to answers.
var (
	// ErrInvalid: a malformed order (reference, reason, holds).
	ErrInvalid = errors.New("courtorder: invalid order")
	// ErrNoSubjectKey: the service has no subject key, so it cannot tell
	// whose rows are whose.
	ErrNoSubjectKey = errors.New("courtorder: no subject key is configured (archive.subject_key_file)")
	// ErrNotIndexed: archives are not yet indexed by subject (the order
	// could miss some); run the backfill first.
	ErrNotIndexed = errors.New("courtorder: archives are not yet indexed by subject")
	// ErrNotFound: no such expungement.
	ErrNotFound = errors.New("courtorder: no such expungement")
	// ErrSelfApproval: the requester cannot approve their own order.
	ErrSelfApproval = errors.New("courtorder: an expungement cannot be approved by the identity that requested it")
	// ErrAlreadyRunning: an archive pass or a purge holds the archive lease.
	// ErrOrphans: an object written and never booked (ADR-069) could not
	// be destroyed; the order does not complete while one is left.
	ErrOrphans        = errors.New("courtorder: objects written and never booked are left")
	ErrAlreadyRunning = errors.New("courtorder: another archive pass, purge or expungement holds the archive lease")
	// ErrHeld is wrapped by HeldError.
	ErrHeld = errors.New("courtorder: an archive holding the subject is under a legal hold the order does not name")
	// ErrNoStore: an expungement needs the object store.
	ErrNoStore = errors.New("courtorder: no object store is configured")
)

// HeldError names the archives and the holds that block an expungement.
type HeldError struct {
	Archives []uuid.UUID
	Holds    []uuid.UUID
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%v: archives %v, holds %v", ErrHeld, e.Archives, e.Holds)
}

// Unwrap makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Unwrap() error { return ErrHeld }

// ErrPending is wrapped by PendingError.
var ErrPending = errors.New("courtorder: an expungement of the subject is already requested and not executed")

// PendingError names the order about the subject that is not executed
// yet: a second one is refused (approve the first).
type PendingError struct{ ExpungeID uuid.UUID }

func (e *PendingError) Error() string { return fmt.Sprintf("%v: %s", ErrPending, e.ExpungeID) }

// Unwrap makes errors.Is(err, ErrPending) true.
func (e *PendingError) Unwrap() error { return ErrPending }

// Bounds of an order's text.
const (
	// MaxOrderRef bounds an order reference (a docket number, not a document).
	MaxOrderRef = 200
	// MaxReason bounds a reason.
	MaxReason = 2000
	// MaxNamedHolds bounds the holds one expungement names.
	MaxNamedHolds = 100
)

// Config is one service's court orders.
type Config struct {
	// Service names the events and the certificates' key segment.
	Service string
	// Tables are the service's archived tables; those that declare
	// subjects are the ones an order reaches.
	Tables []archive.TableSpec
	// Key is the service's subject key (archive.subject_key_file).
	Key subject.Key
	// ObjectLock: the bucket has Object Lock (a rewritten archive under a
	// named hold is locked; old versions are released before destruction).
	ObjectLock bool
	// LockKey is the archive lease; 0 means lease.ArchiveKey.
	LockKey int64
	// Bookkeep books a rewritten archive like any new one (the ledger
	// row, its retention date, the fleet event).
	Bookkeep archive.BookkeepFunc
	// Orphans destroys objects written and never booked (ADR-069) before an
	// order rewrites anything; nil: a sweeper of the pool and store that
	// counts nothing (the archive engine's, with its metric, in a service).
	Orphans *intent.Sweeper
	// Journal records seals, unseals and executed expungements in the
	// store too (ADR-070); while its gate says the database is behind the
	// store's journal, every order is refused (journal.ErrBehind). Nil: no
	// journal.
	Journal *journal.Journal
}

// Orders carries out court orders on one service's records.
type Orders struct {
	pool   *pgxpool.Pool
	store  *store.Store
	cfg    Config
	logger *slog.Logger
	now    func() time.Time
}

// New returns the service's court orders; st may be nil (seals only).
func New(pool *pgxpool.Pool, st *store.Store, cfg Config, logger *slog.Logger) (*Orders, error) {
	if pool == nil || logger == nil || cfg.Service == "" {
		return nil, fmt.Errorf("%w: pool, logger and service are required", ErrInvalid)
	}
	if cfg.LockKey == 0 {
		cfg.LockKey = lease.ArchiveKey
	}
	if cfg.Orphans == nil && st != nil {
		cfg.Orphans = intent.NewSweeper(pool, st, cfg.ObjectLock, logger, nil)
	}
	return &Orders{pool: pool, store: st, cfg: cfg, logger: logger, now: time.Now}, nil
}

// subjectSpecs are the archived tables that declare subjects.
func (o *Orders) subjectSpecs() []archive.TableSpec {
	var out []archive.TableSpec
	for _, s := range o.cfg.Tables {
		if len(s.Subjects) > 0 {
			out = append(out, s)
		}
	}
	return out
}

func (o *Orders) subjectTables() []string {
	out := []string{}
	for _, s := range o.subjectSpecs() {
		out = append(out, s.Table)
	}
	return out
}

func (o *Orders) spec(table string) (archive.TableSpec, bool) {
	for _, s := range o.cfg.Tables {
		if s.Table == table {
			return s, true
		}
	}
	return archive.TableSpec{}, false
}

// CheckText validates an order's reference or reason: non-blank UTF-8, at
// most max bytes, no control characters (it is logged and stored).
func CheckText(name, v string, max int) error {
	switch {
	case strings.TrimSpace(v) == "":
		return fmt.Errorf("%w: %s is required", ErrInvalid, name)
	case len(v) > max:
		return fmt.Errorf("%w: %s is %d bytes, at most %d", ErrInvalid, name, len(v), max)
	case !utf8.ValidString(v) || strings.IndexFunc(v, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: %s is not UTF-8 text without control characters", ErrInvalid, name)
	}
	return nil
}

// SealResult is a seal or unseal call's answer (JSON keys pinned by the API).
type SealResult struct {
	Subject  string `json:"subject"`
	Sealed   bool   `json:"sealed"`
	OrderRef string `json:"order_ref"`
}

// Seal seals s under the order orderRef: from its commit, no read of the
// service returns s's rows without sealed access. Sealing a sealed subject
// changes nothing (the first order stays recorded).
func (o *Orders) Seal(ctx context.Context, s subject.Subject, orderRef, reason, actor string) (SealResult, error) {
	if err := o.checkOrder(orderRef, reason); err != nil {
		return SealResult{}, err
	}
	if err := o.cfg.Journal.Check(ctx); err != nil {
		return SealResult{}, err
	}
	hash := o.cfg.Key.Hash(s)
	res := SealResult{Subject: s.String(), Sealed: true, OrderRef: orderRef}
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		row, err := queries.New(tx).SealSubject(ctx, queries.SealSubjectParams{SubjectHash: hash, OrderRef: orderRef, Reason: reason, SealedBy: actor})
		if err != nil {
			return fmt.Errorf("seal: %w", err)
		}
		res.OrderRef = row.OrderRef
		if !row.SealedNow {
			return nil
		}
		if err := o.journal(ctx, tx, journal.ActSeal, sealEntry{SubjectHash: subject.Hex(hash), OrderRef: orderRef}, actor); err != nil {
			return err
		}
		return o.announce(ctx, tx, actor, "subject_sealed", map[string]any{"order_ref": orderRef, "reason": reason, "subject_hash": subject.Hex(hash)})
	})
	if err != nil {
		return res, err
	}
	return res, o.cfg.Journal.Done(ctx)
}

// Unseal lifts s's seal (its reason and the order that lifts it
// recorded); unsealing a subject that is not sealed changes nothing.
func (o *Orders) Unseal(ctx context.Context, s subject.Subject, orderRef, reason, actor string) (SealResult, error) {
	if err := o.checkOrder(orderRef, reason); err != nil {
		return SealResult{}, err
	}
	if err := o.cfg.Journal.Check(ctx); err != nil {
		return SealResult{}, err
	}
	hash := o.cfg.Key.Hash(s)
	res := SealResult{Subject: s.String(), Sealed: false, OrderRef: orderRef}
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		n, err := queries.New(tx).UnsealSubject(ctx, hash)
		if err != nil || n == 0 {
			return err
		}
		if err := o.journal(ctx, tx, journal.ActUnseal, sealEntry{SubjectHash: subject.Hex(hash), OrderRef: orderRef}, actor); err != nil {
			return err
		}
		return o.announce(ctx, tx, actor, "subject_unsealed", map[string]any{"order_ref": orderRef, "reason": reason, "subject_hash": subject.Hex(hash)})
	})
	if err != nil {
		return res, err
	}
	return res, o.cfg.Journal.Done(ctx)
}

func (o *Orders) checkOrder(orderRef, reason string) error {
	if !o.cfg.Key.Valid() {
		return ErrNoSubjectKey
	}
	if err := CheckText("order_ref", orderRef, MaxOrderRef); err != nil {
		return err
	}
	return CheckText("reason", reason, MaxReason)
}

// announce logs an order's act in archive_lifecycle_log and stages it as
// <service>.<action> for security's fleet ledger, in tx.
func (o *Orders) announce(ctx context.Context, tx pgx.Tx, actor, action string, detail map[string]any) error {
	detail["actor"], detail["at"] = actor, o.now().UTC().Format(time.RFC3339Nano)
	doc, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	if err := queries.New(tx).LogLifecycle(ctx, queries.LogLifecycleParams{Actor: actor, Action: action, Detail: doc}); err != nil {
		return fmt.Errorf("log %s: %w", action, err)
	}
	// The reason stays in the local lifecycle log (it may describe the
	// case): the event carries the act, the order reference and the hash.
	event := maps.Clone(detail)
	delete(event, "reason")
	if doc, err = json.Marshal(event); err != nil {
		return err
	}
	if _, err := outbox.Stage(ctx, tx, outbox.Envelope{EventType: o.cfg.Service + "." + action, Payload: doc}); err != nil {
		return fmt.Errorf("stage %s: %w", action, err)
	}
	return nil
}

func pgUUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

func pgUUIDs(ids []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgUUID(id)
	}
	return out
}

func uuids(in []pgtype.UUID) []uuid.UUID {
	out := make([]uuid.UUID, 0, len(in))
	for _, id := range in {
		out = append(out, id.Bytes)
	}
	return out
}

func pgUUIDPtr(id *uuid.UUID) pgtype.UUID {
	if id == nil {
		return pgtype.UUID{}
	}
	return pgUUID(*id)
}
