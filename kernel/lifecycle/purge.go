package lifecycle

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/craig/retention/kernel/identity"

	"github.com/craig/retention/kernel/failpoint"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/journal"
	"github.com/craig/retention/kernel/lease"
	"github.com/craig/retention/kernel/store"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Purge statuses.
const (
	StatusAwaitingApproval = "awaiting_approval"
	StatusExecuted         = "executed"
)

// PurgeResult is a purge call's answer (JSON keys as the API pins them).
type PurgeResult struct {
	// Purged are the archives destroyed by this call.
	Purged []uuid.UUID `json:"purged,omitempty"`
	// Candidates are the archives a dry run or a frozen list names.
	Candidates []uuid.UUID `json:"candidates,omitempty"`
	// Skipped are frozen candidates no longer eligible when executed.
	Skipped []uuid.UUID `json:"skipped,omitempty"`
	// Failed are the candidates whose objects the store would not destroy
	// (an error naming each is logged): nothing of them is stamped, the
	// next purge tries them again, and the others went on.
	Failed  []uuid.UUID `json:"failed,omitempty"`
	More    bool        `json:"more"`
	PurgeID *uuid.UUID  `json:"purge_id,omitempty"`
	Status  string      `json:"status,omitempty"`
	// Certificate is the destruction record's key in the store.
	Certificate string `json:"certificate,omitempty"`
}

// Purge destroys up to limit archives whose retention date has come and
// that no hold covers, under the archive lease: each one re-checked and
// locked immediately before its manifest, then its data, are deleted, then
// stamped (purged_at, purged_by = actor) with the predicate again. With
// approvals required it only freezes the list (status awaiting_approval).
// A dry run lists the candidates and deletes nothing.
func (m *Manager) Purge(ctx context.Context, limit int, dryRun bool, actor string) (PurgeResult, error) {
	if limit < 1 || limit > MaxPurgeLimit {
		return PurgeResult{}, fmt.Errorf("%w: limit %d outside 1..%d", ErrInvalid, limit, MaxPurgeLimit)
	}
	var res PurgeResult
	err := m.leased(ctx, func(ctx context.Context) error {
		rows, err := queries.New(m.pool).SelectPurgeCandidates(ctx, int32(limit+1))
		if err != nil {
			return fmt.Errorf("select purge candidates: %w", err)
		}
		ids := uuids(rows)
		if res.More = len(ids) > limit; res.More {
			ids = ids[:limit]
		}
		switch {
		case dryRun:
			res.Candidates = ids
			return nil
		case len(ids) == 0:
			return nil // nothing is due: no purge, no certificate
		case m.cfg.ApprovalsRequired > 0:
			return m.freeze(ctx, ids, actor, &res)
		}
		id := uuid.Must(uuid.NewV7())
		res.PurgeID = &id
		return m.execute(ctx, id, ids, actor, "", true, false, &res)
	})
	return res, err
}

// PurgeExactly purges exactly the archives ids (what an operator saw and
// confirmed), never others: if any of them is no longer purgeable (a hold
// placed, a date moved, already purged, unknown) it destroys nothing and
// fails with ErrNoLongerPurgeable naming them. With approvals required it
// freezes exactly that list. Each archive is re-checked again, under its
// lock, at the statement that destroys it.
func (m *Manager) PurgeExactly(ctx context.Context, ids []uuid.UUID, actor string) (PurgeResult, error) {
	if len(ids) < 1 || len(ids) > MaxPurgeLimit {
		return PurgeResult{}, fmt.Errorf("%w: %d archive_ids outside 1..%d", ErrInvalid, len(ids), MaxPurgeLimit)
	}
	seen := map[uuid.UUID]bool{}
	for _, id := range ids {
		if seen[id] {
			return PurgeResult{}, fmt.Errorf("%w: archive %s named twice", ErrInvalid, id)
		}
		seen[id] = true
	}
	var res PurgeResult
	err := m.leased(ctx, func(ctx context.Context) error {
		rows, err := queries.New(m.pool).PurgeableAmong(ctx, pgUUIDs(ids))
		if err != nil {
			return fmt.Errorf("re-check purge list: %w", err)
		}
		due := uuids(rows)
		if len(due) != len(ids) {
			var gone []uuid.UUID
			for _, id := range ids {
				if !slices.Contains(due, id) {
					gone = append(gone, id)
				}
			}
			m.metrics.Refused.WithLabelValues(RefusedNoLongerEligible).Add(float64(len(gone)))
			return &NoLongerPurgeableError{IDs: gone}
		}
		if m.cfg.ApprovalsRequired > 0 {
			return m.freeze(ctx, due, actor, &res)
		}
		id := uuid.Must(uuid.NewV7())
		res.PurgeID = &id
		if err := m.execute(ctx, id, due, actor, "", true, true, &res); err != nil {
			return err
		}
		if len(res.Skipped) > 0 { // one became held or undue after the check: the rest was not attempted
			var rest []uuid.UUID
			for _, id := range due {
				if !slices.Contains(res.Purged, id) && !slices.Contains(res.Skipped, id) && !slices.Contains(res.Failed, id) {
					rest = append(rest, id)
				}
			}
			return &NoLongerPurgeableError{IDs: res.Skipped, Purged: res.Purged, NotAttempted: rest, Certificate: res.Certificate}
		}
		return nil
	})
	return res, err
}

