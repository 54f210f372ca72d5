//go:build faults

package faults_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/faults"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/services/rules"
)

// TestBadConfigurations: the real binary, given each of 37 invalid
// configurations (out of bounds, wrong type, wrong format; from the
// environment and from YAML), exits 2 naming the key and its environment
// variable, never shows a secret's value, and changes nothing.
func TestBadConfigurations(t *testing.T) {
	t.Parallel()
	bin := binary(t, "rules")
	w := newRulesWorld(t)
	_, err := w.Pool.Exec(t.Context(), sweepSeed)
	require.NoError(t, err)
	before := w.db.Count(t, `SELECT count(*) FROM event_outbox`)
	tl := newTally("bad_input", "configurations")
	e := func(k, v string) string { return settings.EnvVar(rules.Name, k) + "=" + v }
	cases := []struct {
		name, key string
		env       []string
		yaml      string
	}{
		{"leading zero", "event_outbox_retention_days", []string{e("event_outbox_retention_days", "030")}, ""},
		{"hex", "event_outbox_retention_days", []string{e("event_outbox_retention_days", "0x1e")}, ""},
		{"negative window", "event_outbox_retention_days", []string{e("event_outbox_retention_days", "-1")}, ""},
		{"window past ten years", "event_outbox_retention_days", []string{e("event_outbox_retention_days", "3651")}, ""},
		{"a word", "event_outbox_retention_days", []string{e("event_outbox_retention_days", "thirty")}, ""},
		{"padded", "event_outbox_retention_days", []string{e("event_outbox_retention_days", " 30")}, ""},
		{"a float", "event_outbox_retention_days", []string{e("event_outbox_retention_days", "30.0")}, ""},
		{"empty", "event_outbox_retention_days", []string{e("event_outbox_retention_days", "")}, ""},
		{"inbox not outliving the outbox", "event_inbox_retention_days", []string{e("event_outbox_retention_days", "30"), e("event_inbox_retention_days", "30")}, ""},
		{"replay past the inbox", "replay_max_age_days", []string{e("replay_max_age_days", "31")}, ""},
		{"batch of zero", "prune_batch_size", []string{e("prune_batch_size", "0")}, ""},
		{"batch too large", "prune_batch_size", []string{e("prune_batch_size", "100001")}, ""},
		{"cycle cap too large", "prune_cycle_cap", []string{e("prune_cycle_cap", "10000001")}, ""},
		{"duration without a unit", "prune_statement_timeout", []string{e("prune_statement_timeout", "30000000")}, ""},
		{"lock timeout over an hour", "prune_lock_timeout", []string{e("prune_lock_timeout", "2h")}, ""},
		{"connect timeout under a second", "database_connect_timeout", []string{e("database_connect_timeout", "500ms")}, ""},
		{"public address without a token", "admin_token", []string{e("http_addr", "0.0.0.0:8080")}, ""},
		{"short admin token", "admin_token", []string{e("admin_token", "hunter2hunter2")}, ""},
		{"log level", "log_level", []string{e("log_level", "verbose")}, ""},
		{"broker URL scheme", "amqp_url", []string{e("amqp_url", "http://127.0.0.1:5672/")}, ""},
		{"database URL scheme", "database_url", []string{e("database_url", "mysql://root:pw@127.0.0.1/x")}, ""},
		{"boolean yes", "prune_yield_to_writers", []string{e("prune_yield_to_writers", "yes")}, ""},
		{"boolean 1", "archive.enabled", []string{e("archive.enabled", "1")}, ""},
		{"hot window zero", "archive.hot_window_days", []string{e("archive.hot_window_days", "0")}, ""},
		{"archive batch too large", "archive.batch_size", []string{e("archive.batch_size", "10001")}, ""},
		{"archive object cap too small", "archive.max_batch_bytes", []string{e("archive.max_batch_bytes", "100")}, ""},
		{"store timeout zero", "archive.store.request_timeout", []string{e("archive.store.request_timeout", "0s")}, ""},
		{"db timeout under a second", "archive.db_timeout", []string{e("archive.db_timeout", "500ms")}, ""},
		{"verify interval over a month", "archive.verify_interval_hours", []string{e("archive.verify_interval_hours", "721")}, ""},
		{"approvals of two", "archive.purge.approvals_required", []string{e("archive.purge.approvals_required", "2")}, ""},
		{"retention past a century", "archive.retention.rule_evaluations_days", []string{e("archive.retention.rule_evaluations_days", "36501")}, ""},
		{"an unknown key (a typo)", "CRAIG_RULES__EVENT_OUTBOX_RETENTION", []string{"CRAIG_RULES__EVENT_OUTBOX_RETENTION=30"}, ""},
		{"short HS256 secret", "auth.jwt_hs256_secret", []string{e("auth.jwt_hs256_secret", "tooshortsecret")}, ""},
		{"signing key without its id", "events.signing_key_id", []string{e("events.signing_key_file", "/nonexistent.pem")}, ""},
		{"YAML duplicate key", "prune_batch_size", nil, "prune_batch_size: 100\nprune_batch_size: 200\n"},
		{"YAML second document", "", nil, "prune_batch_size: 100\n---\nprune_batch_size: 200\n"},
		{"YAML mapping for a scalar", "event_outbox_retention_days", nil, "event_outbox_retention_days: {days: 30}\n"},
		{"YAML octal", "archive.hot_window_days", nil, "archive:\n  hot_window_days: 090\n"},
	}
	for _, c := range cases {
		args := []string{"sweep", "--once"}
		if c.yaml != "" {
			path := filepath.Join(t.TempDir(), "rules.yaml")
			require.NoError(t, os.WriteFile(path, []byte(c.yaml), 0o600))
			args = append(args, "--config", path)
		}
		res := runProcess(t, bin, append(w.env(), c.env...), time.Minute, args...)
		tl.Rounds++
		tl.Faults["invalid_configuration"]++
		tl.Checks += 3
		require.Equal(t, 2, res.code, "%s: exit 2 before any work: %s", c.name, res.stderr)
		if c.key != "" {
			want := c.key
			if !strings.HasPrefix(c.key, "CRAIG_") && c.yaml == "" {
				require.Contains(t, res.stderr, settings.EnvVar(rules.Name, c.key), "%s: names the environment variable", c.name)
			}
			require.Contains(t, res.stderr, want, "%s: names the key", c.name)
		}
		for _, secret := range []string{"hunter2hunter2", "tooshortsecret", "root:pw"} {
			require.NotContains(t, res.stderr, secret, "%s: a secret's value is never shown", c.name)
		}
	}
	require.Equal(t, before, w.db.Count(t, `SELECT count(*) FROM event_outbox`), "nothing was swept")
	check(t, w.World, tl, faults.CheckOptions{})
	tl.write(t)
}
