package schedule_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/schedule"
)

var series = []schedule.Series{{Table: "audit_log"}, {Table: "dead_letter_audit", RetentionDays: 365}}

const valid = `version: "2026-01"
items:
  - id: CW-12
    series: audit_log
    starts: [record, case.closed]
    retain: P10Y
    authority: GRS-2482, authorized 1998-03-20
  - id: CW-12u
    series: audit_log
    when: {classification: unsubstantiated}
    starts: case.closed
    retain: P5Y
    action: destroy
    authority: Missouri child welfare manual 5.5
  - id: DL-1
    series: dead_letter_audit
    starts: record
    retain: P1Y
    authority: agency policy 7
`

func TestParseReadsASchedule(t *testing.T) {
	t.Parallel()
	d, err := schedule.Parse([]byte(valid), series)
	require.NoError(t, err)
	require.Equal(t, "2026-01", d.Version)
	require.Len(t, d.Items, 3)
	require.Equal(t, schedule.Starts{schedule.ClockRecord, schedule.ClockCaseClosed}, d.Items[0].Starts)
	require.Equal(t, schedule.Starts{schedule.ClockCaseClosed}, d.Items[1].Starts, "one clock, written bare")
	require.Equal(t, schedule.ActionReview, d.Items[0].Action, "review is the default")
	require.Equal(t, schedule.ActionDestroy, d.Items[1].Action)

	j, err := schedule.Parse([]byte(`{"version":"v2","items":[{"id":"A","series":"audit_log","starts":["record"],"retain":"P3Y","authority":"x"},
		{"id":"B","series":"dead_letter_audit","starts":"record","retain":"permanent","authority":"y"}]}`), series)
	require.NoError(t, err, "JSON is a schedule too")
	require.Equal(t, "permanent", j.Items[1].Retain)
}

// TestParseRefusesNamingTheItemAndField: each bad document is refused with
// a problem naming the item (index and code) and the field.
func TestParseRefusesNamingTheItemAndField(t *testing.T) {
	t.Parallel()
	item := func(extra string) string {
		return "version: v\nitems:\n  - id: X\n    series: dead_letter_audit\n    starts: record\n    retain: P1Y\n    authority: a\n" +
			"  - id: CW-1\n" + extra
	}
	full := func(fields string) string { return item(fields) }
	for _, tc := range []struct {
		name, doc   string
		item        int
		field, text string
	}{
		{"unknown series", full("    series: audit_logs\n    starts: record\n    retain: P1Y\n    authority: a\n"), 1, "series", `"audit_logs" is not an archived table`},
		{"missing authority", full("    series: audit_log\n    starts: record\n    retain: P1Y\n"), 1, "authority", "required"},
		{"blank authority", full("    series: audit_log\n    starts: record\n    retain: P1Y\n    authority: \" \"\n"), 1, "authority", "white space"},
		{"bad period", full("    series: audit_log\n    starts: record\n    retain: P10\n    authority: a\n"), 1, "retain", "not an ISO-8601 period"},
		{"a time period", full("    series: audit_log\n    starts: record\n    retain: PT10H\n    authority: a\n"), 1, "retain", "not an ISO-8601 period"},
		{"zero period", full("    series: audit_log\n    starts: record\n    retain: P0Y\n    authority: a\n"), 1, "retain", "no time at all"},
		{"huge period", full("    series: audit_log\n    starts: record\n    retain: P100000Y\n    authority: a\n"), 1, "retain", "more than 1000"},
		{"unknown clock", full("    series: audit_log\n    starts: case.opened\n    retain: P1Y\n    authority: a\n"), 1, "starts", "not a clock"},
		{"no clock", full("    series: audit_log\n    starts: []\n    retain: P1Y\n    authority: a\n"), 1, "starts", "required"},
		{"clock twice", full("    series: audit_log\n    starts: [record, record]\n    retain: P1Y\n    authority: a\n"), 1, "starts", "twice"},
		{"bad action", full("    series: audit_log\n    starts: record\n    retain: P1Y\n    action: shred\n    authority: a\n"), 1, "action", "not"},
		{"destroy permanent", full("    series: audit_log\n    starts: record\n    retain: permanent\n    action: destroy\n    authority: a\n"), 1, "action", "nothing would ever"},
		{"two items for the same rows", "version: v\nitems:\n  - id: A\n    series: dead_letter_audit\n    starts: record\n    retain: P1Y\n    authority: a\n" +
			"  - id: B\n    series: dead_letter_audit\n    starts: record\n    retain: P2Y\n    authority: a\n  - id: C\n    series: audit_log\n    starts: record\n    retain: P2Y\n    authority: a\n", 1, "when", "matches the same rows"},
		{"two items for one classification (spelled apart)", "version: v\nitems:\n  - id: A\n    series: dead_letter_audit\n    starts: record\n    retain: P1Y\n    authority: a\n" +
			"  - id: B\n    series: audit_log\n    starts: record\n    retain: P2Y\n    authority: a\n" +
			"  - id: C\n    series: audit_log\n    when: {classification: Unsubstantiated}\n    starts: record\n    retain: P2Y\n    authority: a\n" +
			"  - id: D\n    series: audit_log\n    when: {classification: unsubstantiated }\n    starts: record\n    retain: P3Y\n    authority: a\n", 3, "when", "matches the same rows"},
		{"a table no item covers", "version: v\nitems:\n  - id: A\n    series: dead_letter_audit\n    starts: record\n    retain: P1Y\n    authority: a\n" +
			"  - id: B\n    series: audit_log\n    when: {classification: x}\n    starts: record\n    retain: P1Y\n    authority: a\n", -1, "items", "no item without when covers audit_log"},
		{"same code twice", "version: v\nitems:\n  - id: A\n    series: dead_letter_audit\n    starts: record\n    retain: P1Y\n    authority: a\n" +
			"  - id: a\n    series: audit_log\n    starts: record\n    retain: P1Y\n    authority: a\n", 1, "id", "same code"},
		{"a dotted key", full("    series: audit_log\n    when.classification: x\n    starts: record\n    retain: P1Y\n    authority: a\n"), -1, "document", "not found"},
		{"a key twice", full("    series: audit_log\n    starts: record\n    retain: P1Y\n    retain: P2Y\n    authority: a\n"), -1, "document", "already defined"},
		{"no version", "items:\n  - id: A\n    series: dead_letter_audit\n    starts: record\n    retain: P1Y\n    authority: a\n  - id: B\n    series: audit_log\n    starts: record\n    retain: P1Y\n    authority: a\n", -1, "version", "required"},
		{"two documents", valid + "---\n" + valid, -1, "document", "one document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := schedule.Parse([]byte(tc.doc), series)
			require.ErrorIs(t, err, schedule.ErrInvalid)
			var inv *schedule.InvalidError
			require.True(t, errors.As(err, &inv))
			found := false
			for _, p := range inv.Problems {
				if p.Item == tc.item && p.Field == tc.field {
					require.Contains(t, p.Message, tc.text)
					found = true
				}
			}
			require.True(t, found, "a problem at item %d field %s: %v", tc.item, tc.field, err)
		})
	}
}

