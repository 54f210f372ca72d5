package courtorder

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/internal/queries"
)

// Removal is a disposition batch's rewrite of archives (ADR-073): the
// lines Drop selects are removed from each archive, which is rewritten
// once for the whole batch exactly as an expungement rewrites it
// (create-only successor, read back, booked with the old archive stamped
// superseded by the batch, old objects destroyed), and an archive every
// line of which is dropped is superseded by none: purged whole.
type Removal struct {
	// ID is the batch: the successors' ids and keys derive from it, so a
	// retry finds the objects a crashed try wrote.
	ID uuid.UUID
	// Actor is the batch's approver, to whom every act is attributed.
	Actor string
	// Ref names the batch in a successor's manifest.
	Ref string
	// Drop says, per line of an archive (by its ordinal from 1), whether
	// it is removed; archive is uuid.Nil for an object no ledger row names.
	Drop func(ctx context.Context, archive uuid.UUID, spec archive.TableSpec, docs []string) (map[int]bool, error)
	// Recheck runs in the transaction that books an archive's rewrite,
	// under the holds lock: an error stops that booking (nothing is
	// booked); it may record what the rewrite removes.
	Recheck func(ctx context.Context, tx pgx.Tx, archive uuid.UUID) error
}

// Rewrite carries out r on the given archives (those already purged or
// superseded are skipped), after destroying the objects written and never
// booked (ADR-069); the caller holds the archive lease.
func (o *Orders) Rewrite(ctx context.Context, r Removal, archives []uuid.UUID) error {
	if r.Drop == nil || r.Recheck == nil || r.Actor == "" {
		return fmt.Errorf("%w: a removal needs its predicate, its re-check and its actor", ErrInvalid)
	}
	if o.store == nil {
		return ErrNoStore
	}
	ord := &order{id: r.ID, orderRef: r.Ref, requester: r.Actor, approver: r.Actor, at: o.now().UTC(), removal: &r}
	if err := o.noOrphans(ctx, ord); err != nil {
		return err
	}
	if err := o.noCopies(ctx, ord); err != nil {
		return err
	}
	rows, err := queries.New(o.pool).DispositionArchives(ctx, pgUUIDs(archives))
	if err != nil {
		return fmt.Errorf("archives of %s: %w", r.ID, err)
	}
	for _, row := range rows {
		if err := o.rewrite(ctx, ord, queries.ExpungeArchivesRow(row)); err != nil {
			return err
		}
	}
	return nil
}

// Lineage is what an act (an expungement or a disposition batch)
// superseded: each archive and its successor.
func (o *Orders) Lineage(ctx context.Context, id uuid.UUID) ([]queries.ExpungementLineageRow, error) {
	rows, err := queries.New(o.pool).ExpungementLineage(ctx, pgUUID(id))
	if err != nil {
		return nil, fmt.Errorf("lineage of %s: %w", id, err)
	}
	return rows, nil
}

// DestroySuperseded destroys again every version of the objects of the
// archives an act superseded (a crash between a booking and its
// destruction leaves them), and sweeps the objects written and never
// booked once more: nothing of them is left when it returns nil.
func (o *Orders) DestroySuperseded(ctx context.Context, id uuid.UUID, actor string) ([]queries.ExpungementLineageRow, error) {
	lineage, err := o.Lineage(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, l := range lineage {
		if err := o.destroy(ctx, l.ManifestKey, l.DataKey); err != nil {
			return nil, err
		}
	}
	ord := &order{id: id, approver: actor, requester: actor, at: o.now().UTC()}
	return lineage, o.noOrphans(ctx, ord)
}

// Announce logs an act in archive_lifecycle_log and stages it as
// <service>.<action> for security's fleet ledger, in tx.
func (o *Orders) Announce(ctx context.Context, tx pgx.Tx, actor, action string, detail map[string]any) error {
	return o.announce(ctx, tx, actor, action, detail)
}

// Superseded are the archives a lineage names and each one's successor
// (nil: none), as an archive_superseded event carries them.
func Superseded(lineage []queries.ExpungementLineageRow) ([]uuid.UUID, map[string]*uuid.UUID) {
	old, supersededBy := []uuid.UUID{}, map[string]*uuid.UUID{}
	for _, l := range lineage {
		old = append(old, l.ArchiveID.Bytes)
		var next *uuid.UUID
		if l.NewArchiveID.Valid {
			id := uuid.UUID(l.NewArchiveID.Bytes)
			next = &id
		}
		supersededBy[uuid.UUID(l.ArchiveID.Bytes).String()] = next
	}
	return old, supersededBy
}
