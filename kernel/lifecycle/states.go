package lifecycle

import (
	"context"
	"fmt"

	"github.com/craig/retention/kernel/internal/queries"
)

// Ledger states: the label values of archive_ledger_archives.
const (
	StateKept    = "kept"    // not purged
	StateHeld    = "held"    // an active hold covers it
	StateDue     = "due"     // dated, past its date and unheld: the next purge's candidates
	StateUndated = "undated" // no retention date: never purgeable until dated
	StatePurged  = "purged"
)

// States are every ledger state, exported from boot at 0.
func States() []string { return []string{StateKept, StateHeld, StateDue, StateUndated, StatePurged} }

// LedgerStates counts each table's archives per state (tables without an
// archive are absent).
func (m *Manager) LedgerStates(ctx context.Context) (map[string]map[string]int64, error) {
	rows, err := queries.New(m.pool).LedgerStates(ctx)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: count the ledger's archives: %w", err)
	}
	out := make(map[string]map[string]int64, len(rows))
	for _, r := range rows {
		out[r.TableName] = map[string]int64{StateKept: r.Kept, StateHeld: r.Held, StateDue: r.Due, StateUndated: r.Undated, StatePurged: r.Purged}
	}
	return out, nil
}
