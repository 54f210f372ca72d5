package settings_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/settings"
)

// TestHostileOutboxSettingsEnv: every bad value of an outbox.* key fails the
// load naming the key, the value and the environment variable; good values
// load as written.
func TestHostileOutboxSettingsEnv(t *testing.T) {
	t.Parallel()
	const (
		envMax  = "CRAIG_EXCHANGE__OUTBOX__MAX_ATTEMPTS"
		envDL   = "CRAIG_EXCHANGE__OUTBOX__DEAD_LETTER_RETENTION_DAYS"
		envMand = "CRAIG_EXCHANGE__OUTBOX__MANDATORY"
	)
	for _, tc := range []struct{ env, key, value string }{
		{envMax, "outbox.max_attempts", "-1"},
		{envMax, "outbox.max_attempts", "10001"},
		{envMax, "outbox.max_attempts", "abc"},
		{envMax, "outbox.max_attempts", "030"},
		{envMax, "outbox.max_attempts", "0x19"},
		{envMax, "outbox.max_attempts", "2.5"},
		{envMax, "outbox.max_attempts", "99999999999999999999"},
		{envMax, "outbox.max_attempts", "1_0"},
		{envDL, "outbox.dead_letter_retention_days", "-7"},
		{envDL, "outbox.dead_letter_retention_days", "3651"},
		{envDL, "outbox.dead_letter_retention_days", "7d"},
		{envMand, "outbox.mandatory", "yes"},
		{envMand, "outbox.mandatory", "1"},
		{envMand, "outbox.mandatory", "on"},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			t.Parallel()
			_, err := load(t, "", tc.env+"="+tc.value)
			require.ErrorIs(t, err, settings.ErrInvalid)
			require.ErrorContains(t, err, tc.key)
			require.ErrorContains(t, err, tc.value)
			require.ErrorContains(t, err, tc.env)
		})
	}
	for _, tc := range []struct {
		env   []string
		check func(t *testing.T, c settings.Transport)
	}{
		{[]string{envMax + "=0"}, func(t *testing.T, c settings.Transport) { require.Zero(t, c.Outbox.MaxAttempts) }},
		{[]string{envMax + "=10000", envDL + "=3650", envMand + "=TRUE"}, func(t *testing.T, c settings.Transport) {
			require.Equal(t, 10000, c.Outbox.MaxAttempts)
			require.Equal(t, 3650, c.Outbox.DeadLetterRetentionDays)
			require.True(t, c.Outbox.Mandatory)
		}},
		{nil, func(t *testing.T, c settings.Transport) {
			require.Equal(t, 25, c.Outbox.MaxAttempts)
			require.Zero(t, c.Outbox.DeadLetterRetentionDays, "dead letters kept forever by default")
			require.False(t, c.Outbox.Mandatory)
		}},
	} {
		c, err := load(t, "", tc.env...)
		require.NoError(t, err)
		tc.check(t, c)
	}
	// An empty value never silently becomes 0 (max_attempts 0 = retry
	// forever; dead-letter window 0 = keep forever).
	for _, env := range []string{envMax + "=", envDL + "=", envMand + "="} {
		_, err := load(t, "", env)
		require.ErrorIs(t, err, settings.ErrInvalid, env)
	}
}

// TestHostileOutboxSettingsYAML: the same through the file, including the
// YAML spellings that would resolve to something else (octal, hex, yes).
func TestHostileOutboxSettingsYAML(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ body, key, value string }{
		{"outbox:\n  max_attempts: 030\n", "outbox.max_attempts", "030"},
		{"outbox:\n  max_attempts: 0x10\n", "outbox.max_attempts", "0x10"},
		{"outbox:\n  max_attempts: -3\n", "outbox.max_attempts", "-3"},
		{"outbox:\n  max_attempts: ~\n", "outbox.max_attempts", ""},
		{"outbox:\n  dead_letter_retention_days: 4000\n", "outbox.dead_letter_retention_days", "4000"},
		{"outbox:\n  mandatory: yes\n", "outbox.mandatory", "yes"},
		{"outbox:\n  max_attempt: 5\n", "outbox.max_attempt", ""},
		{"outbox: 5\n", "outbox", ""},
		{"outbox:\n  - 5\n", "outbox", ""},
	} {
		t.Run(fmt.Sprintf("%q", tc.body), func(t *testing.T) {
			t.Parallel()
			_, err := load(t, writeYAML(t, tc.body))
			require.Error(t, err)
			require.ErrorContains(t, err, tc.key)
			require.ErrorContains(t, err, tc.value)
		})
	}
	c, err := load(t, writeYAML(t, "outbox:\n  max_attempts: 7\n  dead_letter_retention_days: 90\n  mandatory: true\n"))
	require.NoError(t, err)
	require.Equal(t, settings.Outbox{MaxAttempts: 7, DeadLetterRetentionDays: 90, Mandatory: true}, c.Outbox)
	c, err = load(t, writeYAML(t, "outbox:\n  max_attempts: 7\n"), "CRAIG_EXCHANGE__OUTBOX__MAX_ATTEMPTS=9")
	require.NoError(t, err)
	require.Equal(t, 9, c.Outbox.MaxAttempts, "env beats file")
}
