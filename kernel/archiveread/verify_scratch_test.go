package archiveread_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/store"
)

// TestVerifyFindsEveryKind: one verification over a ledger whose archives
// each break one way (read ahead of their checks, in ledger order) reports
// exactly the broken ones, each with its kind; shallow finds the missing
// and mismatched manifests and the missing data, deep the rest too; the
// sound archives pass in both.
func TestVerifyFindsEveryKind(t *testing.T) {
	t.Parallel()
	ctx, db, s3, st := scratchWorld(t)
	at := time.Now().UTC().Truncate(time.Microsecond)

	type breakage struct {
		name      string
		deep      string // the kind deep verify reports ("" sound)
		shallow   string // the kind shallow verify reports
		lines     func(id uuid.UUID) string
		count     int
		noData    bool
		noManfest bool
		manifest  func(*archive.Manifest)
		ledgerSHA string
	}
	line := func(id uuid.UUID) string { return `{"id": "` + id.String() + `", "rule_id": "r"}` + "\n" }
	cases := []breakage{
		{name: "sound", lines: line, count: 1},
		{name: "no manifest", deep: archiveread.KindMissingManifest, shallow: archiveread.KindMissingManifest, lines: line, count: 1, noManfest: true},
		{name: "manifest differs", deep: archiveread.KindManifest, shallow: archiveread.KindManifest, lines: line, count: 1,
			manifest: func(m *archive.Manifest) { m.RecordCount = 9 }},
		{name: "no data", deep: archiveread.KindMissingData, shallow: archiveread.KindMissingData, lines: line, count: 1, noData: true},
		{name: "sha256", deep: archiveread.KindSHA256, lines: line, count: 1, ledgerSHA: archive.SHA256Hex([]byte("other\n"))},
		{name: "line count", deep: archiveread.KindLineCount, lines: line, count: 2},
		{name: "line outside the range", deep: archiveread.KindLineRange, count: 1,
			lines: func(uuid.UUID) string { return line(uuid.MustParse("ffffffff-ffff-7fff-bfff-ffffffffffff")) }},
		{name: "sound too", lines: line, count: 1},
	}
	want := map[bool]map[uuid.UUID]string{true: {}, false: {}}
	for _, c := range cases {
		id := uuid.Must(uuid.NewV7())
		keys, err := store.NewArchiveKeys(s3.Service, "rule_evaluations", at, id.String())
		require.NoError(t, err)
		data := []byte(c.lines(id))
		m := archive.Manifest{ArchiveID: id, Table: "rule_evaluations", DataKey: keys.Data, ManifestKey: keys.Manifest,
			DataSHA256: archive.SHA256Hex(data), RecordCount: c.count, Endpoint: st.Identity().Endpoint, Bucket: st.Identity().Bucket,
			FirstRecordID: id, LastRecordID: id, FirstRecordAt: at, LastRecordAt: at, HotWindowDays: 90, ArchivedAt: at, ArchivedBy: archive.SystemActor}
		if c.ledgerSHA != "" {
			m.DataSHA256 = c.ledgerSHA
		}
		booked := m
		if c.manifest != nil {
			c.manifest(&m)
		}
		if !c.noData {
			require.NoError(t, st.PutCreate(ctx, keys.Data, data, store.ContentTypeNDJSON))
		}
		if !c.noManfest {
			mb, err := json.Marshal(m)
			require.NoError(t, err)
			require.NoError(t, st.PutCreate(ctx, keys.Manifest, mb, store.ContentTypeJSON))
		}
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			return archive.Bookkeeper{EventType: "rules.evaluations_archived", SourceService: "craig-rules"}.Bookkeep(ctx, tx, booked, archive.SystemActor)
		}))
		if c.deep != "" {
			want[true][id] = c.deep
		}
		if c.shallow != "" {
			want[false][id] = c.shallow
		}
	}
	r := archiveread.New(db.Pool, st, s3.Service, nil)
	for _, deep := range []bool{true, false} {
		rep, err := r.Verify(ctx, deep, 0)
		require.NoError(t, err)
		require.Equal(t, len(cases), rep.Checked)
		got := map[uuid.UUID]string{}
		for _, f := range rep.Failures {
			got[f.ArchiveID] = f.Kind
		}
		require.Equal(t, want[deep], got, "deep=%v: %+v", deep, rep.Failures)
		require.Equal(t, len(want[deep]), rep.Failed)
		require.Zero(t, rep.OrphanCount)
	}
	rep, err := r.Verify(ctx, true, 3)
	require.NoError(t, err)
	require.Equal(t, 3, rep.Checked, "limit bounds the archives checked")
}
