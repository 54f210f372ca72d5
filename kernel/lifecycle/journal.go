package lifecycle

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/lease"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// holdEntry is a hold placed, as the journal keeps it (ADR-070): its title
// and reason are free text a person typed, so they are sealed under the
// subject key (null without one: a reconciled hold then says so).
type holdEntry struct {
	HoldID        uuid.UUID   `json:"hold_id"`
	Table         *string     `json:"table"`
	FromMicros    *int64      `json:"from_us"`
	ToMicros      *int64      `json:"to_us"`
	ArchiveIDs    []uuid.UUID `json:"archive_ids"`
	SubjectHashes []string    `json:"subject_hashes"`
	Text          []byte      `json:"text"`
}

// holdText is a hold's title and reason, sealed in its journal entry.
type holdText struct {
	Title  string `json:"title"`
	Reason string `json:"reason"`
}

// releaseEntry is a hold released; its reason, free text a person typed,
// is sealed under the subject key (null without one).
type releaseEntry struct {
	HoldID uuid.UUID `json:"hold_id"`
	Reason []byte    `json:"reason"`
}

// releaseJournal is the journal entry of a hold released for reason.
func (m *Manager) releaseJournal(id uuid.UUID, reason string) (releaseEntry, error) {
	e := releaseEntry{HoldID: id}
	if m.cfg.SubjectKey.Valid() {
		var err error
		if e.Reason, err = m.cfg.SubjectKey.Box([]byte(reason)); err != nil {
			return e, err
		}
	}
	return e, nil
}

// purgeEntry is one archive a purge destroyed.
type purgeEntry struct {
	PurgeID     uuid.UUID `json:"purge_id"`
	ArchiveID   uuid.UUID `json:"archive_id"`
	Table       string    `json:"table"`
	DataKey     string    `json:"data_key"`
	ManifestKey string    `json:"manifest_key"`
	// RecordIDs are the ids of the archive's rows: a database restored from
	// before its booking holds them hot again, and reconcile deletes them.
	RecordIDs []uuid.UUID `json:"record_ids,omitempty"`
}

// withheld is a reconciled hold's title and reason when its entry could
// not carry them (no subject key when it was placed).
const withheld = "restored from the store journal (title and reason withheld)"

func micros(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	v := t.UnixMicro()
	return &v
}

// journalHold appends a placed hold to the journal in tx.
func (m *Manager) journalHold(ctx context.Context, tx pgx.Tx, id uuid.UUID, req HoldRequest, hashes [][]byte, actor string) error {
	if m.cfg.Journal == nil {
		return nil
	}
	e := holdEntry{HoldID: id, Table: req.Table, FromMicros: micros(req.From), ToMicros: micros(req.To), ArchiveIDs: nonNil(req.ArchiveIDs),
		SubjectHashes: hexes(hashes)}
	if m.cfg.SubjectKey.Valid() {
		plain, err := json.Marshal(holdText{Title: req.Title, Reason: req.Reason})
		if err != nil {
			return err
		}
		if e.Text, err = m.cfg.SubjectKey.Box(plain); err != nil {
			return err
		}
	}
	return journal.Append(ctx, tx, journal.ActHoldPlaced, e, actor)
}

// Reapply re-applies a journaled hold placed or released, or an archive
// purged, that a database restore forgot, and adopts the entry, in one
// transaction; an entry already applied changes nothing. A purged
// archive's objects are destroyed again first (they are gone; nothing
// left is not an error).
func (m *Manager) Reapply(ctx context.Context, e journal.Entry) error {
	apply, err := m.reapplier(ctx, e)
	if err != nil {
		return err
	}
	var rows []queries.RefreshLegalHoldsRow
	err = pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if err := q.LockHoldsExclusive(ctx, lease.HoldsKey); err != nil {
			return err
		}
		if err := apply(ctx, tx); err != nil {
			return fmt.Errorf("journal entry %d (%s): %w", e.Seq, e.Act, err)
		}
		var err error
		if _, rows, err = refresh(ctx, q); err != nil {
			return err
		}
		return journal.Adopt(ctx, tx, e)
	})
	if err != nil {
		return err
	}
	var locked []queries.RefreshLegalHoldsRow // only locks are set here: a release is the purge's to lift
	for _, r := range rows {
		if r.LegalHold {
			locked = append(locked, r)
		}
	}
	return m.lockObjects(ctx, locked, true)
}

