package lifecycle_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/lifecycle"
	"github.com/craig/retention/kernel/subject"
)

// TestHostileDeclarationChangeLeavesLegalHoldStale: a table's subject
// declaration changes while a subject hold is active: SyncSubjectDeclarations
// marks its archives unindexed (archive_is_held is now true for every one of
// them: "an archive not yet indexed while a subject hold is active is
// held") but does not refresh legal_hold, so legal_hold and archive_is_held
// disagree until some refresh runs. This is the drift that two concurrent
// refreshes (TestHostileConcurrentReconcilesToggleLegalHold) then flip twice.
func TestHostileDeclarationChangeLeavesLegalHoldStale(t *testing.T) {
	w := newSubjectWorld(t)
	arch := w.archives(t)
	require.Len(t, arch, 4)
	_, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "t", Reason: "r", Subjects: []string{"case:19"}}, "ops:carol")
	require.NoError(t, err)
	require.Empty(t, disagreeing(t, w.world))
	changed := subjectSpec()
	changed.Subjects = append(changed.Subjects, archive.Subject{Kind: subject.Person, SQL: "retention_subject('person', input ->> 'person_id')"})
	n, err := archive.SyncSubjectDeclarations(w.ctx, w.db.Pool, []archive.TableSpec{changed})
	require.NoError(t, err)
	require.Equal(t, int64(4), n["rule_evaluations"])
	require.Empty(t, disagreeing(t, w.world), "legal_hold equals archive_is_held after the declaration changed")
}
