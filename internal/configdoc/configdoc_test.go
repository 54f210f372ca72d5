package configdoc_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/internal/configdoc"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/services/exchange"
	"github.com/craig/retention/services/financial"
	"github.com/craig/retention/services/rules"
	"github.com/craig/retention/services/security"
)

// fleet is the reference's services, as the mage target renders them.
func fleet() []configdoc.Service { return configdoc.Fleet() }

// TestReferenceNamesEveryKey: every key of every service appears with its
// environment variable (or the shared pattern), a description and no
// secret default; the committed docs/configuration.md is this rendering.
func TestReferenceNamesEveryKey(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	doc, err := configdoc.Render(root, fleet())
	require.NoError(t, err)
	text := string(doc)
	require.Empty(t, settings.Undocumented[rules.Settings](rules.Name, text))
	require.Empty(t, settings.Undocumented[security.Settings](security.Name, text))
	require.Empty(t, settings.Undocumented[exchange.Settings](exchange.Name, text))
	require.Empty(t, settings.Undocumented[financial.Settings](financial.Name, text))
	require.NotContains(t, text, "guest:guest", "URL passwords are redacted")
	require.Contains(t, text, "| `archive.batch_size` | `CRAIG_SECURITY__ARCHIVE__BATCH_SIZE` | integer | 10000 |", "security's own default")
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "| `") {
			require.NotRegexp(t, `\|\s*\|$`, line, "every key has a description")
		}
	}
	committed, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	require.NoError(t, err)
	require.Equal(t, text, string(committed), "docs/configuration.md is stale: run go tool mage docs")
}

// TestUndocumentedFieldFails: a key whose field has no doc comment is an
// error naming it, not a blank cell.
func TestUndocumentedFieldFails(t *testing.T) {
	t.Parallel()
	type bare struct {
		Knob int `koanf:"knob"`
	}
	_, err := configdoc.Render(filepath.Join("..", ".."), []configdoc.Service{{Name: "x", Defaults: bare{}}})
	require.ErrorIs(t, err, configdoc.ErrUndocumented)
	require.ErrorContains(t, err, "bare.Knob (key knob)")
}
