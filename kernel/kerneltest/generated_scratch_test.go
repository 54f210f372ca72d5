package kerneltest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archivetest"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/subject"
)

// notifications is a swept table whose age depends on its state: a sent
// notification ages from its completion, a failed one from its creation
// (a stored generated column); a pending one is never deleted.
const notifications = `CREATE TABLE notifications (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    status       text        NOT NULL CHECK (status IN ('pending', 'sent', 'failed')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    swept_at     timestamptz GENERATED ALWAYS AS (CASE WHEN status = 'sent' THEN completed_at ELSE created_at END) STORED)`

// notificationsPolicy sweeps notifications with the given batch delete's
// predicate (the right one reads swept_at).
func notificationsPolicy(predicate string) prune.Policy {
	return prune.Policy{Declaration: prune.Declaration{
		Table: "notifications", AgeColumn: "swept_at", Eligible: "status IN ('sent', 'failed')", Keep: "status NOT IN ('sent', 'failed')",
		DeleteBatch: func(ctx context.Context, db prune.DB, p prune.BatchParams) (int64, error) {
			tag, err := db.Exec(ctx, `DELETE FROM notifications WHERE ctid = ANY (ARRAY(
				SELECT ctid FROM notifications WHERE `+predicate+` LIMIT $2::int)) AND `+predicate, p.WindowDays, p.Limit)
			return tag.RowsAffected(), err
		},
	}, Bounds: prune.Bounds{WindowDays: 45, BatchSize: 7}}
}

// TestGeneratedRowsTellTheColumnsApart: the conformance suite's own rows
// pass the right delete and fail the ones a team's seed can hide: a
// delete that reads created_at for every state (a seed with created_at =
// completed_at passes it), one that ignores the state, and one that also
// deletes pending rows.
func TestGeneratedRowsTellTheColumnsApart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, predicate string
		wrong           bool
	}{
		{"the right delete", "status IN ('sent', 'failed') AND swept_at < now() - make_interval(days => $1::int)", false},
		{"reads created_at for sent rows", "status IN ('sent', 'failed') AND created_at < now() - make_interval(days => $1::int)", true},
		{"reads completed_at for failed rows", "status IN ('sent', 'failed') AND completed_at < now() - make_interval(days => $1::int)", true},
		{"takes pending rows", "swept_at < now() - make_interval(days => $1::int)", true},
		{"an off-by-one window", "status IN ('sent', 'failed') AND swept_at < now() - make_interval(days => $1::int - 1)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := kerneltest.NewDB(t)
			db.Exec(t, notifications)
			findings := kerneltest.GeneratedFindings(t, db, notificationsPolicy(tc.predicate))
			if tc.wrong {
				require.NotEmpty(t, findings)
				t.Logf("found: %v", findings)
			} else {
				require.Empty(t, findings)
			}
		})
	}
}

// TestASubjectWithoutItsIndexIsFound: a subject expression is indexed
// only by an index whose key it is. With that index dropped, the plan of
// a subject's hot rows (sequential scans off) still has no Seq Scan: it
// reads the age index whole, in its order, filtering by the subject. The
// suite's earlier check (no Seq Scan) passed that; UnindexedSubjects does
// not.
func TestASubjectWithoutItsIndexIsFound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kerneltest.NewDB(t)
	db.Exec(t, `CREATE TABLE events (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), at timestamptz NOT NULL, input jsonb NOT NULL)`)
	db.Exec(t, `CREATE INDEX events_at_idx ON events (at, id)`)
	db.Exec(t, `CREATE INDEX events_case_idx ON events ((input ->> 'case_id'))`)
	spec := archive.TableSpec{Table: "events", AgeColumn: "at", Subjects: []archive.Subject{{Kind: subject.Case, SQL: "input ->> 'case_id'"}}}

	missing, err := archivetest.UnindexedSubjects(ctx, db.Pool, spec, "17")
	require.NoError(t, err)
	require.Empty(t, missing)

	db.Exec(t, `DROP INDEX events_case_idx`)
	missing, err = archivetest.UnindexedSubjects(ctx, db.Pool, spec, "17")
	require.NoError(t, err)
	require.Len(t, missing, 1)
	var plan string
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "EXPLAIN "+archive.HotSubjectSQL(spec), "17")
		if err != nil {
			return err
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		plan = strings.Join(lines, "\n")
		return err
	}))
	require.NotContains(t, plan, "Seq Scan", "the hot rows' plan reads the age index whole, filtering by the subject")
	require.Contains(t, plan, "events_at_idx")
}
