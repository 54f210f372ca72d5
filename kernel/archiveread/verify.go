package archiveread

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/store"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// Verify failure kinds (the label values of
// archive_verify_failures_total{kind}).
const (
	KindMissingData     = "missing_data"
	KindMissingManifest = "missing_manifest"
	KindManifest        = "manifest_mismatch"
	KindSHA256          = "sha256"
	KindLineCount       = "line_count"
	KindLineRange       = "line_range"
	// KindRestored: the current version of an object was overwritten or
	// delete-marked, and verify made the older version that matches the
	// ledger current again (Store.Restore). The archive reads again; the
	// report names it so that somebody asks who wrote over it.
	KindRestored = "restored"
	// KindUnreadable: the store answered for the data object but could not
	// give its bytes whole (damaged on its disk; or a connection cut, which
	// the next pass tells apart).
	KindUnreadable = "unreadable"
)

// Kinds are every verify failure kind: the label values the verify metric
// exports from boot, at 0.
func Kinds() []string {
	return []string{KindMissingData, KindMissingManifest, KindManifest, KindSHA256, KindLineCount, KindLineRange,
		KindRestored, KindUnreadable}
}

// maxOrphanList bounds the orphan keys a report names (it counts them all).
const maxOrphanList = 1000

// Failure is one archive that did not verify.
type Failure struct {
	ArchiveID uuid.UUID `json:"archive_id"`
	Kind      string    `json:"kind"`
	Detail    string    `json:"detail"`
}

// Report is a verification's result.
type Report struct {
	Deep     bool      `json:"deep"`
	Checked  int       `json:"checked"`
	Failed   int       `json:"failed"`
	Failures []Failure `json:"failures"`
	// ColumnDrift names the tables whose current columns differ from an
	// archive's manifest (reported, not a failure: tables evolve).
	ColumnDrift []string `json:"column_drift"`
	// Orphans are objects under the service's prefix no ledger row names.
	Orphans     []string `json:"orphans"`
	OrphanCount int      `json:"orphan_count"`
}

// FailureKinds are the kinds of the report's failures, one per failure.
func (r Report) FailureKinds() []string {
	out := make([]string, len(r.Failures))
	for i, f := range r.Failures {
		out[i] = f.Kind
	}
	return out
}

// Verify checks up to limit unpurged ledger rows (0: all): both objects
// exist and the manifest repeats the ledger's facts; deep also the data's
// sha256, its line count and every line's id inside the recorded range; and
// lists the orphans under the service's prefix (listed while the archives
// are checked: the two are independent).
func (r *Reader) Verify(ctx context.Context, deep bool, limit int) (Report, error) {
	orphans := Report{Orphans: []string{}}
	var orphanErr error
	var wg sync.WaitGroup
	wg.Go(func() { orphanErr = r.orphans(ctx, &orphans) })
	rep, err := r.verifyLedger(ctx, deep, limit)
	wg.Wait()
	rep.Orphans, rep.OrphanCount = orphans.Orphans, orphans.OrphanCount
	return rep, errors.Join(err, orphanErr)
}

// verifyLedger checks up to limit unpurged ledger rows (0: all).
func (r *Reader) verifyLedger(ctx context.Context, deep bool, limit int) (Report, error) {
	rep := Report{Deep: deep, Failures: []Failure{}, ColumnDrift: []string{}}
	drift := &columnDrift{current: map[string]string{}, drifted: map[string]bool{}}
	after := uuid.Nil
	for limit == 0 || rep.Checked < limit {
		page := 500
		if limit > 0 {
			page = min(page, limit-rep.Checked)
		}
		rows, err := queries.New(r.pool).LedgerToVerify(ctx, queries.LedgerToVerifyParams{After: pgtype.UUID{Bytes: after, Valid: true}, RowLimit: int32(page)})
		if err != nil {
			return rep, fmt.Errorf("verify: read the ledger: %w", err)
		}
		// Read-ahead of one archive: the next archive's objects are read
		// while this one's are hashed and scanned (at most two in memory).
		var next *objects
		if len(rows) > 0 {
			next = r.read(ctx, rows[0], deep)
		}
		for i, l := range rows {
			cur := next
			if i+1 < len(rows) {
				next = r.read(ctx, rows[i+1], deep)
			}
			if f := r.check(ctx, l, cur, deep, drift); f != nil {
				rep.Failures = append(rep.Failures, r.heal(ctx, l, *f))
			}
			rep.Checked++
			after = l.ArchiveID.Bytes
		}
		if len(rows) < page {
			break
		}
	}
	rep.Failed = len(rep.Failures)
	for t := range drift.drifted {
		rep.ColumnDrift = append(rep.ColumnDrift, t)
	}
	slices.Sort(rep.ColumnDrift)
	return rep, nil
}

