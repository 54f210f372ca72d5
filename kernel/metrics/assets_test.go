package metrics_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/craig/retention/kernel/kerneltest"
	"github.com/craig/retention/kernel/metrics"
)

// The alerting assets shipped under deploy/, relative to this package.
const (
	alertsFile    = "../../deploy/prometheus/retention-alerts.yml"
	dashboardFile = "../../deploy/grafana/retention-dashboard.json"
	operatingFile = "../../docs/operating.md"
	// alertTestsFile holds the promtool unit tests of the alert rules.
	alertTestsFile = "../../deploy/prometheus/retention-alerts.test.yml"
)

// exported returns every metric family the sweep and the watchdogs export,
// by name, with its type. Each vec gets one observation so that it appears
// in Gather; a new field of another kind fails the test until it is handled
// here, so the set can never silently miss an instrument.
func exported(t *testing.T) map[string]dto.MetricType {
	t.Helper()
	reg := prometheus.NewRegistry()
	p, err := metrics.NewPrune(reg)
	require.NoError(t, err)
	inv, err := metrics.NewInvariants(reg)
	require.NoError(t, err)
	ob, err := metrics.NewOutbox(reg)
	require.NoError(t, err)
	ar, err := metrics.NewArchive(reg)
	require.NoError(t, err)
	fl, err := metrics.NewFleet(reg)
	require.NoError(t, err)
	pu, err := metrics.NewPurge(reg)
	require.NoError(t, err)
	ve, err := metrics.NewVerify(reg)
	require.NoError(t, err)
	ad, err := metrics.NewAdmin(reg)
	require.NoError(t, err)
	va, err := metrics.NewVacuum(reg)
	require.NoError(t, err)
	le, err := metrics.NewLedger(reg)
	require.NoError(t, err)
	ce, err := metrics.NewCaseEvents(reg, []string{"case.closed"})
	require.NoError(t, err)
	di, err := metrics.NewDispositions(reg)
	require.NoError(t, err)
	structs := []any{p, inv, ob, ar, fl, pu, ve, ad, va, le, ce, di}
	fields := 0
	for _, st := range structs {
		touchAll(t, st)
		for i := range reflect.TypeOf(st).Elem().NumField() {
			if reflect.TypeOf(st).Elem().Field(i).IsExported() {
				fields++
			}
		}
	}

	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]dto.MetricType{}
	for _, mf := range families {
		out[mf.GetName()] = mf.GetType()
	}
	// Every field of every struct is one family.
	require.Len(t, out, fields)
	return out
}

// touchAll observes one value on every vec field of the struct s points to.
func touchAll(t *testing.T, s any) {
	t.Helper()
	v := reflect.ValueOf(s).Elem()
	for i := range v.NumField() {
		if !v.Type().Field(i).IsExported() {
			continue // bookkeeping of the struct itself, not an instrument
		}
		name := v.Type().Field(i).Name
		switch f := v.Field(i).Interface().(type) {
		case *prometheus.CounterVec:
			withLabels(t, name, func(lv []string) error {
				c, err := f.GetMetricWithLabelValues(lv...)
				if err == nil {
					c.Inc()
				}
				return err
			})
		case *prometheus.GaugeVec:
			withLabels(t, name, func(lv []string) error {
				g, err := f.GetMetricWithLabelValues(lv...)
				if err == nil {
					g.Set(1)
				}
				return err
			})
		case *prometheus.HistogramVec:
			withLabels(t, name, func(lv []string) error {
				h, err := f.GetMetricWithLabelValues(lv...)
				if err == nil {
					h.Observe(1)
				}
				return err
			})
		case prometheus.Gauge: // before Counter: a Gauge is a Counter too
			f.Set(1)
		case prometheus.Counter:
			f.Inc()
		default:
			t.Fatalf("%T.%s is a %T: teach touchAll to observe it", s, name, f)
		}
	}
}

// withLabels calls get with 1, 2, ... label values until the vec accepts
// their number (the test does not need to know each vec's label names).
func withLabels(t *testing.T, field string, get func([]string) error) {
	t.Helper()
	var err error
	for n := 0; n <= 8; n++ { // 0: a vector without labels (a series only once set)
		if err = get(slices.Repeat([]string{"x"}, n)); err == nil {
			return
		}
	}
	t.Fatalf("%s: no label count accepted: %v", field, err)
}