// ErrNoLongerPurgeable is wrapped by NoLongerPurgeableError.
var ErrNoLongerPurgeable = errors.New("lifecycle: archives confirmed for purge are no longer purgeable; nothing was destroyed")

// NoLongerPurgeableError names the confirmed archives that are no longer
// purgeable. Found before anything was destroyed (the usual case), Purged
// is empty; found at an archive's own re-check, under its lock, while the
// confirmed list was being destroyed (a hold committed meanwhile), the
// archives destroyed before it are in Purged (and Certificate) and the
// rest of the list was not attempted.
type NoLongerPurgeableError struct {
	IDs          []uuid.UUID
	Purged       []uuid.UUID
	NotAttempted []uuid.UUID
	Certificate  string
}

func (e *NoLongerPurgeableError) Error() string {
	return fmt.Sprintf("%v: %v", ErrNoLongerPurgeable, e.IDs)
}

// Unwrap makes errors.Is(err, ErrNoLongerPurgeable) true.
func (e *NoLongerPurgeableError) Unwrap() error { return ErrNoLongerPurgeable }

// Approve executes a frozen purge as approver (another operator than the
// one who requested it), re-checking every candidate.
func (m *Manager) Approve(ctx context.Context, purgeID uuid.UUID, approver string) (PurgeResult, error) {
	res := PurgeResult{PurgeID: &purgeID}
	err := m.leased(ctx, func(ctx context.Context) error {
		p, err := queries.New(m.pool).GetPurge(ctx, pgUUID(purgeID))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: purge %s", ErrNotFound, purgeID)
		case err != nil:
			return fmt.Errorf("read purge %s: %w", purgeID, err)
		case p.Status != StatusAwaitingApproval:
			return fmt.Errorf("%w: %s is %s", ErrNotAwaiting, purgeID, p.Status)
		case identity.Same(p.RequestedBy, approver):
			m.metrics.Refused.WithLabelValues(RefusedSelfApproval).Inc()
			return fmt.Errorf("%w: %s requested %s", ErrSelfApproval, approver, purgeID)
		}
		return m.execute(ctx, purgeID, uuids(p.Candidates), p.RequestedBy, approver, false, false, &res)
	})
	return res, err
}

// leased runs fn under the archive lease (no archive pass or other purge
// at the same time).
func (m *Manager) leased(ctx context.Context, fn func(context.Context) error) error {
	if err := m.cfg.Journal.Check(ctx); err != nil { // a restore forgot acts: nothing is destroyed until reconciled
		return err
	}
	acquired, err := lease.TryRun(ctx, m.pool, m.cfg.LockKey, func(ctx context.Context, _ *pgx.Conn) error { return fn(ctx) })
	if err == nil && !acquired {
		m.metrics.Refused.WithLabelValues(RefusedAlreadyRunning).Inc()
		return ErrAlreadyRunning
	}
	return err
}

// freeze records the destruction list for approval.
func (m *Manager) freeze(ctx context.Context, ids []uuid.UUID, actor string, res *PurgeResult) error {
	id := uuid.Must(uuid.NewV7())
	err := pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		if err := queries.New(tx).InsertPurge(ctx, queries.InsertPurgeParams{
			PurgeID: pgUUID(id), Status: StatusAwaitingApproval, Candidates: pgUUIDs(ids), RequestedBy: actor,
		}); err != nil {
			return fmt.Errorf("freeze purge: %w", err)
		}
		return m.record(ctx, tx, actor, "archive_purge_requested", map[string]any{"purge_id": id, "candidates": ids}, act{purge: id})
	})
	if err != nil {
		return err
	}
	res.PurgeID, res.Candidates, res.Status = &id, ids, StatusAwaitingApproval
	return nil
}