// objects are one archive's reads, started ahead of its checks: the
// manifest, and the data object (deep) or whether it exists.
type objects struct {
	wg             sync.WaitGroup
	manifest, data []byte
	merr, derr     error
	exists         bool
}

// read starts reading an archive's objects (both at once).
func (r *Reader) read(ctx context.Context, l queries.LedgerToVerifyRow, deep bool) *objects {
	o := &objects{}
	o.wg.Go(func() { o.manifest, o.merr = r.store.Get(ctx, l.ManifestKey) })
	o.wg.Go(func() {
		if deep {
			o.data, o.derr = r.store.Get(ctx, l.DataKey)
		} else {
			o.exists, o.derr = r.store.Exists(ctx, l.DataKey)
		}
	})
	return o
}

// check waits for an archive's reads and checks them; nil when it
// verifies.
func (r *Reader) check(ctx context.Context, l queries.LedgerToVerifyRow, o *objects, deep bool, drift *columnDrift) *Failure {
	o.wg.Wait()
	id := uuid.UUID(l.ArchiveID.Bytes)
	fail := func(kind, format string, args ...any) *Failure {
		return &Failure{ArchiveID: id, Kind: kind, Detail: fmt.Sprintf(format, args...)}
	}
	if o.merr != nil {
		return fail(KindMissingManifest, "%v", o.merr)
	}
	var m archive.Manifest
	if err := json.Unmarshal(o.manifest, &m); err != nil {
		return fail(KindManifest, "manifest does not parse: %v", err)
	}
	if bad := manifestDiffers(m, l); bad != "" {
		return fail(KindManifest, "manifest %s differs from the ledger", bad)
	}
	r.noteDrift(ctx, l.TableName, m.Fingerprint, drift)
	switch {
	case !deep && (o.derr != nil || !o.exists):
		return fail(KindMissingData, "data object %s missing (%v)", l.DataKey, o.derr)
	case !deep:
		return nil
	case errors.Is(o.derr, store.ErrUnreadable):
		return fail(KindUnreadable, "%v", o.derr)
	case o.derr != nil:
		return fail(KindMissingData, "%v", o.derr)
	case archive.SHA256Hex(o.data) != l.DataSha256:
		return fail(KindSHA256, "data sha256 differs from the ledger's")
	}
	return checkLines(o.data, l, fail)
}

// columnDrift is one verification's current column fingerprint of each
// table (read once, not once per archive) and the tables some archive's
// manifest differs from.
type columnDrift struct {
	current map[string]string
	drifted map[string]bool
}

// noteDrift records whether an archive's manifest fingerprint differs from
// its table's current columns.
func (r *Reader) noteDrift(ctx context.Context, table, fingerprint string, d *columnDrift) {
	spec, ok := r.tables[table]
	if !ok || d.drifted[table] {
		return
	}
	cur, ok := d.current[table]
	if !ok {
		cols, err := archive.TableColumns(ctx, r.pool, spec.Table)
		if err != nil {
			return // reported as nothing: drift is informational
		}
		cur = archive.Fingerprint(cols)
		d.current[table] = cur
	}
	if cur != fingerprint {
		d.drifted[table] = true
	}
}

// manifestDiffers names the first field in which the manifest and the
// ledger row disagree ("" when none).
func manifestDiffers(m archive.Manifest, l queries.LedgerToVerifyRow) string {
	for _, f := range []struct {
		name string
		same bool
	}{
		{"archive_id", m.ArchiveID == uuid.UUID(l.ArchiveID.Bytes)}, {"table", m.Table == l.TableName},
		{"data_key", m.DataKey == l.DataKey}, {"manifest_key", m.ManifestKey == l.ManifestKey},
		{"data_sha256", m.DataSHA256 == l.DataSha256}, {"record_count", m.RecordCount == int(l.RecordCount)},
		{"endpoint", m.Endpoint == l.StoreEndpoint}, {"bucket", m.Bucket == l.StoreBucket},
		{"first_record_id", m.FirstRecordID == uuid.UUID(l.FirstRecordID.Bytes)}, {"last_record_id", m.LastRecordID == uuid.UUID(l.LastRecordID.Bytes)},
		{"first_record_at", m.FirstRecordAt.Equal(l.FirstRecordAt.Time)}, {"last_record_at", m.LastRecordAt.Equal(l.LastRecordAt.Time)},
		{"hot_window_days", m.HotWindowDays == int(l.HotWindowDays)}, {"archived_by", m.ArchivedBy == l.ArchivedBy},
		{"archived_at", m.ArchivedAt.Truncate(time.Microsecond).Equal(l.ArchivedAt.Time)},
	} {
		if !f.same {
			return f.name
		}
	}
	return ""
}

