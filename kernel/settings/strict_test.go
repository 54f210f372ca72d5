package settings_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/settings"
)

// TestIntegersAreDecimal: an integer is plain
// base-10 digits from the environment AND from YAML. Before the fix 030
// loaded as octal 24 (and deleted 25-day-old rows inside the replay window),
// and 0o30, 0x10 and 1_0 loaded too.
func TestIntegersAreDecimal(t *testing.T) {
	t.Parallel()

	refused := []string{"030", "0030", "+030", "-030", "0o30", "0x1e", "0X1E", "0b11110", "1_0", "30.0", "3e1", "30d", " 30", "30 ", "0x", "++30", "٣٠"}
	accepted := map[string]int{"30": 30, "+30": 30, "0": 0, "3650": 3650}

	for _, v := range refused {
		t.Run("Env/"+v, func(t *testing.T) {
			t.Parallel()
			cfg, err := load(t, "", envOutbox+"="+v, envInbox+"=0")
			require.ErrorIs(t, err, settings.ErrInvalid, "%q loaded as %d", v, cfg.EventOutboxRetentionDays)
			require.ErrorContains(t, err, "event_outbox_retention_days=")
			require.ErrorContains(t, err, "(env "+envOutbox+")")
		})
		if strings.TrimSpace(v) != v {
			continue // YAML itself strips the spaces around a plain scalar
		}
		t.Run("YAML/"+v, func(t *testing.T) {
			t.Parallel()
			path := writeYAML(t, "event_inbox_retention_days: 0\nevent_outbox_retention_days: "+v+"\n")
			cfg, err := load(t, path)
			require.ErrorIs(t, err, settings.ErrInvalid, "%q loaded as %d", v, cfg.EventOutboxRetentionDays)
			require.ErrorContains(t, err, "(env "+envOutbox+")")
		})
	}
	for v, want := range accepted {
		t.Run("Accepted/"+v, func(t *testing.T) {
			t.Parallel()
			cfg, err := load(t, "", envOutbox+"="+v, envInbox+"=0")
			require.NoError(t, err)
			require.Equal(t, want, cfg.EventOutboxRetentionDays)
			path := writeYAML(t, "event_inbox_retention_days: 0\nevent_outbox_retention_days: "+v+"\n")
			cfg, err = load(t, path)
			require.NoError(t, err)
			require.Equal(t, want, cfg.EventOutboxRetentionDays)
		})
	}
	t.Run("LeadingZeroSaysWhy", func(t *testing.T) {
		t.Parallel()
		_, err := load(t, "", envOutbox+"=030")
		require.ErrorContains(t, err, "event_outbox_retention_days=030")
		require.ErrorContains(t, err, "leading zero")
	})
	t.Run("QuotedYAMLNumberIsTheSameText", func(t *testing.T) {
		t.Parallel()
		path := writeYAML(t, "event_outbox_retention_days: \"30\"\n")
		cfg, err := load(t, path)
		require.NoError(t, err)
		require.Equal(t, 30, cfg.EventOutboxRetentionDays)
	})
	t.Run("OutOfRangeForTheType", func(t *testing.T) {
		t.Parallel()
		_, err := load(t, "", envOutbox+"=99999999999999999999")
		require.ErrorIs(t, err, settings.ErrInvalid)
		require.ErrorContains(t, err, "out of range")
	})
}

