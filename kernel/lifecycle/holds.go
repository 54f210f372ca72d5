package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/craig/retention/kernel/lease"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/store"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// maxHoldText bounds a hold's title and reasons.
const maxHoldText = 2000

// HoldRequest places a legal hold: on the archives named, and/or on every
// archive of Table (past and future) whose record times overlap
// [From, To) (either bound open).
type HoldRequest struct {
	Title      string      `json:"title"`
	Reason     string      `json:"reason"`
	Table      *string     `json:"table,omitempty"`
	From       *time.Time  `json:"from,omitempty"`
	To         *time.Time  `json:"to,omitempty"`
	ArchiveIDs []uuid.UUID `json:"archive_ids,omitempty"`
	// Subjects hold every archive (now and booked later) whose rows are
	// about one of them ("case:17"); stored as keyed hashes only.
	Subjects []string `json:"subjects,omitempty"`
}

// Hold is a legal hold with the archives it covers now.
type Hold struct {
	ID            uuid.UUID   `json:"id"`
	Title         string      `json:"title"`
	Reason        string      `json:"reason"`
	Table         *string     `json:"table"`
	From          *time.Time  `json:"from"`
	To            *time.Time  `json:"to"`
	ArchiveIDs    []uuid.UUID `json:"archive_ids"`
	CreatedBy     string      `json:"created_by"`
	CreatedAt     time.Time   `json:"created_at"`
	Active        bool        `json:"active"`
	ReleasedAt    *time.Time  `json:"released_at"`
	ReleasedBy    *string     `json:"released_by"`
	ReleaseReason *string     `json:"release_reason"`
	// SubjectHashes are the keyed hashes (hex) of the subjects the hold
	// names: the subjects themselves are not kept.
	SubjectHashes []string    `json:"subject_hashes"`
	Covers        []uuid.UUID `json:"covers"`
}

func (r HoldRequest) check() error {
	switch {
	case strings.TrimSpace(r.Title) == "" || strings.TrimSpace(r.Reason) == "":
		return fmt.Errorf("%w: a hold needs a title and a reason", ErrInvalid)
	case len(r.Title) > maxHoldText || len(r.Reason) > maxHoldText:
		return fmt.Errorf("%w: title and reason are at most %d bytes", ErrInvalid, maxHoldText)
	case !storableText(r.Title) || !storableText(r.Reason) || r.Table != nil && !storableText(*r.Table):
		return fmt.Errorf("%w: title, reason and table must be UTF-8 text without NUL characters", ErrInvalid)
	case len(r.ArchiveIDs) == 0 && (r.Table == nil || *r.Table == "") && len(r.Subjects) == 0:
		return fmt.Errorf("%w: a hold names archive_ids, a table or subjects", ErrInvalid)
	case len(r.Subjects) > MaxHoldSubjects:
		return fmt.Errorf("%w: at most %d subjects", ErrInvalid, MaxHoldSubjects)
	case r.From != nil && r.To != nil && !r.From.Before(*r.To):
		return fmt.Errorf("%w: from must be before to", ErrInvalid)
	case len(r.ArchiveIDs) > MaxRecordsLimit:
		return fmt.Errorf("%w: at most %d archive_ids", ErrInvalid, MaxRecordsLimit)
	}
	return nil
}

