package archive

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/outbox"
)

// lockIfHeld makes an archive that an active hold covered when it was
// booked (its ledger row's legal_hold, from archive_is_held) as held in
// the store and in the fleet ledger as in the local one, inside the
// transaction that deletes its rows: with Object Lock, its objects' legal
// holds are turned on before the delete commits (a store that refuses
// fails the batch: the rows stay, the objects are orphans); the act is
// logged and announced as <service>.archive_hold_placed, which security's
// fleet ledger applies.
func (e *Engine) lockIfHeld(ctx context.Context, tx pgx.Tx, m Manifest) error {
	if !e.cfg.LedgerHolds {
		return nil
	}
	id := pgtype.UUID{Bytes: m.ArchiveID, Valid: true}
	q := queries.New(tx)
	held, err := q.ArchiveHeld(ctx, id)
	if err != nil || !held {
		return err
	}
	if e.cfg.ObjectLock {
		for _, key := range []string{m.DataKey, m.ManifestKey} {
			if err := e.store.SetLegalHold(ctx, key, true); err != nil {
				return fail(ErrStore, m.Table, fmt.Errorf("archive %s booked under a hold: %w", m.ArchiveID, err))
			}
		}
	}
	detail := map[string]any{
		"actor": e.actor, "at": time.Now().UTC().Format(time.RFC3339Nano), "reason": "archived under an active hold",
		"legal_hold": map[string]bool{m.ArchiveID.String(): true},
	}
	subj, err := q.SubjectHolds(ctx, queries.SubjectHoldsParams{Ids: []pgtype.UUID{id}})
	if err != nil {
		return fmt.Errorf("subject holds of %s: %w", m.ArchiveID, err)
	}
	if len(subj) == 1 && subj[0].SubjectHeld {
		detail["subject_hold"] = map[string]bool{m.ArchiveID.String(): true}
	}
	doc, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	if err := q.LogLifecycle(ctx, queries.LogLifecycleParams{Actor: e.actor, Action: "archive_hold_placed", ArchiveID: id, Detail: doc}); err != nil {
		return fmt.Errorf("log hold of %s: %w", m.ArchiveID, err)
	}
	if _, err := outbox.Stage(ctx, tx, outbox.Envelope{EventType: e.cfg.Service + ".archive_hold_placed", Payload: doc}); err != nil {
		return fmt.Errorf("stage hold of %s: %w", m.ArchiveID, err)
	}
	return nil
}