// reapplier is what re-applies entry e in a transaction (a purged
// archive's objects are destroyed again first, here).
func (m *Manager) reapplier(ctx context.Context, e journal.Entry) (func(context.Context, pgx.Tx) error, error) {
	var apply func(context.Context, pgx.Tx) error
	switch e.Act {
	case journal.ActHoldPlaced:
		var h holdEntry
		if err := json.Unmarshal(e.Detail, &h); err != nil {
			return nil, fmt.Errorf("journal entry %d: %w", e.Seq, err)
		}
		apply = func(ctx context.Context, tx pgx.Tx) error { return m.reapplyHold(ctx, tx, e, h) }
	case journal.ActHoldReleased:
		var r releaseEntry
		if err := json.Unmarshal(e.Detail, &r); err != nil {
			return nil, fmt.Errorf("journal entry %d: %w", e.Seq, err)
		}
		apply = func(ctx context.Context, tx pgx.Tx) error {
			reason := fmt.Sprintf("restored from the store journal (entry %d; reason withheld)", e.Seq)
			if len(r.Reason) > 0 {
				plain, err := m.cfg.SubjectKey.Unbox(r.Reason)
				if err != nil {
					return fmt.Errorf("open the release's reason (the subject key it was released under?): %w", err)
				}
				reason = string(plain)
			}
			_, err := queries.New(tx).ReapplyRelease(ctx, queries.ReapplyReleaseParams{ReleasedAt: pgtype.Timestamptz{Time: e.Time(), Valid: true},
				ReleasedBy: &e.Actor, ReleaseReason: &reason, ID: pgUUID(r.HoldID)})
			return err
		}
	case journal.ActPurge:
		var p purgeEntry
		if err := json.Unmarshal(e.Detail, &p); err != nil {
			return nil, fmt.Errorf("journal entry %d: %w", e.Seq, err)
		}
		for _, key := range []string{p.ManifestKey, p.DataKey} {
			if err := m.deleteObject(ctx, key); err != nil {
				return nil, fmt.Errorf("journal entry %d: destroy %s again: %w", e.Seq, key, err)
			}
		}
		apply = func(ctx context.Context, tx pgx.Tx) error {
			at := pgtype.Timestamptz{Time: e.Time(), Valid: true}
			q := queries.New(tx)
			if _, err := q.ReapplyPurged(ctx, queries.ReapplyPurgedParams{PurgedAt: at, PurgedBy: &e.Actor, PurgeID: pgUUID(p.PurgeID),
				ArchiveID: pgUUID(p.ArchiveID)}); err != nil {
				return err
			}
			if err := m.deletePurgedRows(ctx, tx, e, p); err != nil {
				return err
			}
			// A purge frozen before the backup and approved since is executed:
			// its row says so, or a second approval would write its
			// certificate again (refused: it exists) and stay stuck.
			_, err := q.ReapplyPurgeRow(ctx, queries.ReapplyPurgeRowParams{Actor: e.Actor, ExecutedAt: at, ArchiveID: pgUUID(p.ArchiveID),
				CertificateKey: m.certificateKey(p.PurgeID), PurgeID: pgUUID(p.PurgeID)})
			return err
		}
	default:
		return nil, fmt.Errorf("journal entry %d: %s is not a lifecycle act", e.Seq, e.Act)
	}
	return apply, nil
}

// deletePurgedRows deletes from the hot table the rows of a purged archive
// a restored database holds again (it was restored from before the
// archive's booking): a purge destroyed them.
func (m *Manager) deletePurgedRows(ctx context.Context, tx pgx.Tx, e journal.Entry, p purgeEntry) error {
	if len(p.RecordIDs) == 0 {
		return nil
	}
	if !slices.Contains(m.cfg.Tables, p.Table) {
		return fmt.Errorf("journal entry %d: table %q is not archived by this service", e.Seq, p.Table)
	}
	if _, err := tx.Exec(ctx, "DELETE FROM "+pgx.Identifier{p.Table}.Sanitize()+" WHERE id = ANY ($1)", p.RecordIDs); err != nil {
		return fmt.Errorf("journal entry %d: delete the purged rows of %s again: %w", e.Seq, p.Table, err)
	}
	return nil
}

// reapplyHold places a journaled hold again under its own id.
func (m *Manager) reapplyHold(ctx context.Context, tx pgx.Tx, e journal.Entry, h holdEntry) error {
	text := holdText{Title: withheld, Reason: withheld}
	if len(h.Text) > 0 {
		plain, err := m.cfg.SubjectKey.Unbox(h.Text)
		if err != nil {
			return fmt.Errorf("open the hold's title and reason (the subject key it was placed under?): %w", err)
		}
		if err := json.Unmarshal(plain, &text); err != nil {
			return err
		}
	}
	hashes := make([][]byte, 0, len(h.SubjectHashes))
	for _, x := range h.SubjectHashes {
		b, err := hex.DecodeString(x)
		if err != nil {
			return fmt.Errorf("subject hash %q: %w", x, err)
		}
		hashes = append(hashes, b)
	}
	at := func(us *int64) pgtype.Timestamptz {
		if us == nil {
			return pgtype.Timestamptz{}
		}
		return pgtype.Timestamptz{Time: time.UnixMicro(*us).UTC(), Valid: true}
	}
	_, err := queries.New(tx).ReapplyHold(ctx, queries.ReapplyHoldParams{ID: pgUUID(h.HoldID), Title: text.Title, Reason: text.Reason,
		TableName: h.Table, FromAt: at(h.FromMicros), ToAt: at(h.ToMicros), ArchiveIds: pgUUIDs(h.ArchiveIDs), SubjectHashes: hashes,
		CreatedBy: e.Actor, CreatedAt: pgtype.Timestamptz{Time: e.Time(), Valid: true}})
	return err
}
