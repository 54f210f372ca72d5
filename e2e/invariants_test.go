package e2e

import (
	"cmp"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/invariants"
	"github.com/craig/retention/kernel/prune"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/sweep"
	"github.com/craig/retention/services/exchange"
	"github.com/craig/retention/services/financial"
	"github.com/craig/retention/services/rules"
	"github.com/craig/retention/services/security"
)

var integerLiteral = regexp.MustCompile(`\d+`)

// requireTiedToConstants fails unless the integers written in the spec's
// text are exactly its threshold, its window and the grace constant, and
// the threshold is the window plus the grace: the text can never state a
// number the check does not use.
func requireTiedToConstants(t *testing.T, s invariants.Spec) {
	t.Helper()
	var got []int
	for _, m := range integerLiteral.FindAllString(s.Description, -1) {
		n, err := strconv.Atoi(m)
		require.NoError(t, err)
		got = append(got, n)
	}
	require.Equal(t, s.WindowDays+invariants.OverrunGraceDays, s.ThresholdDays, "%s: threshold = window + grace", s.Name)
	require.ElementsMatch(t, []int{s.ThresholdDays, s.WindowDays, invariants.OverrunGraceDays}, got,
		"%s: the literals of %q", s.Name, s.Description)
}

type wantSpec struct {
	name      string
	table     string
	threshold int
}

var (
	outboxSpec    = wantSpec{"outbox_retention_overrun", "event_outbox", 32}
	inboxSpec     = wantSpec{"inbox_retention_overrun", "event_inbox", 33}
	sendJobsSpec  = wantSpec{"send_jobs_retention_overrun", exchange.SendJobsTable, 32}
	reconcileSpec = wantSpec{"reconcile_settled_retention_overrun", financial.ReconcileTable, 32}
)

// TestEveryPolicyGetsItsInvariant: each service's invariants are derived by
// the kernel from the policies it sweeps, with the specified names and, at the
// default windows, the specified thresholds.
func TestEveryPolicyGetsItsInvariant(t *testing.T) {
	t.Parallel()
	tests := []struct {
		service string
		specs   []invariants.Spec
		want    []wantSpec
	}{
		{exchange.Name, app.InvariantSpecs(exchange.Spec(), exchange.DefaultSettings()), []wantSpec{outboxSpec, inboxSpec, sendJobsSpec}},
		{financial.Name, app.InvariantSpecs(financial.Spec(), financial.DefaultSettings()), []wantSpec{outboxSpec, inboxSpec, reconcileSpec}},
		{rules.Name, app.InvariantSpecs(rules.Spec(), rules.DefaultSettings()), []wantSpec{outboxSpec, inboxSpec}},
		{security.Name, app.InvariantSpecs(security.Spec(), security.DefaultSettings()), []wantSpec{outboxSpec, inboxSpec}},
	}
	for _, tt := range tests {
		t.Run(tt.service, func(t *testing.T) {
			t.Parallel()
			// Derived: an overrun and a future-dated watchdog per swept
			// table, overruns first (a new table needs no edit here); the
			// archived tables' watchdogs come after (TestArchiveWatchdogs,
			// and their unparsed subjects).
			tt.specs = slices.DeleteFunc(slices.Clone(tt.specs), func(s invariants.Spec) bool {
				return strings.HasSuffix(s.Name, "_hot_window_overrun") || strings.HasSuffix(s.Name, "_subject_unparsed")
			})
			n := len(tt.specs) / 2
			require.Len(t, tt.specs, 2*n)
			for i, s := range tt.specs[n:] {
				require.Equal(t, strings.TrimSuffix(tt.specs[i].Name, "_retention_overrun")+"_future_dated", s.Name)
				require.Equal(t, tt.specs[i].Table, s.Table)
			}
			byName := map[string]invariants.Spec{}
			for _, s := range tt.specs[:n] {
				require.True(t, strings.HasSuffix(s.Name, "_retention_overrun"), s.Name)
				byName[s.Name] = s
				// A policy off by default (the outbox's dead letters, kept
				// unless outbox.dead_letter_retention_days is set) has its
				// watchdog disabled; every other one is on.
				require.Equal(t, s.WindowDays == 0, s.Disabled(), s.Name)
				if !s.Disabled() {
					requireTiedToConstants(t, s)
				}
			}
			// Pinned: the specified names, tables and default thresholds.
			for _, w := range tt.want {
				s, ok := byName[w.name]
				require.True(t, ok, "%s: %s is derived", tt.service, w.name)
				require.Equal(t, w.table, s.Table)
				require.Equal(t, w.threshold, s.ThresholdDays, s.Name)
				requireTiedToConstants(t, s)
			}
		})
	}
}

