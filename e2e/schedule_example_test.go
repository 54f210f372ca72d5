package e2e_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/schedule"
	"github.com/craig/retention/services/rules"
	"github.com/craig/retention/services/security"
)

// TestExampleScheduleIsValid: the example records schedule the demo and the
// runbook load is valid against the fleet's archived tables, and covers
// every one of them (what `craigctl schedule propose --fleet` checks).
func TestExampleScheduleIsValid(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "deploy", "records-schedule", "example.yaml"))
	require.NoError(t, err)
	var series []schedule.Series
	for _, spec := range append(rules.ArchiveTables(), security.ArchiveTables()...) {
		series = append(series, schedule.Series{Table: spec.Table, RetentionDays: spec.RetentionDays})
	}
	doc, err := schedule.Parse(raw, series)
	require.NoError(t, err)
	require.Equal(t, "CW-2026.1", doc.Version)
	require.Len(t, doc.Items, 4)
}
