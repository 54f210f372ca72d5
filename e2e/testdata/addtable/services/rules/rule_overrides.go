package rules

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/services/rules/internal/queries"
)

// RuleOverrides archives rule_overrides after a hot window of 30 days of its
// own; its archives become purgeable seven years after their newest record.
func (Tables) RuleOverrides() archive.TableSpec {
	return archive.TableSpec{
		Table: "rule_overrides", AgeColumn: "overridden_at", HotWindowDays: 30, RetentionDays: 2555,
		Select: archive.SelectRows(func(ctx context.Context, db prune.DB, p archive.SelectParams) ([]queries.SelectRuleOverridesBatchRow, error) {
			return queries.New(db).SelectRuleOverridesBatch(ctx, queries.SelectRuleOverridesBatchParams{
				HotWindowDays: p.HotWindowDays, AfterKey: p.After.Key, AfterID: p.After.ID, BatchLimit: p.Limit, MaxBytes: p.MaxBytes,
			})
		}),
		Delete: func(ctx context.Context, tx pgx.Tx, hot int32, ids []uuid.UUID) (int64, error) {
			return queries.New(tx).DeleteRuleOverridesByIDs(ctx, queries.DeleteRuleOverridesByIDsParams{Ids: ids, HotWindowDays: hot})
		},
	}
}
