package rules_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/services/rules"
	"github.com/stretchr/testify/require"
)

// The engine's properties over rule_evaluations (round trip, crash-resume,
// byte cap, quarantine, one pass at a time, concurrent writers, ledger
// ranges) run in TestConformance through the kernel's archivetest suite.
// What is rules' own is here: its payload's pinned fields and values, its
// columns, its numerics.

// productionSpec is the rules service's own rule_evaluations spec (its
// registry's method: other tables may be registered beside it).
func productionSpec(t testing.TB) archive.TableSpec {
	t.Helper()
	return rules.Tables{}.RuleEvaluations()
}

// eventFields is the pinned field list of rules.evaluations_archived (the
// security service validates every one of them).
var eventFields = []string{
	"source_service", "archive_id", "table", "data_key", "manifest_key", "data_sha256", "record_count",
	"store_endpoint", "store_bucket", "first_record_id", "last_record_id", "first_record_at",
	"last_record_at", "hot_window_days", "archived_at", "archived_by",
}

// TestArchiveRulesEvaluations: rules' archive carries its five columns in
// order, numerics exactly as stored (no float64 round trip), a row with
// the column defaults stays, and rules.evaluations_archived has exactly the
// pinned fields with source craig-rules and JSON numbers.
func TestArchiveRulesEvaluations(t *testing.T) {
	t.Parallel()
	ctx, env := newRulesEnv(t)
	aged := seedEvaluations(t, env.db, 1, 21, 100, 0)
	env.db.Exec(t, `INSERT INTO rule_evaluations (rule_id, input, output) VALUES ('now', '{}', '{}')`) // the column defaults
	fresh := docs(t, env.db, "NOT ("+agedWhere+")")
	require.Len(t, fresh, 1)

	rep, err := env.engine(t, []archive.TableSpec{productionSpec(t)}, rules.Bookkeep, nil).RunPass(ctx, archive.DefaultManualBudget)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.NotEmpty(t, rep.Table(rules.EvaluationsTable).Archives)
	ref := rep.Table(rules.EvaluationsTable).Archives[0]
	m, _, lines := readArchive(ctx, t, env.st, ref.DataKey, ref.ManifestKey)
	require.Len(t, lines, len(aged))
	require.Contains(t, lines[0].Text, `"big": 12345678901234567890.123456789`)
	require.Contains(t, lines[0].Text, `"tiny": 0.1000000000000000055511151231257827`)
	require.Contains(t, lines[0].Text, `"amount": 1.10`)
	require.Contains(t, lines[0].Text, `"limits": [1.10, 2.500, 0.0000001, 1000]`)
	var names []string
	for _, c := range m.Columns {
		names = append(names, c.Name)
	}
	require.Equal(t, []string{"id", "evaluated_at", "rule_id", "input", "output"}, names)
	require.Equal(t, fresh, docs(t, env.db, "true"), "the row with the column defaults stays")

	events := outboxEvents(t, env.db)
	require.Len(t, events, 1)
	ev := events[0]
	require.Equal(t, rules.EvaluationsArchivedEvent, ev.EventType)
	require.Equal(t, "rules.evaluations_archived", ev.EventType)
	require.ElementsMatch(t, eventFields, slices.Collect(maps.Keys(ev.Payload)))
	p := ev.Payload
	require.Equal(t, rules.SourceService, p["source_service"])
	require.Equal(t, "craig-rules", p["source_service"])
	require.Equal(t, m.ArchiveID.String(), p["archive_id"])
	require.Equal(t, rules.EvaluationsTable, p["table"])
	require.Equal(t, json.Number(fmt.Sprint(len(aged))), p["record_count"])
	require.Equal(t, json.Number("90"), p["hot_window_days"])
	require.Equal(t, archive.SystemActor, p["archived_by"])
}