// PromQL's functions and aggregation operators, and Grafana's label_values
// (its variable-query function): identifiers followed by "(".
var promqlFunctions = map[string]bool{}

func init() {
	for _, f := range strings.Fields(`
		abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes clamp clamp_max
		clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year days_in_month deg delta deriv exp
		floor histogram_avg histogram_count histogram_fraction histogram_quantile histogram_stddev histogram_stdvar
		histogram_sum holt_winters double_exponential_smoothing hour idelta increase info irate label_join
		label_replace last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute month pi
		predict_linear present_over_time quantile_over_time rad rate resets round scalar sgn sin sinh sort
		sort_by_label sort_by_label_desc sort_desc sqrt stddev_over_time stdvar_over_time sum_over_time tan tanh
		time timestamp vector year
		sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio
		label_values`) {
		promqlFunctions[f] = true
	}
}

// PromQL keywords that read like identifiers.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true,
}

var (
	stringLiteral = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	labelMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	rangeSelector = regexp.MustCompile(`\[[^\[\]]*\]`)
	// A grouping or matching modifier with its label list: by (a, b), on(a), group_left(c), ...
	labelList = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	// label_values(metric{...}, label): the second argument is a label name.
	labelValues = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)`)
	// label_values(label): all values of a label, no metric.
	labelValuesAll = regexp.MustCompile(`label_values\(\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)`)
	token          = regexp.MustCompile(`\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?|[0-9][0-9a-zA-Z_.]*|[a-zA-Z_:][a-zA-Z0-9_:]*`)
)

// metricNames returns the metric names a PromQL expression (or a Grafana
// variable query) reads, and the unknown functions it calls. Strings, label
// matchers, ranges, durations, numbers, Grafana variables and grouping label
// lists are dropped first; of what remains, an identifier followed by "("
// is a function, a keyword is a keyword, and anything else is a metric name.
func metricNames(expr string) (names, unknownFuncs []string) {
	s := stringLiteral.ReplaceAllString(expr, `""`)
	s = labelMatchers.ReplaceAllString(s, " ")
	s = labelValuesAll.ReplaceAllString(s, "label_values()")
	s = labelValues.ReplaceAllString(s, "label_values($1)")
	s = rangeSelector.ReplaceAllString(s, " ")
	s = labelList.ReplaceAllString(s, " ")
	for _, loc := range token.FindAllStringIndex(s, -1) {
		tok := s[loc[0]:loc[1]]
		switch {
		case tok[0] == '$' || (tok[0] >= '0' && tok[0] <= '9'):
			continue // a Grafana variable, a number or a duration
		case promqlKeywords[tok]: // "or (", "and on" ...
		case strings.HasPrefix(strings.TrimLeft(s[loc[1]:], " \t\n"), "("):
			if !promqlFunctions[tok] {
				unknownFuncs = append(unknownFuncs, tok)
			}
		default:
			names = append(names, tok)
		}
	}
	return names, unknownFuncs
}

// unknownMetrics returns the names that are not exported metrics; a
// histogram's _bucket, _sum and _count series count as the histogram.
func unknownMetrics(names []string, known map[string]dto.MetricType) []string {
	var out []string
	for _, n := range names {
		if _, ok := known[n]; ok {
			continue
		}
		base := n
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suffix)
		}
		if typ, ok := known[base]; ok && base != n && (typ == dto.MetricType_HISTOGRAM || typ == dto.MetricType_SUMMARY) {
			continue
		}
		out = append(out, n)
	}
	return out
}

func TestMetricNameExtraction(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr      string
		want      []string
		wantFuncs []string
	}{
		{`increase(retention_prune_capped_total[2h]) > 0`, []string{"retention_prune_capped_total"}, nil},
		{`retention_invariant_violations`, []string{"retention_invariant_violations"}, nil},
		{`max by (job, invariant) (retention_invariant_violations{job=~"a|b", x!="y{z}"}) > 0`, []string{"retention_invariant_violations"}, nil},
		{
			`histogram_quantile(0.95, sum by (le, table) (rate(retention_prune_duration_seconds_bucket{job=~"$job"}[$__rate_interval])))`,
			[]string{"retention_prune_duration_seconds_bucket"}, nil,
		},
		{
			"a_total offset 1h30m / on (job) group_left (table) b_seconds\n or c unless d and bool_thing",
			[]string{"a_total", "b_seconds", "c", "d", "bool_thing"}, nil,
		},
		{`time() - max by (job, group) (x_timestamp_seconds) > 3 * 3600`, []string{"x_timestamp_seconds"}, nil},
		{`deriv(y[6h:5m]) > 2 * 86400 and y > 1e3`, []string{"y", "y"}, nil},
		{`label_values(event_rows_pruned_total{job=~"$job"}, table)`, []string{"event_rows_pruned_total"}, nil},
		{`label_values(job)`, nil, nil},
		{"a or (b unless on (job) c)", []string{"a", "b", "c"}, nil},
		{`increse(z[1h])`, []string{"z"}, []string{"increse"}},
	}
	for _, tt := range tests {
		names, funcs := metricNames(tt.expr)
		require.Equal(t, tt.want, names, tt.expr)
		require.Equal(t, tt.wantFuncs, funcs, tt.expr)
	}

	// The check itself: a name the code does not export is reported, a
	// histogram's series are not, nor are a counter's made-up _count.
	known := map[string]dto.MetricType{"h_seconds": dto.MetricType_HISTOGRAM, "c_total": dto.MetricType_COUNTER}
	require.Equal(t, []string{"bogus_metric_total", "c_total_count"},
		unknownMetrics([]string{"h_seconds_bucket", "h_seconds_sum", "h_seconds_count", "c_total", "bogus_metric_total", "c_total_count"}, known))
}

// alertRules is the Prometheus rule-file format; unknown keys are refused.
type alertRules struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval,omitempty"`
		Rules    []struct {
			Alert         string            `yaml:"alert,omitempty"`
			Record        string            `yaml:"record,omitempty"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for,omitempty"`
			KeepFiringFor string            `yaml:"keep_firing_for,omitempty"`
			Labels        map[string]string `yaml:"labels,omitempty"`
			Annotations   map[string]string `yaml:"annotations,omitempty"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadAlerts(t *testing.T) alertRules {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var rules alertRules
	require.NoError(t, dec.Decode(&rules), "%s is a well-formed Prometheus rule file", alertsFile)
	return rules
}

// promDuration is Prometheus's duration syntax (1h, 90s, 1h30m, ...).
var promDuration = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)

func TestAlertRules(t *testing.T) {
	t.Parallel()
	rules := loadAlerts(t)
	require.Len(t, rules.Groups, 1)
	g := rules.Groups[0]
	require.Equal(t, "craig-retention", g.Name)

	// Each alert and the metric its expression must read.
	want := map[string][]string{
		"RetentionPruneCapped":        {"retention_prune_capped_total"},
		"RetentionBacklogGrowing":     {"retention_oldest_eligible_age_seconds"},
		"RetentionSweepFailing":       {"retention_prune_failures_total", "retention_sweep_last_success_timestamp_seconds", "retention_prune_lock_skipped_total"},
		"RetentionInvariantViolated":  {"retention_invariant_violations"},
		"RetentionBatchTimeouts":      {"retention_prune_batch_timeouts_total", "retention_prune_batch_reduced_total"},
		"OutboxNotDraining":           {"outbox_oldest_pending_age_seconds", "outbox_publish_failures_total"},
		"OutboxDeadLetters":           {"event_outbox_dead_lettered_total", "event_outbox_dead_letter_rows"},
		"ArchivePassFailing":          {"archive_failures_total", "archive_last_success_timestamp_seconds"},
		"ArchiveVerifyFailed":         {"archive_verify_failures_total"},
		"ArchiveVerifyStale":          {"archive_last_verify_timestamp_seconds"},
		"ArchiveHoldLockDrift":        {"archive_hold_lock_drift"},
		"ArchiveLedgerDivergence":     {"archive_ledger_divergence_total"},
		"ArchiveEventRefused":         {"archive_event_refused_total"},
		"ArchiveDeadLetters":          {"events_dead_lettered_total"},
		"AdminAuthFailures":           {"admin_auth_failures_total"},
		"ArchivePurgeStoreErrors":     {"archive_purge_refused_total"},
		"ArchiveRowsQuarantined":      {"retention_quarantined_total"},
		"ArchiveBacklogGrowing":       {"archive_backlog_oldest_age_seconds"},
		"RetentionSubjectsUnparsed":   {"retention_subject_unparsed_rows"},
		"RetentionVacuumHorizonHeld":  {"retention_vacuum_horizon_held_seconds", "retention_vacuum_horizon_age_xids"},
		"RetentionSlotRetainingWAL":   {"retention_slot_retained_wal_bytes"},
		"RetentionDeadTuplesGrowing":  {"retention_dead_tuples"},
		"RetentionDispositionOverdue": {"retention_disposition_due_oldest_days"},
	}
	seen := map[string]bool{}
	for _, r := range g.Rules {
		require.NotEmpty(t, r.Alert, "only alerting rules: %q", r.Expr)
		require.False(t, seen[r.Alert], "%s defined twice", r.Alert)
		seen[r.Alert] = true
		require.NotEmpty(t, strings.TrimSpace(r.Expr), r.Alert)
		if r.For != "" {
			require.Regexp(t, promDuration, r.For, r.Alert)
		}
		require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], "%s: severity", r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], "%s: summary", r.Alert)
		require.NotEmpty(t, r.Annotations["description"], "%s: description", r.Alert)
		require.Equal(t, "docs/runbook.md#"+strings.ToLower(r.Alert), r.Annotations["runbook_url"],
			"%s: runbook_url is its own section of the runbook (internal/doccheck checks the anchor exists)", r.Alert)
		names, _ := metricNames(r.Expr)
		for _, m := range want[r.Alert] {
			require.Contains(t, names, m, "%s reads %s", r.Alert, m)
		}
		require.Equal(t, strings.Count(r.Expr, "("), strings.Count(r.Expr, ")"), "%s: balanced parentheses", r.Alert)
		require.Equal(t, strings.Count(r.Expr, "["), strings.Count(r.Expr, "]"), "%s: balanced brackets", r.Alert)
	}
	for name := range want {
		require.True(t, seen[name], "alert %s exists", name)
	}
}

// dashboard is the part of a Grafana dashboard JSON the test reads.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // a collapsed row's
	GridPos *struct {
		W, H int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	require.True(t, json.Valid(raw), "%s is valid JSON", dashboardFile)
	var d dashboard
	require.NoError(t, json.Unmarshal(raw, &d))
	return d
}

// queries returns every PromQL expression of the dashboard, by where it is.
func (d dashboard) queries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out[fmt.Sprintf("panel %q target %s", p.Title, tg.RefID)] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			require.NoError(t, json.Unmarshal(v.Query, &s), "variable %s: query is a string or an object", v.Name)
			q.Query = s
		}
		out["variable "+v.Name] = q.Query
	}
	return out
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	require.NotEmpty(t, d.UID)
	require.NotEmpty(t, d.Title)
	require.Positive(t, d.SchemaVersion)
	require.NotEmpty(t, d.Panels)

	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			require.NotEmpty(t, p.Title, "panel %d", p.ID)
			require.NotEmpty(t, p.Type, p.Title)
			require.NotNil(t, p.GridPos, p.Title)
			require.False(t, ids[p.ID], "panel id %d is unique", p.ID)
			ids[p.ID] = true
			if p.Type != "row" {
				require.NotEmpty(t, p.Targets, "%s has a query", p.Title)
			}
			for _, tg := range p.Targets {
				require.NotEmpty(t, tg.RefID, p.Title)
				require.NotEmpty(t, strings.TrimSpace(tg.Expr), p.Title)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)

	// The panels an operator needs, by the metric each must read.
	var all []string
	for _, q := range d.queries(t) {
		names, _ := metricNames(q)
		all = append(all, names...)
	}
	for _, m := range []string{
		"event_rows_pruned_total",                        // rows pruned per table
		"retention_oldest_eligible_age_seconds",          // backlog
		"retention_prune_duration_seconds_bucket",        // p95 duration
		"retention_prune_capped_total",                   // anomalies
		"retention_prune_failures_total",                 //
		"retention_prune_batch_timeouts_total",           //
		"retention_prune_batch_reduced_total",            //
		"retention_prune_lock_skipped_total",             //
		"retention_invariant_violations",                 // watchdogs
		"retention_sweep_last_success_timestamp_seconds", // last success age
	} {
		require.Contains(t, all, m, "the dashboard shows %s", m)
	}
}

// TestAssetsReferenceOnlyExportedMetrics: every metric
// the alert rules and the dashboard read is one the code exports, so a
// renamed or removed instrument breaks this test, not a silent panel or a
// never-firing alert. Every function they call is a real PromQL function.
func TestAssetsReferenceOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	known := exported(t)
	// serve registers the process collector: its start time tells how long a
	// service has been up (the "never completed" alerts).
	known["process_start_time_seconds"] = dto.MetricType_GAUGE

	exprs := map[string]string{}
	for _, r := range loadAlerts(t).Groups[0].Rules {
		exprs["alert "+r.Alert] = r.Expr
	}
	for where, q := range loadDashboard(t).queries(t) {
		exprs["dashboard "+where] = q
	}
	require.NotEmpty(t, exprs)

	referenced := map[string]bool{}
	var problems []string
	for where, expr := range exprs {
		names, funcs := metricNames(expr)
		for _, f := range funcs {
			problems = append(problems, fmt.Sprintf("%s calls unknown function %s(): %s", where, f, expr))
		}
		for _, n := range unknownMetrics(names, known) {
			problems = append(problems, fmt.Sprintf("%s reads %s, which the code does not export: %s", where, n, expr))
		}
		for _, n := range names {
			referenced[n] = true
		}
	}
	sort.Strings(problems)
	require.Empty(t, problems)
	require.NotEmpty(t, referenced)
}

// TestOperatingDocumentsEveryMetric: the Metrics table of
// docs/operating.md names every instrument of the sweep and the watchdogs.
func TestOperatingDocumentsEveryMetric(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(operatingFile)
	require.NoError(t, err)
	for name := range exported(t) {
		require.True(t, strings.Contains(string(doc), "| `"+name+"` |"), "the Metrics table of docs/operating.md documents %s", name)
	}
}

// A reminder that the sweep alerts' windows match the sweep's cadence: sweeps
// run hourly, so no sweep rule may look at less than two cycles of a counter.
// (Archive and API alerts count events as they happen.)
func TestAlertWindowsCoverAnHourlyCycle(t *testing.T) {
	t.Parallel()
	window := regexp.MustCompile(`\[([0-9]+[smhdwy])(?::[^\]]*)?\]`)
	for _, r := range loadAlerts(t).Groups[0].Rules {
		if !strings.HasPrefix(r.Alert, "Retention") {
			continue
		}
		for _, m := range window.FindAllStringSubmatch(r.Expr, -1) {
			d, err := time.ParseDuration(strings.Replace(m[1], "d", "h", 1))
			require.NoError(t, err, m[1])
			if strings.HasSuffix(m[1], "d") {
				d *= 24
			}
			require.GreaterOrEqual(t, d, 2*time.Hour, "%s: window %s spans at least two hourly cycles", r.Alert, m[1])
		}
	}
}

// TestAlertRulesWithPromtool runs retention-alerts.test.yml, as shipped,
// with Prometheus's own promtool: every alert fires on the first event with
// its labels and annotations, stays silent on a healthy series and, where it
// applies, fires for a service that never completes its work.
func TestAlertRulesWithPromtool(t *testing.T) {
	t.Parallel()
	promtool := kerneltest.Promtool(t)
	cases, err := os.ReadFile(alertTestsFile)
	require.NoError(t, err)
	// Every alert has a case.
	for _, r := range loadAlerts(t).Groups[0].Rules {
		require.Contains(t, string(cases), "alertname: "+r.Alert+"\n", "%s has a promtool case", r.Alert)
	}
	out, err := exec.Command(promtool, "test", "rules", alertTestsFile).CombinedOutput()
	require.NoError(t, err, "promtool test rules:\n%s", out)
	require.Contains(t, string(out), "SUCCESS")
}
