package lifecycle_test

// The third hostile round's findings on holds and court orders: each test
// failed on main before its fix.

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/lifecycle"
)

// TestHoldNamedByAnOrderKeepsHolding: a subject hold the expungement names
// does not block the order, and after it the hold still holds the
// subject: an archive booked later with the subject's new rows is held,
// and a purge of it answers as held (it destroyed the archive while the
// hold was active on main).
func TestHoldNamedByAnOrderKeepsHolding(t *testing.T) {
	t.Parallel()
	w := newOrderWorld(t)
	h, err := w.mgr.PlaceHold(w.ctx, lifecycle.HoldRequest{Title: "case 17 hearing", Reason: "fair hearing", Subjects: []string{"case:17"}}, "ops:carol")
	require.NoError(t, err)
	req, err := w.orders.RequestExpunge(w.ctx, mustSubject(t, "case:17"), "JV-9", "order names the hearing's hold", []uuid.UUID{h.ID}, "ops:alice")
	require.NoError(t, err)
	_, err = w.orders.Approve(w.ctx, req.ExpungeID, "ops:bob")
	require.NoError(t, err)

	// New rows about case 17 arrive after the order and age out.
	for n := 1; n <= 5; n++ {
		w.db.Exec(t, `INSERT INTO rule_evaluations (evaluated_at, rule_id, input, output)
			VALUES (now() - interval '300 days' + make_interval(mins => $1), 'r', jsonb_build_object('case_id', 17, 'n', 200 + $1), '{}')`, n)
	}
	rep, err := w.eng.RunPass(w.ctx, 10)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	require.Len(t, rep.Tables[0].Archives, 1)
	later := rep.Tables[0].Archives[0].ArchiveID

	var heldFlag bool
	require.NoError(t, w.db.Pool.QueryRow(w.ctx, `SELECT legal_hold FROM archive_ledger WHERE archive_id = $1`, later).Scan(&heldFlag))
	require.True(t, heldFlag, "the later archive of case 17 is booked held")
	w.db.Exec(t, `UPDATE archive_ledger SET retention_until = (now() AT TIME ZONE 'UTC')::date - 1 WHERE archive_id = $1`, later)
	pr, err := w.mgr.Purge(w.ctx, 10, false, "ops:alice")
	require.NoError(t, err)
	require.NotContains(t, pr.Purged, later, "the hold on case 17 is active: its later archive is not purged")
	require.Nil(t, w.purgedBy(t, later))
	holds, err := w.mgr.Holds(w.ctx)
	require.NoError(t, err)
	var found bool
	for _, x := range holds {
		if x.ID == h.ID {
			found = true
			require.Contains(t, x.Covers, later, "the hold lists the later archive among what it covers")
		}
	}
	require.True(t, found)
}