// destroyed is one archive a purge destroyed: the certificate's entry.
type destroyed struct {
	ArchiveID     uuid.UUID `json:"archive_id"`
	Table         string    `json:"table"`
	DataKey       string    `json:"data_key"`
	ManifestKey   string    `json:"manifest_key"`
	DataSHA256    string    `json:"data_sha256"`
	RecordCount   int       `json:"record_count"`
	FirstRecordAt time.Time `json:"first_record_at"`
	LastRecordAt  time.Time `json:"last_record_at"`
}

// execute destroys each still-eligible candidate, then writes the
// certificate, the purges row and the archive_purged event.
// With exact (a confirmed list), the first archive no longer eligible
// stops the destruction: the rest of the list is not attempted.
func (m *Manager) execute(ctx context.Context, purgeID uuid.UUID, ids []uuid.UUID, actor, approver string, insert, exact bool, res *PurgeResult) error {
	if m.store == nil {
		return fmt.Errorf("%w: a purge needs the store", ErrInvalid)
	}
	purgedBy := actor // the approver's call is the destroying act
	if approver != "" {
		purgedBy = approver
	}
	var done []destroyed
	for _, id := range ids {
		d, ok, err := m.destroy(ctx, purgeID, id, purgedBy)
		if errors.Is(err, errStore) && ctx.Err() == nil {
			// One archive's store error never fails the others: it stays
			// unstamped for the next purge.
			m.logger.ErrorContext(ctx, "purge could not destroy an archive's objects; it is left for the next purge",
				slog.String("archive_id", id.String()), slog.Any("error", err))
			m.metrics.Refused.WithLabelValues(RefusedStoreError).Inc()
			res.Failed = append(res.Failed, id)
			continue
		}
		if err != nil {
			return err // what was destroyed so far stays stamped; the next call finishes
		}
		if !ok {
			res.Skipped = append(res.Skipped, id)
			m.metrics.Refused.WithLabelValues(RefusedNoLongerEligible).Inc()
			if exact {
				break
			}
			continue
		}
		done = append(done, d)
		res.Purged = append(res.Purged, id)
		m.metrics.Purged.WithLabelValues(d.Table).Inc()
	}
	key, err := m.certify(ctx, purgeID, actor, approver, done)
	if err != nil {
		return err
	}
	res.Certificate, res.Status = key, StatusExecuted
	if err := m.complete(ctx, purgeID, ids, actor, approver, insert, res); err != nil {
		return err
	}
	return m.cfg.Journal.Done(ctx)
}

// destroy re-checks and locks one archive, deletes its manifest then its
// data, and stamps it, in one transaction; false when it is no longer
// eligible (nothing deleted).
func (m *Manager) destroy(ctx context.Context, purgeID, id uuid.UUID, purgedBy string) (destroyed, bool, error) {
	var d destroyed
	found := false
	err := pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		row, err := q.LockPurgeable(ctx, pgUUID(id))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("re-check %s: %w", id, err)
		}
		if m.cfg.PurgeCheck != nil {
			ok, err := m.cfg.PurgeCheck(ctx, tx, id)
			if err != nil || !ok {
				return err // the schedule in force keeps it: no longer eligible
			}
		}
		found = true
		d = destroyed{ArchiveID: id, Table: row.TableName, DataKey: row.DataKey, ManifestKey: row.ManifestKey, DataSHA256: row.DataSha256,
			RecordCount: int(row.RecordCount), FirstRecordAt: row.FirstRecordAt.Time, LastRecordAt: row.LastRecordAt.Time}
		var recordIDs []uuid.UUID
		if m.cfg.Journal != nil { // its rows' ids, for a restore that brings them back hot (ADR-070)
			recordIDs = m.recordIDs(ctx, row.DataKey)
		}
		for i, key := range []string{row.ManifestKey, row.DataKey} { // manifest FIRST
			if err := m.deleteObject(ctx, key); err != nil {
				return fmt.Errorf("purge %s: delete %s: %w: %w", id, key, errStore, err)
			}
			failpoint.Inject([]string{failpoint.PurgeAfterManifestDelete, failpoint.PurgeAfterDataDelete}[i])
		}
		if m.cfg.Journal != nil {
			if err := journal.Append(ctx, tx, journal.ActPurge, purgeEntry{PurgeID: purgeID, ArchiveID: id, Table: row.TableName,
				DataKey: row.DataKey, ManifestKey: row.ManifestKey, RecordIDs: recordIDs}, purgedBy); err != nil {
				return err
			}
		}
		n, err := q.StampPurged(ctx, queries.StampPurgedParams{PurgedBy: &purgedBy, PurgeID: pgUUID(purgeID), ArchiveID: pgUUID(id)})
		if err != nil || n != 1 {
			msg := "purge deleted an archive's objects but could not stamp it; restore from bucket versioning if it must be kept"
			if m.cfg.ObjectLock { // every version is gone: nothing to restore
				msg = "purge destroyed every version of an archive's objects but could not stamp it; the next purge stamps it"
			}
			m.logger.ErrorContext(ctx, msg, slog.String("archive_id", id.String()), slog.Int64("stamped", n), slog.Any("error", err))
			return fmt.Errorf("stamp %s (stamped %d): %w", id, n, err)
		}
		failpoint.Inject(failpoint.PurgeBeforeStampCommit)
		return nil
	})
	return d, found && err == nil, err
}

