package archive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/prune"
)

// ErrNotInsertOnly is returned (wrapped) when an archived table lacks its
// insert-only trigger: an UPDATE between the archive's SELECT and its
// DELETE would lose the new version, so the archiver refuses to run.
var ErrNotInsertOnly = errors.New("archive: archived table is not insert-only")

// InsertOnlyTrigger is the trigger function every archived table's
// BEFORE UPDATE trigger must call (migrations/transport).
const InsertOnlyTrigger = "retention_refuse_update"

// CheckInsertOnly verifies that every table of specs has an enabled BEFORE
// UPDATE trigger calling retention_refuse_update(). It returns an
// error wrapping ErrNotInsertOnly naming each table that lacks one (or does
// not exist).
func CheckInsertOnly(ctx context.Context, db prune.DB, specs []TableSpec) error {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Table
	}
	have, err := queries.New(db).InsertOnlyTriggers(ctx, names)
	if err != nil {
		return fmt.Errorf("archive: check insert-only triggers: %w", err)
	}
	var missing []string
	for _, n := range names {
		if !slices.Contains(have, n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s has no enabled BEFORE UPDATE trigger calling %s() (add one in a migration: CREATE TRIGGER <table>_insert_only BEFORE UPDATE ON <table> FOR EACH STATEMENT EXECUTE FUNCTION %s())",
			ErrNotInsertOnly, strings.Join(missing, ", "), InsertOnlyTrigger, InsertOnlyTrigger)
	}
	return nil
}
