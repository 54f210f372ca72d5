package e2e_test

import (
	"context"
	"maps"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/migrations"
)

// The proof of the service-team seam: a fixture service adds one
// swept table (widgets) and one archived table (gizmo_events) the way
// docs/adding-a-table.md says, and runs the
// kernel's conformance through CheckSpec with nothing edited elsewhere. A
// real service writes its SQL in migrations/ and queries/ (sqlc); the
// fixture, being a test, inlines it.

// fixtureMigration is the fixture's migration: the swept table with its
// sweep index, the archived table with its (age, id) index and its
// insert-only trigger.
const fixtureMigration = `-- +goose Up
CREATE TABLE widgets (
    id      bigserial   PRIMARY KEY,
    state   text        NOT NULL,
    done_at timestamptz
);
CREATE INDEX widgets_done_idx ON widgets (done_at) WHERE state = 'done';
CREATE TABLE gizmo_events (
    id          uuid        PRIMARY KEY DEFAULT uuid_generate_v7(),
    happened_at timestamptz NOT NULL DEFAULT now(),
    what        text        NOT NULL
);
CREATE INDEX gizmo_events_happened_at_id_idx ON gizmo_events (happened_at, id);
CREATE TRIGGER gizmo_events_insert_only BEFORE UPDATE ON gizmo_events
    FOR EACH STATEMENT EXECUTE FUNCTION retention_refuse_update();
-- +goose Down
DROP TABLE gizmo_events;
DROP TABLE widgets;
`

// deleteDoneWidgets is the swept table's one query (queries/<svc>/ in a
// service): the batch delete, the predicate repeated in the outer DELETE.
const deleteDoneWidgets = `DELETE FROM widgets
WHERE ctid = ANY (ARRAY(
        SELECT w.ctid FROM widgets AS w
        WHERE w.state = 'done' AND w.done_at < now() - make_interval(days => $1::int)
        LIMIT $2::int))
  AND state = 'done' AND done_at < now() - make_interval(days => $1::int)`

// selectGizmos and deleteGizmos are the archived table's two queries, in
// the shape of queries/rules/archive.sql.
const (
	selectGizmos = `SELECT s.id, s.at_key, s.at::timestamptz AS at, s.doc_bytes,
       (s.running > $5::bigint)::boolean AS withheld,
       (CASE WHEN s.running <= $5::bigint THEN s.doc ELSE '' END)::text AS doc
FROM (
    SELECT e.id, e.happened_at AS ord_at, e.happened_at::text AS at_key,
           LEAST(GREATEST(e.happened_at, '0001-01-01 00:00:00+00'::timestamptz), '9999-12-31 23:59:59.999999+00'::timestamptz) AS at,
           j.doc, (octet_length(j.doc) + 1)::bigint AS doc_bytes,
           sum(octet_length(j.doc) + 1) OVER (ORDER BY e.happened_at, e.id ROWS UNBOUNDED PRECEDING)::bigint AS running
    FROM gizmo_events AS e
    CROSS JOIN LATERAL (SELECT to_jsonb(e)::text AS doc OFFSET 0) AS j
    WHERE e.happened_at < now() - make_interval(days => $1::int)
      AND (e.happened_at, e.id) > ($2::text::timestamptz, $3::uuid)
    ORDER BY e.happened_at, e.id
    LIMIT $4::int
) AS s
WHERE s.running - s.doc_bytes < $5::bigint
ORDER BY s.ord_at, s.id`
	deleteGizmos = `DELETE FROM gizmo_events WHERE id = ANY ($1::uuid[]) AND happened_at < now() - make_interval(days => $2::int)`
)

// fixtureSettings are the fixture service's settings: the transport keys
// (its swept table's window key is derived from its registration).
type fixtureSettings struct {
	settings.Transport `koanf:",squash"`
}

// gizmoRow is what sqlc would generate for selectGizmos.
type gizmoRow struct {
	ID       uuid.UUID
	AtKey    string
	At       time.Time
	DocBytes int64
	Withheld bool
	Doc      string
}

// fixtureSpec is the fixture service's wiring: one app.Local value.
func fixtureSpec() app.Spec[fixtureSettings] {
	return app.Spec[fixtureSettings]{
		Name:      "fixture",
		Defaults:  fixtureSettings{Transport: settings.DefaultTransport(app.DefaultDatabaseURL("fixture"))},
		Transport: func(s fixtureSettings) settings.Transport { return s.Transport },
		Locals: []app.Local[fixtureSettings]{{
			Sweep: prune.Declaration{
				Table:     "widgets",
				AgeColumn: "done_at",
				Eligible:  "state = 'done'",
				Keep:      "state <> 'done'",
				DeleteBatch: func(ctx context.Context, db prune.DB, p prune.BatchParams) (int64, error) {
					tag, err := db.Exec(ctx, deleteDoneWidgets, p.WindowDays, p.Limit)
					return tag.RowsAffected(), err
				},
			},
			DefaultWindowDays: 30,
		}},
	}
}

// gizmoEvents is the fixture's one archive.TableSpec.
func gizmoEvents() archive.TableSpec {
	return archive.TableSpec{
		Table: "gizmo_events", AgeColumn: "happened_at",
		Select: archive.SelectRows(func(ctx context.Context, db prune.DB, p archive.SelectParams) ([]gizmoRow, error) {
			rows, err := db.Query(ctx, selectGizmos, p.HotWindowDays, p.After.Key, p.After.ID, p.Limit, p.MaxBytes)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, pgx.RowToStructByPos[gizmoRow])
		}),
		Delete: func(ctx context.Context, tx pgx.Tx, hot int32, ids []uuid.UUID) (int64, error) {
			tag, err := tx.Exec(ctx, deleteGizmos, ids, hot)
			return tag.RowsAffected(), err
		},
	}
}

func TestFixtureServiceConformance(t *testing.T) {
	t.Parallel()
	s := fixtureSpec().Defaults
	seeds := kerneltest.TransportSeeds()
	maps.Copy(seeds, map[string]string{
		"widgets": `INSERT INTO widgets (state, done_at)
  SELECT CASE WHEN keep THEN 'pending' ELSE 'done' END, now() - make_interval(secs => age)
  FROM unnest($1::float8[], $2::bool[]) AS s(age, keep)`,
		"gizmo_events": `INSERT INTO gizmo_events (id, happened_at, what)
  SELECT id, now() - make_interval(secs => age), repeat('w', pad) FROM unnest($1::uuid[], $2::float8[], $3::int[]) AS s(id, age, pad)`,
	})
	fixture := migrations.Set{Name: "fixture", VersionTable: "goose_fixture_version",
		FS: fstest.MapFS{"00001_fixture.sql": {Data: []byte(fixtureMigration)}}}
	kerneltest.CheckSpec(t, kerneltest.Tables{
		Service: "fixture", Groups: app.Groups(fixtureSpec(), s), Archived: []archive.TableSpec{gizmoEvents()},
		Bookkeeper: archive.Bookkeeper{EventType: "fixture.gizmos_archived", SourceService: "craig-fixture"},
		Sets:       []migrations.Set{migrations.Transport(), fixture, migrations.Archive()},
	}, seeds)
}
