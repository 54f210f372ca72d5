package security

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/subject"
	"github.com/craig/retention/services/security/internal/queries"
)

// AccessReviews archives access_reviews after a hot window of 120 days of
// its own; each review is about the case its case_ref names.
func (Tables) AccessReviews() archive.TableSpec {
	return archive.TableSpec{
		Table: "access_reviews", AgeColumn: "reviewed_at", HotWindowDays: 120,
		Subjects: []archive.Subject{{Kind: subject.Case, SQL: "retention_subject('case', case_ref)", Field: "case_ref"}},
		Select: archive.SelectRows(func(ctx context.Context, db prune.DB, p archive.SelectParams) ([]queries.SelectAccessReviewsBatchRow, error) {
			return queries.New(db).SelectAccessReviewsBatch(ctx, queries.SelectAccessReviewsBatchParams{
				HotWindowDays: p.HotWindowDays, AfterKey: p.After.Key, AfterID: p.After.ID, BatchLimit: p.Limit, MaxBytes: p.MaxBytes,
			})
		}),
		Delete: func(ctx context.Context, tx pgx.Tx, hot int32, ids []uuid.UUID) (int64, error) {
			return queries.New(tx).DeleteAccessReviewsByIDs(ctx, queries.DeleteAccessReviewsByIDsParams{Ids: ids, HotWindowDays: hot})
		},
	}
}