// TestStrictBooleansAndDurations: a boolean is true or
// false (prune_yield_to_writers: 2 loaded as true), and a duration needs a
// unit (a bare YAML 30000000 loaded as 30 ms).
func TestStrictBooleansAndDurations(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name, yaml, env string
		ok              bool
	}{
		{name: "BoolTwo", yaml: "prune_yield_to_writers: 2", env: "CRAIG_EXCHANGE__PRUNE_YIELD_TO_WRITERS=2"},
		{name: "BoolOne", yaml: "prune_yield_to_writers: 1", env: "CRAIG_EXCHANGE__PRUNE_YIELD_TO_WRITERS=1"},
		{name: "BoolYes", yaml: "prune_yield_to_writers: yes", env: "CRAIG_EXCHANGE__PRUNE_YIELD_TO_WRITERS=yes"},
		{name: "BoolEmpty", yaml: "prune_yield_to_writers:", env: "CRAIG_EXCHANGE__PRUNE_YIELD_TO_WRITERS="},
		{name: "BoolFalse", yaml: "prune_yield_to_writers: false", env: "CRAIG_EXCHANGE__PRUNE_YIELD_TO_WRITERS=FALSE", ok: true},
		{name: "DurationBare", yaml: "prune_statement_timeout: 30000000", env: "CRAIG_EXCHANGE__PRUNE_STATEMENT_TIMEOUT=30000000"},
		{name: "DurationBareZero", yaml: "prune_statement_timeout: 0", env: "CRAIG_EXCHANGE__PRUNE_STATEMENT_TIMEOUT=0"},
		{name: "DurationUnit", yaml: "prune_statement_timeout: 45s", env: "CRAIG_EXCHANGE__PRUNE_STATEMENT_TIMEOUT=45s", ok: true},
		{name: "DurationCompound", yaml: "prune_statement_timeout: 1m30s", env: "CRAIG_EXCHANGE__PRUNE_STATEMENT_TIMEOUT=1m30s", ok: true},
	}
	for _, tt := range tests {
		for _, src := range []string{"env", "yaml"} {
			t.Run(tt.name+"/"+src, func(t *testing.T) {
				t.Parallel()
				var err error
				if src == "env" {
					_, err = load(t, "", tt.env)
				} else {
					_, err = load(t, writeYAML(t, tt.yaml+"\n"))
				}
				if tt.ok {
					require.NoError(t, err)
					return
				}
				require.ErrorIs(t, err, settings.ErrInvalid)
				key, _, _ := strings.Cut(tt.yaml, ":")
				require.ErrorContains(t, err, key)
			})
		}
	}
	t.Run("DurationValue", func(t *testing.T) {
		t.Parallel()
		cfg, err := load(t, writeYAML(t, "prune_statement_timeout: 1m30s\n"))
		require.NoError(t, err)
		require.Equal(t, 90*time.Second, cfg.PruneStatementTimeout)
	})
}

