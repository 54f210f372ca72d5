package invariants_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/invariants"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/sweep"
)

// noQueryDB is a prune.DB that fails the test on any use: a check that must
// not touch the database gets one.
type noQueryDB struct{ t *testing.T }

var errNoQuery = errors.New("noQueryDB: the database must not be queried")

func (d noQueryDB) Begin(context.Context) (pgx.Tx, error) {
	d.t.Errorf("unexpected Begin")
	return nil, errNoQuery
}

func (d noQueryDB) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	d.t.Errorf("unexpected Exec %q", sql)
	return pgconn.CommandTag{}, errNoQuery
}

func (d noQueryDB) Query(_ context.Context, sql string, _ ...any) (pgx.Rows, error) {
	d.t.Errorf("unexpected Query %q", sql)
	return nil, errNoQuery
}

func (d noQueryDB) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	d.t.Errorf("unexpected QueryRow %q", sql)
	return errRow{}
}

type errRow struct{}

func (errRow) Scan(...any) error { return errNoQuery }

var integers = regexp.MustCompile(`\d+`)

// literals returns every integer written in s, in order.
func literals(t *testing.T, s string) []int {
	t.Helper()
	var out []int
	for _, m := range integers.FindAllString(s, -1) {
		n, err := strconv.Atoi(m)
		require.NoError(t, err)
		out = append(out, n)
	}
	return out
}

// RequireTiedToConstants fails unless every number in the spec's text is
// one of its threshold, its window and the grace constant (each exactly
// once), and the threshold is the window plus the grace. It is the check the
// issue asks for: no literal in a watchdog's text may drift from the
// constants it is computed from.
func requireTiedToConstants(t *testing.T, s invariants.Spec) {
	t.Helper()
	require.Equal(t, s.WindowDays+invariants.OverrunGraceDays, s.ThresholdDays, "%s: threshold = window + grace", s.Name)
	require.ElementsMatch(t, []int{s.ThresholdDays, s.WindowDays, invariants.OverrunGraceDays}, literals(t, s.Description),
		"%s: every literal in %q is the threshold, the window or the grace", s.Name, s.Description)
}

func transportSpecs(outbox, inbox int) (invariants.Spec, invariants.Spec) {
	g := sweep.Transport(sweep.TransportConfig{OutboxWindowDays: outbox, InboxWindowDays: inbox})
	return invariants.FromPolicy(g.Policies[0]), invariants.FromPolicy(g.Policies[1])
}

func TestGraceConstant(t *testing.T) {
	t.Parallel()
	// The specification fixes the thresholds at the default windows:
	// outbox 32 d, inbox 33 d. Both follow from one grace of two days.
	require.Equal(t, 2, invariants.OverrunGraceDays)
	out, in := transportSpecs(settings.DefaultOutboxRetentionDays, settings.DefaultInboxRetentionDays)
	require.Equal(t, 32, out.ThresholdDays)
	require.Equal(t, 33, in.ThresholdDays)
}

func TestTransportSpecs(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name          string
		outbox, inbox int
	}{
		{"Defaults", settings.DefaultOutboxRetentionDays, settings.DefaultInboxRetentionDays},
		{"Longer", 45, 46},
		{"Shortest", 1, 2},
		{"WindowEqualsGrace", invariants.OverrunGraceDays, invariants.OverrunGraceDays + 1},
		{"TenYears", prune.MaxWindowDays - 1, prune.MaxWindowDays},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, in := transportSpecs(tt.outbox, tt.inbox)

			require.Equal(t, "outbox_retention_overrun", out.Name)
			require.Equal(t, sweep.OutboxTable, out.Table)
			require.Equal(t, tt.outbox, out.WindowDays)
			require.Equal(t, tt.outbox+invariants.OverrunGraceDays, out.ThresholdDays)
			require.False(t, out.Disabled())
			require.Contains(t, out.Description, "published_at IS NOT NULL", "the text names the predicate it counts")
			require.Contains(t, out.Description, "created_at")
			requireTiedToConstants(t, out)

			require.Equal(t, "inbox_retention_overrun", in.Name)
			require.Equal(t, sweep.InboxTable, in.Table)
			require.Equal(t, tt.inbox, in.WindowDays)
			require.Equal(t, tt.inbox+invariants.OverrunGraceDays, in.ThresholdDays)
			require.Contains(t, in.Description, "received_at")
			requireTiedToConstants(t, in)
		})
	}
}

