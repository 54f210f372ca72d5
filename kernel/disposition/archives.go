package disposition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/prune"
)

// farFuture is the as-of day under which every group with a date is
// listed: an archive is dated by its rows' latest due date.
var farFuture = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// dueSet is what is due on a day: the due date of each group, by series
// and group key.
type dueSet struct {
	version string
	series  []string
	due     map[string]time.Time
}

func (f *Finder) dueSet(ctx context.Context, db prune.DB, asOf time.Time) (*dueSet, error) {
	d, err := f.dueRows(ctx, db, asOf, nil)
	if err != nil {
		return nil, err
	}
	s := &dueSet{version: d.version.Version, due: map[string]time.Time{}}
	seen := map[string]bool{}
	for _, it := range d.version.Document.Items {
		if !seen[it.Series] {
			seen[it.Series] = true
			s.series = append(s.series, it.Series)
		}
	}
	for _, r := range d.rows {
		s.due[r.Series+"\x00"+archive.GroupKey(r.SubjectHash, r.Others, dayOf(r.Day))] = r.Due.Time
	}
	return s, nil
}

func dayOf(d pgtype.Date) time.Time {
	if !d.Valid {
		return time.Time{}
	}
	return d.Time
}

// latest is the latest due date of an archive's groups under s; false
// when the archive is not indexed by case, a row of it has no readable
// case, or a group of it has no date under s.
func (s *dueSet) latest(a queries.ArchiveDueFactsRow) (time.Time, bool) {
	if !a.CaseRowsIndexed || a.CaseRows != int64(a.RecordCount) || len(a.Hashes) == 0 {
		return time.Time{}, false
	}
	var last time.Time
	for i := range a.Hashes {
		var day time.Time
		if len(a.Hashes[i]) == 0 {
			day = dayOf(a.Days[i])
		}
		due, ok := s.due[a.TableName+"\x00"+archive.GroupKey(a.Hashes[i], a.Others[i], day)]
		if !ok {
			return time.Time{}, false
		}
		if due.After(last) {
			last = due
		}
	}
	return last, true
}

// DateArchives dates every unpurged archive of the schedule's series by
// the version in force (ADR-073): the day its last row falls due, or none
// while any of its rows has no date (an open or reopened case, a
// permanent item, a row whose case cannot be read, an archive not yet
// indexed by case). Without a version in force it changes nothing
// (archive.retention.<table>_days dates archives as before). It returns
// how many archives' dates changed.
func (f *Finder) DateArchives(ctx context.Context) (int64, error) {
	s, err := f.dueSet(ctx, f.pool, farFuture)
	if errors.Is(err, ErrNoSchedule) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	facts, err := queries.New(f.pool).ArchiveDueFacts(ctx, queries.ArchiveDueFactsParams{Tables: s.series, Ids: []pgtype.UUID{}})
	if err != nil {
		return 0, fmt.Errorf("archives' case groups: %w", err)
	}
	ids, untils := make([]pgtype.UUID, 0, len(facts)), make([]pgtype.Date, 0, len(facts))
	for _, a := range facts {
		until := pgtype.Date{}
		if last, ok := s.latest(a); ok {
			until = pgtype.Date{Time: last, Valid: true}
		}
		ids, untils = append(ids, a.ArchiveID), append(untils, until)
	}
	n, err := queries.New(f.pool).SetDerivedRetention(ctx, queries.SetDerivedRetentionParams{Ids: ids, Untils: untils})
	if err != nil {
		return 0, fmt.Errorf("date the archives: %w", err)
	}
	return n, nil
}

// PurgeCheck is the re-check a purge makes, in the transaction that
// destroys an archive, that a records schedule allows it (ADR-073): with
// a version ever approved, every row of the archive must be due today
// under the version in force (as its disposition would find), computed
// then, under the clocks' lock, from the rows as they are (a new record
// of a case makes its archived rows not due); without one, every archive
// its date makes purgeable may go. Each call computes what is due: about
// a second over 10,000 archives, per archive a purge destroys.
func (f *Finder) PurgeCheck() func(ctx context.Context, tx pgx.Tx, archiveID uuid.UUID) (bool, error) {
	return func(ctx context.Context, tx pgx.Tx, archiveID uuid.UUID) (bool, error) {
		q := queries.New(tx)
		if err := q.LockClocksShare(ctx); err != nil {
			return false, err
		}
		now, err := q.DispositionStamp(ctx)
		if err != nil {
			return false, fmt.Errorf("what a purge depends on: %w", err)
		}
		if now.Approvals == 0 {
			return true, nil // no schedule was ever approved: the archive's date decides
		}
		if !f.key.Valid() {
			return false, nil // no key to compute what is due with: nothing is due
		}
		today := time.Now().UTC().Truncate(24 * time.Hour)
		due, err := f.dueSet(ctx, tx, today)
		if err != nil {
			return false, err
		}
		facts, err := q.ArchiveDueFacts(ctx, queries.ArchiveDueFactsParams{Tables: due.series, Ids: []pgtype.UUID{pgUUID(archiveID)}})
		if err != nil {
			return false, fmt.Errorf("archive %s: its case groups: %w", archiveID, err)
		}
		if len(facts) != 1 {
			return false, nil // of no series of the schedule: nothing makes it due
		}
		last, ok := due.latest(facts[0])
		return ok && !last.After(today), nil
	}
}