func TestPeriods(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]schedule.Period{
		"P10Y": {Months: 120}, "P18M": {Months: 18}, "P6W": {Days: 42}, "P1Y2M3W4D": {Months: 14, Days: 25}, "permanent": {Permanent: true},
	} {
		got, err := schedule.ParsePeriod(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "P", "10Y", "P1.5Y", "P-1Y", "p1y", "P1Y ", "Permanent", "PT1H", "P1D1Y"} {
		_, err := schedule.ParsePeriod(bad)
		require.Error(t, err, bad)
	}
}

// TestNearerSeries: a version that can make some row due earlier names the
// series; one that only keeps rows longer names none.
func TestNearerSeries(t *testing.T) {
	t.Parallel()
	current, err := schedule.Parse([]byte(valid), series)
	require.NoError(t, err)
	with := func(edit func(d *schedule.Document)) schedule.Document {
		d, err := schedule.Parse([]byte(valid), series)
		require.NoError(t, err)
		edit(&d)
		return d
	}
	for _, tc := range []struct {
		name string
		next schedule.Document
		want []string
	}{
		{"the same", with(func(*schedule.Document) {}), nil},
		{"longer", with(func(d *schedule.Document) { d.Items[0].Retain = "P12Y" }), nil},
		{"permanent", with(func(d *schedule.Document) { d.Items[2].Retain = "permanent" }), nil},
		{"shorter", with(func(d *schedule.Document) { d.Items[0].Retain = "P9Y" }), []string{"audit_log"}},
		{"a clock dropped", with(func(d *schedule.Document) { d.Items[0].Starts = schedule.Starts{schedule.ClockRecord} }), []string{"audit_log"}},
		{"a clock added", with(func(d *schedule.Document) {
			d.Items[1].Starts = schedule.Starts{schedule.ClockCaseClosed, schedule.ClockRecord}
		}), nil},
		{"a classification dropped (its rows fall to the longer item)", with(func(d *schedule.Document) { d.Items = append(d.Items[:1], d.Items[2]) }), nil},
		{"a new classification, shorter", with(func(d *schedule.Document) {
			d.Items = append(d.Items, schedule.Item{ID: "N", Series: "audit_log", When: &schedule.When{Classification: "ruled out"},
				Starts: schedule.Starts{schedule.ClockCaseClosed}, Retain: "P1Y", Action: schedule.ActionReview, Authority: "a"})
		}), []string{"audit_log"}},
		{"days for years", with(func(d *schedule.Document) { d.Items[2].Retain = "P365D" }), []string{"dead_letter_audit"}},
	} {
		require.Equal(t, tc.want, schedule.NearerSeries(current, tc.next), tc.name)
	}
	implicit := schedule.Implicit(series)
	require.Equal(t, []string{"audit_log", "dead_letter_audit"}, schedule.NearerSeries(implicit, current),
		"audit_log had no date (permanent); dead_letter_audit had 365 days, P1Y is counted in months")
}