// deleteObject destroys one object of an archive the ledger (locked)
// says is due and unheld: with Object Lock, the legal hold of every version
// is released first (the ledger is the authority; a hold release the store
// missed, or a version an overwrite left under its hold, is caught up here)
// and every version and delete marker is deleted; without, a plain delete.
func (m *Manager) deleteObject(ctx context.Context, key string) error {
	if !m.cfg.ObjectLock {
		_, err := m.store.DeleteIfExists(ctx, key)
		return err
	}
	_, err := m.store.DestroyReleased(ctx, key)
	return err
}

// recordIDs reads the ids of the rows of the data object key; nil when it
// cannot be read (logged: a restore from before the purge would then
// bring those rows back hot, and reconcile could not remove them).
func (m *Manager) recordIDs(ctx context.Context, key string) []uuid.UUID {
	b, err := m.store.Get(ctx, key)
	var ids []uuid.UUID
	if err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, len(b)+1)
		for sc.Scan() && err == nil {
			var row struct {
				ID uuid.UUID `json:"id"`
			}
			if err = json.Unmarshal(sc.Bytes(), &row); err == nil {
				ids = append(ids, row.ID)
			}
		}
	}
	if err != nil {
		m.logger.WarnContext(ctx, "the ids of a purged archive's rows could not be read for the journal", slog.String("key", key), slog.Any("error", err))
		return nil
	}
	return ids
}

// errStore marks a purge step the store failed (the archive is left
// unstamped, the purge goes on with the others).
var errStore = errors.New("the store did not destroy the object")

// certificate is the destruction record object.
type certificate struct {
	PurgeID    uuid.UUID   `json:"purge_id"`
	Service    string      `json:"service"`
	Actor      string      `json:"actor"`
	Approver   *string     `json:"approver"`
	ExecutedAt time.Time   `json:"executed_at"`
	Archives   []destroyed `json:"archives"`
}

