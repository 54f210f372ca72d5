package e2e_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/services/exchange"
	"github.com/craig/retention/services/financial"
	"github.com/craig/retention/services/rules"
	"github.com/craig/retention/services/security"
)

// TestREADMEDocumentsEveryKey: the README's configuration tables name every
// settings key of every service with its environment variable, so a new key
// cannot ship undocumented. One test for all services.
func TestREADMEDocumentsEveryKey(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	readme := string(b)
	for service, undocumented := range map[string][]string{
		exchange.Name:  settings.Undocumented[exchange.Settings](exchange.Name, readme),
		financial.Name: settings.Undocumented[financial.Settings](financial.Name, readme),
		rules.Name:     settings.Undocumented[rules.Settings](rules.Name, readme),
		security.Name:  settings.Undocumented[security.Settings](security.Name, readme),
	} {
		require.Empty(t, undocumented, "%s: keys missing from the README", service)
	}
}
