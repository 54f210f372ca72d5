package rules

import (
	"context"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/subject"
	"github.com/craig/retention/services/rules/internal/queries"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// EvaluationsTable is the archived table of rule evaluations.
const EvaluationsTable = "rule_evaluations"

// EvaluationsArchivedEvent is staged with every archive, for security's
// fleet ledger (secondary bookkeeping: the local archive_ledger is the truth).
const EvaluationsArchivedEvent = "rules.evaluations_archived"

// SourceService identifies rules as the event's source (security validates
// it before any write).
const SourceService = "craig-rules"

// Tables is the rules service's table registry: each exported method is one
// table (app.ArchivedOf, app.LocalsOf). A new table is a method in a file
// of its own.
type Tables struct{}

// ArchiveTables returns the archived tables of the rules service (its
// registry's).
func ArchiveTables() []archive.TableSpec { return app.ArchivedOf(Tables{}) }

// RuleEvaluations is rule_evaluations: its two queries
// (queries/rules/archive.sql) and this value.
func (Tables) RuleEvaluations() archive.TableSpec {
	return archive.TableSpec{
		Table:     EvaluationsTable,
		AgeColumn: "evaluated_at",
		// The case an evaluation is about: case:<input->>'case_id'>
		// (migrations/rules 00003: the function and its index).
		Subjects: []archive.Subject{{Kind: subject.Case, SQL: "rule_evaluations_case(input)", Field: "input ->> 'case_id'"}},
		Select: archive.SelectRows(func(ctx context.Context, db prune.DB, p archive.SelectParams) ([]queries.SelectRuleEvaluationsBatchRow, error) {
			return queries.New(db).SelectRuleEvaluationsBatch(ctx, queries.SelectRuleEvaluationsBatchParams{
				HotWindowDays: p.HotWindowDays, AfterKey: p.After.Key, AfterID: p.After.ID, BatchLimit: p.Limit, MaxBytes: p.MaxBytes,
			})
		}),
		Delete: func(ctx context.Context, tx pgx.Tx, hotWindowDays int32, ids []uuid.UUID) (int64, error) {
			return queries.New(tx).DeleteRuleEvaluationsByIDs(ctx, queries.DeleteRuleEvaluationsByIDsParams{Ids: ids, HotWindowDays: hotWindowDays})
		},
	}
}

// Bookkeeper is the rules service's archive bookkeeping: the kernel's one
// (archive.Bookkeeper), staging rules.evaluations_archived with source
// craig-rules.
func Bookkeeper() archive.Bookkeeper {
	return archive.Bookkeeper{EventType: EvaluationsArchivedEvent, SourceService: SourceService}
}

// Producer is rules as the fleet ledger knows it, derived from its
// registration: security validates rules' archive events against it.
func Producer() archive.Producer { return archive.ProducerOf(Name, Bookkeeper(), ArchiveTables()) }

// Bookkeep writes the rules service's ledger row and stages its event
// inside each archive's delete transaction (Bookkeeper's Bookkeep).
func Bookkeep(ctx context.Context, tx pgx.Tx, m archive.Manifest, archivedBy string) error {
	return Bookkeeper().Bookkeep(ctx, tx, m, archivedBy)
}