// TestRealPolicyDescriptionsFollowTheirWindow: for each of the four real
// policies, at several windows, the text states exactly the window, the
// grace and their sum; a changed window changes the text; window 0 is
// disabled.
func TestRealPolicyDescriptionsFollowTheirWindow(t *testing.T) {
	t.Parallel()
	transport := func(table string) func(window int) prune.Policy {
		return func(window int) prune.Policy {
			s := exchange.DefaultSettings()
			// The inbox must outlive the outbox; set both so each is valid.
			s.EventOutboxRetentionDays, s.EventInboxRetentionDays = window, window
			return policyOf(t, app.Groups(exchange.Spec(), s), table)
		}
	}
	policies := []struct {
		name   string
		policy func(window int) prune.Policy
	}{
		{outboxSpec.name, transport(outboxSpec.table)},
		{inboxSpec.name, transport(inboxSpec.table)},
		{sendJobsSpec.name, func(window int) prune.Policy {
			s := exchange.DefaultSettings()
			s.Derived = settings.Values{app.WindowKey(exchange.SendJobsTable): window}
			return exchange.SendJobsPolicy(s)
		}},
		{reconcileSpec.name, func(window int) prune.Policy {
			s := financial.DefaultSettings()
			s.Derived = settings.Values{app.WindowKey(financial.ReconcileTable): window}
			return financial.ReconcilePolicy(s)
		}},
	}
	for _, pt := range policies {
		t.Run(pt.name, func(t *testing.T) {
			t.Parallel()
			seen := map[string]int{}
			for _, window := range []int{1, 7, 30, 31, 90, 365, prune.MaxWindowDays} {
				p := pt.policy(window)
				require.NoError(t, p.Inspectable(), "the kernel can build the watchdog's query")
				s := invariants.FromPolicy(p)
				require.Equal(t, pt.name, s.Name)
				require.Equal(t, window, s.WindowDays)
				requireTiedToConstants(t, s)
				require.Contains(t, s.Description, p.Eligible, "the text names the predicate")
				require.Contains(t, s.Description, p.AgeColumn)
				if other, dup := seen[s.Description]; dup {
					t.Fatalf("windows %d and %d give the same text %q", other, window, s.Description)
				}
				seen[s.Description] = window
			}

			s := invariants.FromPolicy(pt.policy(0))
			require.True(t, s.Disabled())
			require.Zero(t, s.ThresholdDays)
		})
	}
}

// policyOf finds a table's policy among a service's groups, by name rather
// than by position.
func policyOf(t *testing.T, groups []sweep.Group, table string) prune.Policy {
	t.Helper()
	for _, p := range sweep.Policies(groups) {
		if p.Table == table {
			return p
		}
	}
	t.Fatalf("no policy for %s", table)
	return prune.Policy{}
}

// TestArchiveWatchdogs: every archived table of rules and
// security has a watchdog of rows older than the hot window + one shared
// grace of 7 days (97 at the defaults), disabled while the archiver is off.
func TestArchiveWatchdogs(t *testing.T) {
	t.Parallel()
	on := func(s archive.Settings) archive.Settings { s.Enabled = true; return s }
	rs, ss := rules.DefaultSettings(), security.DefaultSettings()
	rsOn, ssOn := rs, ss
	rsOn.Archive, ssOn.Archive = on(rs.Archive), on(ss.Archive)
	for _, tt := range []struct {
		name     string
		off, got []invariants.Spec
		tables   []string // derived: every registered table
		seed     []string // pinned: the specified tables are among them
	}{
		{"rules", app.InvariantSpecs(rules.Spec(), rs), app.InvariantSpecs(rules.Spec(), rsOn), archive.TableNames(rules.ArchiveTables()), []string{"rule_evaluations"}},
		{"security", app.InvariantSpecs(security.Spec(), ss), app.InvariantSpecs(security.Spec(), ssOn), archive.TableNames(security.ArchiveTables()), []string{"audit_log", "dead_letter_audit"}},
	} {
		require.Subset(t, tt.tables, tt.seed, tt.name)
		watch := func(specs []invariants.Spec) []invariants.Spec {
			return slices.DeleteFunc(slices.Clone(specs), func(s invariants.Spec) bool { return !strings.HasSuffix(s.Name, "_hot_window_overrun") })
		}
		off, got := watch(tt.off), watch(tt.got)
		require.Len(t, got, len(tt.tables), tt.name)
		hot := map[string]int{}
		for _, s := range append(rules.ArchiveTables(), security.ArchiveTables()...) {
			hot[s.Table] = cmp.Or(s.HotWindowDays, archive.DefaultHotWindowDays) // its own, else the service's
		}
		for i, table := range tt.tables {
			require.Equal(t, table+"_hot_window_overrun", got[i].Name)
			require.Equal(t, table, got[i].Table)
			require.Equal(t, hot[table]+invariants.ArchiveOverrunGraceDays, got[i].ThresholdDays)
			if slices.Contains(tt.seed, table) {
				require.Equal(t, 97, got[i].ThresholdDays, "the specified tables: 90 + 7")
			}
			require.True(t, off[i].Disabled(), "%s: disabled while the archiver is off", table)
		}
	}
}
