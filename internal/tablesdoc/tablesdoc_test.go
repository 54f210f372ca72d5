package tablesdoc_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/internal/tablesdoc"
)

// TestEveryRegisteredTableIsListed: the rendered document names each table
// of each service's registration once, and the committed docs/tables.md is
// the rendering (go tool mage generate writes it).
func TestEveryRegisteredTableIsListed(t *testing.T) {
	t.Parallel()
	fleet := tablesdoc.Fleet()
	doc := string(tablesdoc.Render(fleet))
	seen := map[string]bool{}
	for _, s := range fleet {
		require.NotEmpty(t, s.Tables, s.Name)
		for _, tbl := range s.Tables {
			if seen[tbl.Table] {
				continue // a transport table, listed once for every service
			}
			seen[tbl.Table] = true
			require.Equal(t, 1, strings.Count(doc, "\n| `"+tbl.Table+"` |"), "%s is listed once", tbl.Table)
		}
	}
	committed, err := os.ReadFile(filepath.Join("..", "..", "docs", "tables.md"))
	require.NoError(t, err)
	require.Equal(t, doc, string(committed), "docs/tables.md is stale: run go tool mage generate")
}