func TestDescriptionFollowsTheWindow(t *testing.T) {
	t.Parallel()
	a, _ := transportSpecs(30, 31)
	b, _ := transportSpecs(45, 46)
	require.NotEqual(t, a.Description, b.Description, "a changed window must change the text")
	require.Contains(t, a.Description, "older than 32 days")
	require.Contains(t, b.Description, "older than 47 days")
	require.NotContains(t, b.Description, "32")
	require.NotContains(t, b.Description, "30")
}

func TestFromPolicyDefaultName(t *testing.T) {
	t.Parallel()
	s := invariants.FromPolicy(prune.Policy{Declaration: prune.Declaration{Table: "some_queue", AgeColumn: "done_at", Eligible: "done_at IS NOT NULL"}, Bounds: prune.Bounds{WindowDays: 7}})
	require.Equal(t, "some_queue_retention_overrun", s.Name)
	require.Equal(t, 9, s.ThresholdDays)
	requireTiedToConstants(t, s)
}

func TestDisabledSpecNeverQueries(t *testing.T) {
	t.Parallel()
	out, in := transportSpecs(0, 0)
	for _, s := range []invariants.Spec{out, in} {
		require.True(t, s.Disabled(), s.Name)
		require.Zero(t, s.ThresholdDays, s.Name)
		require.Contains(t, s.Description, "disabled")
		require.Equal(t, []int{0}, literals(t, s.Description), "the only number in a disabled spec's text is its window, 0")
	}

	db := noQueryDB{t}
	r, err := invariants.Check(context.Background(), db, out)
	require.NoError(t, err)
	require.Equal(t, invariants.Result{
		Name: "outbox_retention_overrun", Table: sweep.OutboxTable, Disabled: true, Description: out.Description,
	}, r)

	rs, err := invariants.CheckAll(context.Background(), db, []invariants.Spec{out, in})
	require.NoError(t, err)
	require.Len(t, rs, 2)
	for _, r := range rs {
		require.True(t, r.Disabled)
		require.Zero(t, r.Violations)
		require.Nil(t, r.OldestAgeSeconds)
	}
	require.False(t, invariants.Violated(rs))
}

func TestCheckRefusesAnUninspectablePolicyWithoutQuerying(t *testing.T) {
	t.Parallel()
	s := invariants.FromPolicy(prune.Policy{
		Declaration: prune.Declaration{
			Table: "t",
			DeleteBatch: func(context.Context, prune.DB, prune.BatchParams) (int64, error) {
				return 0, nil
			},
		},
		Bounds: prune.Bounds{
			WindowDays: 30,
		},
	}) // no AgeColumn, no Eligible
	_, err := invariants.Check(context.Background(), noQueryDB{t}, s)
	require.ErrorIs(t, err, prune.ErrNotInspectable)
	require.ErrorContains(t, err, "invariant t_retention_overrun")
}

func TestViolated(t *testing.T) {
	t.Parallel()
	require.False(t, invariants.Violated(nil))
	require.False(t, invariants.Violated([]invariants.Result{{Name: "a"}, {Name: "b", Disabled: true}}))
	require.True(t, invariants.Violated([]invariants.Result{{Name: "a"}, {Name: "b", Violations: 1}}))
}

func TestResultJSON(t *testing.T) {
	t.Parallel()
	age := 3456000.5
	for _, tt := range []struct {
		name string
		r    invariants.Result
		want string
	}{
		{
			name: "Clean",
			r:    invariants.Result{Name: "outbox_retention_overrun", Table: "event_outbox", ThresholdDays: 32, Description: "d"},
			want: `{"name":"outbox_retention_overrun","table":"event_outbox","violations":0,"oldest_age_seconds":null,"threshold_days":32,"description":"d"}`,
		},
		{
			name: "Violated",
			r:    invariants.Result{Name: "inbox_retention_overrun", Table: "event_inbox", Violations: 3, OldestAgeSeconds: &age, ThresholdDays: 33, Description: "d"},
			want: `{"name":"inbox_retention_overrun","table":"event_inbox","violations":3,"oldest_age_seconds":3456000.5,"threshold_days":33,"description":"d"}`,
		},
		{
			name: "Disabled",
			r:    invariants.Result{Name: "x", Table: "t", Disabled: true, Description: "d"},
			want: `{"name":"x","table":"t","violations":0,"oldest_age_seconds":null,"threshold_days":0,"disabled":true,"description":"d"}`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(tt.r)
			require.NoError(t, err)
			require.JSONEq(t, tt.want, string(b))
		})
	}
}
