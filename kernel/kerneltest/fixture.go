package kerneltest

import (
	"testing/fstest"

	"github.com/craig/retention/migrations"
)

// archivedFixtureSQL is a table shaped like a service's archived table, for
// the kernel's own tests (the kernel imports no service SQL; each service's
// conformance suite proves its real tables): rule_evaluations with its
// (age, id) index and its insert-only trigger.
const archivedFixtureSQL = `-- +goose Up
CREATE TABLE rule_evaluations (
    id           uuid        PRIMARY KEY DEFAULT uuid_generate_v7(),
    evaluated_at timestamptz NOT NULL DEFAULT now(),
    rule_id      text        NOT NULL,
    input        jsonb       NOT NULL,
    output       jsonb       NOT NULL
);
CREATE INDEX rule_evaluations_evaluated_at_id_idx ON rule_evaluations (evaluated_at, id);
CREATE TRIGGER rule_evaluations_insert_only BEFORE UPDATE ON rule_evaluations
    FOR EACH STATEMENT EXECUTE FUNCTION retention_refuse_update();
-- +goose Down
DROP TABLE rule_evaluations;
`

// ArchivingFixture is every set of an archiving service's database, with
// the kernel's fixture table standing for the service's own set: transport,
// the fixture (rule_evaluations), archive.
func ArchivingFixture() []migrations.Set {
	fixture := migrations.New("fixture", fstest.MapFS{"00001_rule_evaluations.sql": {Data: []byte(archivedFixtureSQL)}})
	return []migrations.Set{migrations.Transport(), fixture, migrations.Archive()}
}