// PlaceHold records an active hold, makes legal_hold true on every archive
// it covers, logs it and stages <service>.archive_hold_placed.
func (m *Manager) PlaceHold(ctx context.Context, req HoldRequest, actor string) (Hold, error) {
	if err := req.check(); err != nil {
		return Hold{}, err
	}
	if err := m.cfg.Journal.Check(ctx); err != nil {
		return Hold{}, err
	}
	if req.Table != nil && len(m.cfg.Tables) > 0 && !slices.Contains(m.cfg.Tables, *req.Table) {
		return Hold{}, fmt.Errorf("%w: table %q is not archived by this service (archived: %v)", ErrInvalid, *req.Table, m.cfg.Tables)
	}
	hashes, err := m.subjectHashes(req.Subjects)
	if err != nil {
		return Hold{}, err
	}
	var id uuid.UUID
	err = pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		// Ordered with archive bookings (lease.HoldsKey): one in flight
		// commits before this hold reads the ledger, so the hold covers it.
		if err := q.LockHoldsExclusive(ctx, lease.HoldsKey); err != nil {
			return fmt.Errorf("order with archive bookings: %w", err)
		}
		if err := m.checkIndexed(ctx, q, hashes); err != nil {
			return err
		}
		if err := checkNamed(ctx, q, req.ArchiveIDs); err != nil {
			return err
		}
		row, err := q.InsertHold(ctx, queries.InsertHoldParams{
			Title: req.Title, Reason: req.Reason, TableName: req.Table, FromAt: pgTime(req.From), ToAt: pgTime(req.To),
			ArchiveIds: pgUUIDs(req.ArchiveIDs), SubjectHashes: hashes, CreatedBy: actor,
		})
		if err != nil {
			return fmt.Errorf("insert hold: %w", err)
		}
		id = row.ID.Bytes
		changed, rows, err := refresh(ctx, q)
		if err != nil {
			return fmt.Errorf("apply hold: %w", err)
		}
		// On the objects before the hold commits: a store that refuses
		// leaves no hold recorded that it does not enforce.
		if err := m.lockObjects(ctx, rows, true); err != nil {
			return err
		}
		detail := map[string]any{
			"hold_id": id, "title": req.Title, "reason": req.Reason, "table": req.Table, "from": req.From, "to": req.To,
			"archive_ids": req.ArchiveIDs, "legal_hold": changed,
		}
		if err := subjectDetail(ctx, q, detail, hashes); err != nil {
			return err
		}
		if err := m.journalHold(ctx, tx, id, req, hashes, actor); err != nil {
			return err
		}
		return m.record(ctx, tx, actor, "archive_hold_placed", detail, act{hold: id})
	})
	if err != nil {
		return Hold{}, err
	}
	h, err := m.hold(ctx, id)
	if err != nil {
		return h, err
	}
	return h, m.cfg.Journal.Done(ctx)
}

// ReleaseHold releases an active hold (a reason is required), clears
// legal_hold where no other hold covers, logs it and stages
// <service>.archive_hold_released.
func (m *Manager) ReleaseHold(ctx context.Context, id uuid.UUID, reason, actor string) (Hold, error) {
	if strings.TrimSpace(reason) == "" || len(reason) > maxHoldText || !storableText(reason) {
		return Hold{}, fmt.Errorf("%w: releasing a hold needs a reason (at most %d bytes)", ErrInvalid, maxHoldText)
	}
	if err := m.cfg.Journal.Check(ctx); err != nil {
		return Hold{}, err
	}
	var released []queries.RefreshLegalHoldsRow
	err := pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockHoldsExclusive(ctx, lease.HoldsKey); err != nil {
			return fmt.Errorf("order with archive bookings: %w", err)
		}
		if _, err := q.ReleaseHold(ctx, queries.ReleaseHoldParams{ID: pgUUID(id), ReleasedBy: &actor, ReleaseReason: &reason}); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: no active hold %s", ErrNotFound, id)
		} else if err != nil {
			return fmt.Errorf("release hold %s: %w", id, err)
		}
		changed, rows, err := refresh(ctx, q)
		if err != nil {
			return fmt.Errorf("apply release: %w", err)
		}
		released = rows
		hashes, err := q.HoldSubjects(ctx, pgUUID(id))
		if err != nil {
			return fmt.Errorf("subjects of hold %s: %w", id, err)
		}
		detail := map[string]any{"hold_id": id, "reason": reason, "legal_hold": changed}
		if err := subjectDetail(ctx, q, detail, hashes); err != nil {
			return err
		}
		if m.cfg.Journal != nil {
			e, err := m.releaseJournal(id, reason)
			if err != nil {
				return err
			}
			if err := journal.Append(ctx, tx, journal.ActHoldReleased, e, actor); err != nil {
				return err
			}
		}
		return m.record(ctx, tx, actor, "archive_hold_released", detail, act{hold: id})
	})
	if err != nil {
		return Hold{}, err
	}
	if err := m.cfg.Journal.Done(ctx); err != nil {
		return Hold{}, err
	}
	// Off the objects after the release commits, for the archives still
	// unheld now (a hold placed since may cover them again); one the store
	// refuses to release is released again by the purge before it destroys
	// it.
	released, err = m.stillUnheld(ctx, released)
	if err != nil {
		m.logger.ErrorContext(ctx, "hold released in the ledger; the store's legal holds stay until the purge lifts them", slog.Any("error", err))
		return m.hold(ctx, id)
	}
	if err := m.lockObjects(ctx, released, false); err != nil {
		m.logger.ErrorContext(ctx, "hold released in the ledger, but the store kept an object's legal hold; the purge will release it", slog.Any("error", err))
	}
	return m.hold(ctx, id)
}

// Holds lists every hold, newest first.
func (m *Manager) Holds(ctx context.Context) ([]Hold, error) {
	return m.listHolds(ctx, pgtype.UUID{})
}