// TestYAMLDocumentShape: the later documents
// of a multi-document file were ignored silently.
func TestYAMLDocumentShape(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name, body, wantErr string
	}{
		{"SecondDocument", "event_outbox_retention_days: 30\n---\nevent_outbox_retention_days: 5\n", "more than one document"},
		{"DuplicateKey", "event_outbox_retention_days: 30\nevent_outbox_retention_days: 5\n", "set twice"},
		{"NotAMapping", "- 1\n- 2\n", "mapping"},
		{"ListForAScalar", "event_outbox_retention_days: [30]\n", "single value"},
		// FuzzLoad (CI, 2026-12-02): an alias naming its own container sent
		// the walk round the cycle until the stack overflowed; nested aliases
		// expand exponentially. Both are refused before any walk.
		{"SelfAlias", "a: &a [*a]\n", "aliases"},
		{"SelfAliasInMapping", "a: &a {b: *a}\n", "aliases"},
		{"AliasedValue", "x: &d 30\nevent_outbox_retention_days: *d\n", "aliases"},
		{"AliasedKey", "x: &k event_outbox_retention_days\n*k : 30\n", "aliases"},
		{"ExpandingAliases", "a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n", "aliases"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := load(t, writeYAML(t, tt.body))
			require.Error(t, err)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
	t.Run("EmptyFileSetsNothing", func(t *testing.T) {
		t.Parallel()
		cfg, err := load(t, writeYAML(t, ""))
		require.NoError(t, err)
		require.Equal(t, settings.DefaultOutboxRetentionDays, cfg.EventOutboxRetentionDays)
	})
	t.Run("SingleDocumentWithMarker", func(t *testing.T) {
		t.Parallel()
		cfg, err := load(t, writeYAML(t, "---\nevent_outbox_retention_days: 20\n"))
		require.NoError(t, err)
		require.Equal(t, 20, cfg.EventOutboxRetentionDays)
	})
}

// TestEveryNumericKeyIsBounded: each numeric key has a lower
// AND an upper bound. Before the fix prune_cycle_cap=9e18 loaded, switching
// off the clock-jump guard.
func TestEveryNumericKeyIsBounded(t *testing.T) {
	t.Parallel()

	tests := []struct {
		key       string
		low, high string // just outside the bounds
		okLow     string // the bounds themselves
		okHigh    string
		extra     []string
	}{
		{key: "prune_cycle_cap", low: "4999", high: "10000001", okLow: "5000", okHigh: "10000000"},
		{key: "prune_batch_size", low: "0", high: "100001", okLow: "1", okHigh: "100000", extra: []string{"CRAIG_EXCHANGE__PRUNE_CYCLE_CAP=10000000"}},
		{key: "event_outbox_retention_days", low: "-1", high: "3651", okLow: "0", okHigh: "3650", extra: []string{envInbox + "=0"}},
		{key: "replay_max_age_days", low: "0", high: "31", okLow: "1", okHigh: "30"},
		{key: "replay_max_rows", low: "0", high: "10000001", okLow: "1", okHigh: "10000000"},
		{key: "plan_check_seqscan_rows", low: "-1", high: "10000000001", okLow: "0", okHigh: "10000000000"},
		{key: "prune_statement_timeout", low: "0s", high: "1h0m1s", okLow: "1ms", okHigh: "1h"},
		{key: "prune_lock_timeout", low: "999us", high: "61m", okLow: "1ms", okHigh: "60m"},
		{key: "database_connect_timeout", low: "999ms", high: "5m1s", okLow: "1s", okHigh: "5m"},
		{key: "prune_max_replica_lag", low: "-1s", high: "1h0m1s", okLow: "0s", okHigh: "1h"},
		{key: "prune_max_wal_bytes_per_second", low: "-1", high: "10737418241", okLow: "0", okHigh: "10737418240"},
		{key: "prune_max_pause", low: "999ms", high: "61m", okLow: "1s", okHigh: "1h"},
		{key: "vacuum_horizon_max_held", low: "-1s", high: "168h0m1s", okLow: "0s", okHigh: "168h"},
		{key: "vacuum_slot_max_retained_wal_bytes", low: "-1", high: "1099511627777", okLow: "0", okHigh: "1099511627776"},
		{key: "vacuum_dead_tuples_max", low: "-1", high: "1000000000001", okLow: "0", okHigh: "1000000000000"},
	}
	for _, tt := range tests {
		env := settings.EnvVar(testService, tt.key)
		t.Run(tt.key, func(t *testing.T) {
			t.Parallel()
			for _, v := range []string{tt.low, tt.high} {
				_, err := load(t, "", append([]string{env + "=" + v}, tt.extra...)...)
				require.ErrorIs(t, err, settings.ErrInvalid, "%s=%s", tt.key, v)
				require.ErrorContains(t, err, tt.key+"=")
				require.ErrorContains(t, err, "(env "+env+")")
			}
			for _, v := range []string{tt.okLow, tt.okHigh} {
				_, err := load(t, "", append([]string{env + "=" + v}, tt.extra...)...)
				require.NoError(t, err, "%s=%s", tt.key, v)
			}
		})
	}
	t.Run("CycleCapNineQuintillion", func(t *testing.T) {
		t.Parallel()
		_, err := load(t, "", "CRAIG_EXCHANGE__PRUNE_CYCLE_CAP=9000000000000000000")
		require.ErrorIs(t, err, settings.ErrInvalid)
		require.ErrorContains(t, err, "prune_cycle_cap=9000000000000000000")
	})
	t.Run("ReplayMaxAgeFollowsTheInboxWindow", func(t *testing.T) {
		t.Parallel()
		_, err := load(t, "", envInbox+"=20", envOutbox+"=10")
		require.ErrorIs(t, err, settings.ErrInvalid, "default replay_max_age_days 30 > inbox 20 - 1")
		require.ErrorContains(t, err, "replay_max_age_days=30")
		require.ErrorContains(t, err, envInbox)
		cfg, err := load(t, "", envInbox+"=20", envOutbox+"=10", envReplayMaxAge+"=19")
		require.NoError(t, err)
		require.Equal(t, 19, cfg.ReplayMaxAgeDays)
		cfg, err = load(t, "", envInbox+"=0", envReplayMaxAge+"=3650")
		require.NoError(t, err, "with the inbox sweep off only 1..3650 applies")
		require.Equal(t, 3650, cfg.ReplayMaxAgeDays)
	})
}

// TestListenAddrAndToken: port 99999 or a service name
// passed validation (and failed later, after touching the database), and a
// one-character or whitespace admin_token was accepted on 0.0.0.0.
func TestListenAddrAndToken(t *testing.T) {
	t.Parallel()

	addrs := map[string]bool{
		"127.0.0.1:99999": false, "127.0.0.1:http": false, "127.0.0.1:-1": false, "127.0.0.1:": false,
		"127.0.0.1:08080": false, "bad_host!:80": false, "127.0.0.1:65535": true, "127.0.0.1:0": true,
		"localhost:8080": true, "[::1]:8080": true,
	}
	for addr, ok := range addrs {
		t.Run("Addr/"+addr, func(t *testing.T) {
			t.Parallel()
			_, err := load(t, "", "CRAIG_EXCHANGE__HTTP_ADDR="+addr)
			if ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, settings.ErrInvalid)
			require.ErrorContains(t, err, "http_addr="+addr)
		})
	}
	tokens := map[string]bool{
		"x": false, " ": false, strings.Repeat(" ", 40): false, strings.Repeat("a", 31): false,
		" " + goodToken: false, goodToken: true,
	}
	for tok, ok := range tokens {
		t.Run(fmt.Sprintf("Token/len%d", len(tok)), func(t *testing.T) {
			t.Parallel()
			_, err := load(t, "", "CRAIG_EXCHANGE__HTTP_ADDR=0.0.0.0:8080", "CRAIG_EXCHANGE__ADMIN_TOKEN="+tok)
			if ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, settings.ErrInvalid)
			require.ErrorContains(t, err, "admin_token")
			if len(strings.TrimSpace(tok)) > 3 {
				require.NotContains(t, err.Error(), tok, "the token is never echoed")
			}
		})
	}
}

