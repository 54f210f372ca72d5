package security_test

import (
	"os"
	"testing"

	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/services/security"
	"github.com/stretchr/testify/require"
)

func TestREADMEDocumentsEveryKey(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	require.Empty(t, settings.Undocumented[security.Settings](security.Name, string(readme)))
}