// listHolds lists every hold, or the one id names when it is valid.
func (m *Manager) listHolds(ctx context.Context, id pgtype.UUID) ([]Hold, error) {
	rows, err := queries.New(m.pool).ListHolds(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list holds: %w", err)
	}
	out := make([]Hold, len(rows))
	for i, r := range rows {
		out[i] = Hold{
			ID: r.ID.Bytes, Title: r.Title, Reason: r.Reason, Table: r.TableName, From: timePtr(r.FromAt), To: timePtr(r.ToAt),
			ArchiveIDs: uuids(r.ArchiveIds), CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt.Time, Active: !r.ReleasedAt.Valid,
			ReleasedAt: timePtr(r.ReleasedAt), ReleasedBy: r.ReleasedBy, ReleaseReason: r.ReleaseReason, Covers: uuids(r.Covers),
			SubjectHashes: hexes(r.SubjectHashes),
		}
	}
	return out, nil
}

func (m *Manager) hold(ctx context.Context, id uuid.UUID) (Hold, error) {
	all, err := m.listHolds(ctx, pgtype.UUID{Bytes: id, Valid: true})
	if err != nil {
		return Hold{}, err
	}
	for _, h := range all {
		if h.ID == id {
			return h, nil
		}
	}
	return Hold{}, fmt.Errorf("%w: hold %s", ErrNotFound, id)
}

// refresh recomputes legal_hold and returns the archives whose state
// changed (archive id → held, for the event security's fleet ledger
// applies) and their rows.
func refresh(ctx context.Context, q *queries.Queries) (map[string]bool, []queries.RefreshLegalHoldsRow, error) {
	rows, err := q.RefreshLegalHolds(ctx)
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string]bool, len(rows))
	for _, r := range rows {
		out[uuid.UUID(r.ArchiveID.Bytes).String()] = r.LegalHold
	}
	return out, rows, nil
}

// lockObjects sets (on) or clears the Object Lock legal hold of the
// objects of the rows whose state became on, when the bucket has Object
// Lock; purged archives have no objects.
func (m *Manager) lockObjects(ctx context.Context, rows []queries.RefreshLegalHoldsRow, on bool) error {
	if !m.cfg.ObjectLock {
		return nil
	}
	var errs []error
	for _, r := range rows {
		if r.LegalHold != on || r.Purged {
			continue
		}
		for _, key := range []string{r.DataKey, r.ManifestKey} {
			if err := m.store.SetLegalHold(ctx, key, on); err != nil && !errors.Is(err, store.ErrNotFound) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("store legal holds: %w", err)
	}
	return nil
}

func pgTime(t *time.Time) pgtype.Timestamptz {
	if t == nil {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: *t, Valid: true}
}

// storableText is text PostgreSQL can store (a NUL or invalid UTF-8 is
// refused by the server: a 500 where the request is bad).
func storableText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// stillUnheld keeps the released archives that no hold covers now.
func (m *Manager) stillUnheld(ctx context.Context, rows []queries.RefreshLegalHoldsRow) ([]queries.RefreshLegalHoldsRow, error) {
	var out []queries.RefreshLegalHoldsRow
	for _, r := range rows {
		row, err := queries.New(m.pool).GetLedgerRow(ctx, r.ArchiveID)
		if err != nil {
			return nil, fmt.Errorf("re-read %s: %w", uuid.UUID(r.ArchiveID.Bytes), err)
		}
		if !row.LegalHold {
			out = append(out, r)
		}
	}
	return out, nil
}

// checkNamed refuses a hold naming an archive the ledger does not hold
// (ErrInvalid) or one already purged (ErrHeldPurged).
func checkNamed(ctx context.Context, q *queries.Queries, ids []uuid.UUID) error {
	if unknown, err := q.UnknownArchiveIDs(ctx, pgUUIDs(ids)); err != nil {
		return fmt.Errorf("check archive ids: %w", err)
	} else if len(unknown) > 0 {
		return fmt.Errorf("%w: archive_ids not in this service's ledger: %v", ErrInvalid, uuids(unknown))
	}
	for _, aid := range ids {
		row, err := q.GetLedgerRow(ctx, pgUUID(aid))
		if err != nil {
			return fmt.Errorf("check archive %s: %w", aid, err)
		}
		if row.PurgedAt.Valid {
			return fmt.Errorf("%w: %s (purged %s)", ErrHeldPurged, aid, row.PurgedAt.Time.UTC().Format(time.RFC3339))
		}
	}
	return nil
}