// TestNoSecretInErrors: no error names a secret's value.
// Before the fix a misspelled key echoed its value (the token), and URLs in
// key=value form were echoed with their password.
func TestNoSecretInErrors(t *testing.T) {
	t.Parallel()

	const secret = "hunter2-Sup3rS3cret"
	tests := []struct {
		name    string
		environ []string
		yaml    string
	}{
		{name: "MisspelledTokenKey", environ: []string{"CRAIG_EXCHANGE__ADMIN_TOKN=" + secret}},
		{name: "MisspelledNestedURLKey", environ: []string{"CRAIG_EXCHANGE__DATABASE__URL=postgres://u:" + secret + "@db/x"}},
		{name: "MisspelledKeyInYAML", yaml: "admin_tokn: " + secret + "\n"},
		{name: "DSNKeyValueForm", environ: []string{"CRAIG_EXCHANGE__DATABASE_URL=host=db user=u password=" + secret + " dbname=x"}},
		{name: "DSNQuotedPassword", environ: []string{"CRAIG_EXCHANGE__DATABASE_URL=host=db password='" + secret + " x' dbname=x"}},
		{name: "URLWrongScheme", environ: []string{"CRAIG_EXCHANGE__DATABASE_URL=mysql://u:" + secret + "@db/x"}},
		{name: "URLPasswordQuery", environ: []string{"CRAIG_EXCHANGE__DATABASE_URL=mysql://db/x?password=" + secret}},
		{name: "AMQPURLWrongScheme", environ: []string{"CRAIG_EXCHANGE__AMQP_URL=http://guest:" + secret + "@mq/"}},
		{name: "ShortTokenIsTheSecret", environ: []string{"CRAIG_EXCHANGE__ADMIN_TOKEN=" + secret}},
		{name: "TokenAsAMapping", yaml: "admin_token:\n  x: " + secret + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := ""
			if tt.yaml != "" {
				path = writeYAML(t, tt.yaml)
			}
			_, err := load(t, path, tt.environ...)
			require.Error(t, err)
			require.NotContains(t, err.Error(), secret)
			require.NotContains(t, err.Error(), "Sup3r")
		})
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()

	tests := map[string]string{
		"postgres://u:pw@db:5432/x?sslmode=disable":   "postgres://u:xxxxx@db:5432/x?sslmode=disable",
		"postgres://db/x?password=pw&sslmode=disable": "postgres://db/x?password=xxxxx&sslmode=disable",
		"host=db user=u password=pw dbname=x":         "host=db user=u password=xxxxx dbname=x",
		"host=db password='p w' sslpassword=pw2":      "host=db password=xxxxx sslpassword=xxxxx",
		"amqp://guest:guest@127.0.0.1:5672/":          "amqp://guest:xxxxx@127.0.0.1:5672/",
		"postgres://postgres@127.0.0.1:5432/x":        "postgres://postgres@127.0.0.1:5432/x",
		"s3://b?endpoint=http://u:pw@h&region=us":     "s3://b?endpoint=http%3A%2F%2Fu%3Axxxxx%40h&region=us",
		"postgres://u:p%zz@db/x":                      "<unparseable url>",
	}
	for in, want := range tests {
		require.Equal(t, want, settings.Redact(in), in)
	}
}
