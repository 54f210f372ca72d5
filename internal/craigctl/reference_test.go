package craigctl

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReferenceNamesEveryCommandAndFlag(t *testing.T) {
	t.Parallel()
	ref := string(Reference())
	cmds := Commands()
	require.Contains(t, cmds, "craigctl archive fetch")
	for path, flags := range cmds {
		require.Contains(t, ref, "## "+path+"\n", "command %q has no section", path)
		require.NotEmpty(t, flags, "command %q lists no flags (the global ones are inherited)", path)
	}
	require.Contains(t, ref, "`--older-than`")
}

func TestReferenceIsCommitted(t *testing.T) {
	t.Parallel()
	committed, err := os.ReadFile(filepath.Join("..", "..", "docs", "craigctl.md"))
	require.NoError(t, err)
	require.Equal(t, string(Reference()), string(committed),
		"docs/craigctl.md is stale: run `go tool mage generate`")
}