// checkLines: as many lines as the ledger counts, each id inside the range.
func checkLines(data []byte, l queries.LedgerToVerifyRow, fail func(string, string, ...any) *Failure) *Failure {
	first, last := uuid.UUID(l.FirstRecordID.Bytes), uuid.UUID(l.LastRecordID.Bytes)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	n := 0
	for sc.Scan() {
		n++
		id, err := lineID(sc.Bytes())
		if err != nil {
			return fail(KindLineRange, "line %d has no id: %v", n, err)
		}
		if bytes.Compare(id[:], first[:]) < 0 || bytes.Compare(id[:], last[:]) > 0 {
			return fail(KindLineRange, "line %d: id %s outside [%s, %s]", n, id, first, last)
		}
	}
	if n != int(l.RecordCount) {
		return fail(KindLineCount, "%d lines, the ledger counts %d", n, l.RecordCount)
	}
	return nil
}

// orphans lists the objects under retention-archives/<service>/ (archive
// keys, not the probe or purge certificates) that no ledger row names.
func (r *Reader) orphans(ctx context.Context, rep *Report) error {
	objs, err := r.orphanObjects(ctx)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	for _, o := range objs {
		rep.OrphanCount++
		if len(rep.Orphans) < maxOrphanList {
			rep.Orphans = append(rep.Orphans, o.Key)
		}
	}
	return nil
}

// orphanObjects are the archive objects under the service's prefix that no
// local ledger row names (purged archives' keys included: never a key a
// ledger row names). The store is walked a page at a time and each page's
// keys are looked up in the ledger after they are listed (ADR-076): memory
// holds one page and the orphans, whatever the ledger's size, and an
// archive whose booking committed before its page is looked up is never
// taken for an orphan. One whose booking is still in flight is (its objects
// are written before its ledger row commits): the GC destroys only orphans
// older than its age bound, under the archive lease.
func (r *Reader) orphanObjects(ctx context.Context) ([]store.Object, error) {
	var out []store.Object
	// Every key with a version, not only a current one: an orphan behind a
	// delete marker (a plain delete in a versioned bucket) still holds its
	// rows.
	err := r.store.WalkAllObjects(ctx, store.Prefix+r.service+"/", func(page []store.Object) error {
		keys := make([]string, 0, len(page))
		for _, o := range page {
			if isArchiveKey(o.Key) {
				keys = append(keys, o.Key)
			}
		}
		if len(keys) == 0 {
			return nil
		}
		unnamed, err := queries.New(r.pool).UnnamedKeys(ctx, keys)
		if err != nil {
			return fmt.Errorf("ledger keys: %w", err)
		}
		for _, o := range page {
			if slices.Contains(unnamed, o.Key) {
				out = append(out, o)
			}
		}
		return nil
	})
	return out, err
}

func isArchiveKey(k string) bool {
	return bytes.HasSuffix([]byte(k), []byte(".ndjson")) || bytes.HasSuffix([]byte(k), []byte(".manifest.json"))
}

// heal restores, where the bucket keeps versions, an archive's object
// whose current version no longer matches the ledger (an overwrite, a
// delete marker) from the newest older version that does, and reports the
// archive as KindRestored; any other failure, or one no version can fix, is
// returned as it is.
func (r *Reader) heal(ctx context.Context, l queries.LedgerToVerifyRow, f Failure) Failure {
	var key string
	var match func([]byte) bool
	switch f.Kind {
	case KindMissingData, KindSHA256, KindLineCount, KindLineRange, KindUnreadable:
		key, match = l.DataKey, store.SHA256Matches(l.DataSha256)
	case KindMissingManifest, KindManifest:
		key = l.ManifestKey
		match = func(b []byte) bool {
			var m archive.Manifest
			return json.Unmarshal(b, &m) == nil && manifestDiffers(m, l) == ""
		}
	default:
		return f
	}
	found, err := r.store.GetMatching(ctx, key, match)
	if err != nil || found.VersionID == "" {
		return f
	}
	if err := r.store.Restore(ctx, key, found.VersionID); err != nil {
		f.Detail += fmt.Sprintf("; version %s matches the ledger but could not be restored: %v", found.VersionID, err)
		return f
	}
	detail := fmt.Sprintf("%s: %s; version %s, which matches the ledger, is current again", key, f.Kind, found.VersionID)
	if l.LegalHold { // the copy is a new version: it gets the hold the archive has
		if err := r.store.SetLegalHold(ctx, key, true); err != nil {
			detail += fmt.Sprintf("; its legal hold could not be set (the next lock reconciliation sets it): %v", err)
		}
	}
	return Failure{ArchiveID: f.ArchiveID, Kind: KindRestored, Detail: detail}
}