// certify writes retention-archives/<service>/purges/<purge_id>.json with
// a no-overwrite put.
func (m *Manager) certify(ctx context.Context, purgeID uuid.UUID, actor, approver string, done []destroyed) (string, error) {
	c := certificate{PurgeID: purgeID, Service: m.cfg.Service, Actor: actor, ExecutedAt: time.Now().UTC(), Archives: done}
	if approver != "" {
		c.Approver = &approver
	}
	if c.Archives == nil {
		c.Archives = []destroyed{}
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	key := m.certificateKey(purgeID)
	if err := m.store.PutCreate(ctx, key, b, store.ContentTypeJSON); err != nil {
		return "", fmt.Errorf("purge %s: destruction record %s: %w", purgeID, key, err)
	}
	return key, nil
}

// certificateKey is where a purge's destruction record is written.
func (m *Manager) certificateKey(purgeID uuid.UUID) string {
	return store.Prefix + m.cfg.Service + "/purges/" + purgeID.String() + ".json"
}

// complete writes the purges row and stages <service>.archive_purged.
func (m *Manager) complete(ctx context.Context, purgeID uuid.UUID, ids []uuid.UUID, actor, approver string, insert bool, res *PurgeResult) error {
	return pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		q := queries.New(tx)
		if insert {
			if err := q.InsertPurge(ctx, queries.InsertPurgeParams{PurgeID: pgUUID(purgeID), Status: StatusAwaitingApproval, Candidates: pgUUIDs(ids), RequestedBy: actor}); err != nil {
				return fmt.Errorf("record purge: %w", err)
			}
		}
		var appr *string
		if approver != "" {
			appr = &approver
		}
		if err := q.CompletePurge(ctx, queries.CompletePurgeParams{ApprovedBy: appr, Purged: pgUUIDs(res.Purged), Skipped: pgUUIDs(res.Skipped),
			CertificateKey: &res.Certificate, PurgeID: pgUUID(purgeID)}); err != nil {
			return fmt.Errorf("record purge: %w", err)
		}
		return m.record(ctx, tx, actor, "archive_purged", map[string]any{
			"purge_id": purgeID, "archive_ids": nonNil(res.Purged), "skipped": nonNil(res.Skipped), "approver": appr, "certificate": res.Certificate,
		}, act{purge: purgeID})
	})
}

func nonNil(ids []uuid.UUID) []uuid.UUID {
	if ids == nil {
		return []uuid.UUID{}
	}
	return ids
}

// PurgeView is a purge as its approver sees it before approving: the
// frozen list with each archive's ledger facts.
type PurgeView struct {
	PurgeID     uuid.UUID      `json:"purge_id"`
	Status      string         `json:"status"`
	RequestedBy string         `json:"requested_by"`
	RequestedAt time.Time      `json:"requested_at"`
	ApprovedBy  *string        `json:"approved_by"`
	ExecutedAt  *time.Time     `json:"executed_at"`
	Archives    []PurgeArchive `json:"archives"`
}

// PurgeArchive is one candidate of a purge, as the ledger knows it now.
type PurgeArchive struct {
	ArchiveID     uuid.UUID `json:"archive_id"`
	Table         string    `json:"table"`
	RecordCount   int       `json:"record_count"`
	FirstRecordAt time.Time `json:"first_record_at"`
	LastRecordAt  time.Time `json:"last_record_at"`
	// RetentionUntil is the archive's retention date (YYYY-MM-DD, UTC).
	RetentionUntil *string `json:"retention_until"`
	LegalHold      bool    `json:"legal_hold"`
	Purged         bool    `json:"purged"`
	// Due: an approval now would destroy it (dated, due, unheld, not
	// purged); an approval re-checks each one at its destruction anyway.
	Due bool `json:"due"`
}

// PurgeView reads a purge and its candidates (ErrNotFound for an unknown id).
func (m *Manager) PurgeView(ctx context.Context, purgeID uuid.UUID) (PurgeView, error) {
	q := queries.New(m.pool)
	p, err := q.PurgeView(ctx, pgUUID(purgeID))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return PurgeView{}, fmt.Errorf("%w: purge %s", ErrNotFound, purgeID)
	case err != nil:
		return PurgeView{}, fmt.Errorf("read purge %s: %w", purgeID, err)
	}
	v := PurgeView{PurgeID: purgeID, Status: p.Status, RequestedBy: p.RequestedBy, RequestedAt: p.RequestedAt.Time.UTC(),
		ApprovedBy: p.ApprovedBy, ExecutedAt: timePtr(p.ExecutedAt), Archives: []PurgeArchive{}}
	rows, err := q.PurgeCandidates(ctx, p.Candidates)
	if err != nil {
		return PurgeView{}, fmt.Errorf("candidates of purge %s: %w", purgeID, err)
	}
	for _, r := range rows {
		a := PurgeArchive{ArchiveID: r.ArchiveID.Bytes, Table: r.TableName, RecordCount: int(r.RecordCount),
			FirstRecordAt: r.FirstRecordAt.Time.UTC(), LastRecordAt: r.LastRecordAt.Time.UTC(),
			LegalHold: r.LegalHold, Purged: r.PurgedAt.Valid, Due: r.Due}
		if r.RetentionUntil.Valid {
			d := r.RetentionUntil.Time.Format(time.DateOnly)
			a.RetentionUntil = &d
		}
		v.Archives = append(v.Archives, a)
	}
	return v, nil
}
