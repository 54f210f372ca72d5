package eventsig_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/eventsig"
)

func keyPair(t *testing.T, keyID, source string) (*eventsig.Signer, string) {
	t.Helper()
	priv, line, err := eventsig.GeneratePEM(keyID, source)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "key.pem")
	require.NoError(t, os.WriteFile(path, priv, 0o600))
	s, err := eventsig.LoadSigner(keyID, path)
	require.NoError(t, err)
	return s, line
}

func TestSignAndVerify(t *testing.T) {
	t.Parallel()
	rules, rulesLine := keyPair(t, "rules-2026", "craig-rules")
	sec, secLine := keyPair(t, "security-2026", "craig-security")
	rogue, _ := keyPair(t, "rules-2026", "craig-rules") // the same id, another key
	trust, err := eventsig.ParseTrust(strings.NewReader("# fleet keys\n\n" + rulesLine + "\n" + secLine + "\n"))
	require.NoError(t, err)
	require.Equal(t, 2, trust.Len())
	body := []byte(`{"id":"x","event_type":"rules.evaluations_archived","payload":{}}`)

	h := rules.Headers(body)
	id, err := trust.Verify(body, h, "craig-rules")
	require.NoError(t, err)
	require.Equal(t, "rules-2026", id)

	tests := []struct {
		name    string
		body    []byte
		headers map[string]any
		source  string
		want    error
	}{
		{"unsigned", body, map[string]any{}, "craig-rules", eventsig.ErrUnsigned},
		{"no signature", body, map[string]any{eventsig.HeaderKeyID: "rules-2026"}, "craig-rules", eventsig.ErrUnsigned},
		{"wrong header type", body, map[string]any{eventsig.HeaderKeyID: 7, eventsig.HeaderSignature: h[eventsig.HeaderSignature]}, "craig-rules", eventsig.ErrUnsigned},
		{"body changed", append([]byte(nil), append(body[:len(body)-1], ' ', '}')...), h, "craig-rules", eventsig.ErrBadSignature},
		{"another key under the trusted id", body, rogue.Headers(body), "craig-rules", eventsig.ErrBadSignature},
		{"signature not base64", body, map[string]any{eventsig.HeaderKeyID: "rules-2026", eventsig.HeaderSignature: "%%%"}, "craig-rules", eventsig.ErrBadSignature},
		{"unknown key", body, map[string]any{eventsig.HeaderKeyID: "who", eventsig.HeaderSignature: "AAAA"}, "craig-rules", eventsig.ErrUnknownKey},
		{"trusted key speaking for another source", body, sec.Headers(body), "craig-rules", eventsig.ErrWrongSource},
	}
	for _, tt := range tests {
		_, err := trust.Verify(tt.body, tt.headers, tt.source)
		require.ErrorIs(t, err, tt.want, tt.name)
	}
}

func TestKeyFilesRefused(t *testing.T) {
	t.Parallel()
	_, good := keyPair(t, "k", "craig-rules")
	for name, text := range map[string]string{
		"empty":        "# nothing\n",
		"two fields":   "k craig-rules\n",
		"bad base64":   "k craig-rules !!!\n",
		"short key":    "k craig-rules AAAA\n",
		"duplicate id": good + "\n" + good + "\n",
		"bad id":       strings.Replace(good, "k ", "k/x ", 1) + "\n",
	} {
		_, err := eventsig.ParseTrust(strings.NewReader(text))
		require.ErrorIs(t, err, eventsig.ErrKeyFile, name)
	}
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "x.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("SECRETSECRET"), 0o600))
	_, err := eventsig.LoadSigner("k", notPEM)
	require.ErrorIs(t, err, eventsig.ErrKeyFile)
	require.NotContains(t, err.Error(), "SECRETSECRET", "a key file's content never appears in an error")
	_, err = eventsig.LoadSigner("k", filepath.Join(dir, "missing.pem"))
	require.ErrorIs(t, err, eventsig.ErrKeyFile)
	_, err = eventsig.LoadTrust(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, eventsig.ErrKeyFile)
	_, err = eventsig.NewSigner("", nil)
	require.ErrorIs(t, err, eventsig.ErrKeyFile)
}
