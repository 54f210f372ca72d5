package console

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A fleet file naming a token_file is refused, however spelled (the
// console holds no service credentials).
func TestAttackFleetTokenFileVariants(t *testing.T) {
	for name, y := range map[string]string{
		"per service":   "services:\n  - {name: rules, url: \"http://127.0.0.1:1\", token_file: /t}\n",
		"top level":     "token_file: /t\nservices:\n  - {name: rules, url: \"http://127.0.0.1:1\"}\n",
		"merge key":     "base: &b {token_file: /t}\nservices:\n  - {<<: *b, name: rules, url: \"http://127.0.0.1:1\"}\n",
		"merge only":    "services:\n  - {<<: {token_file: /t}, name: rules, url: \"http://127.0.0.1:1\"}\n",
		"second doc":    "services:\n  - {name: rules, url: \"http://127.0.0.1:1\"}\n---\nservices:\n  - {name: rules, url: \"http://127.0.0.1:1\", token_file: /t}\n",
		"flow key case": "services:\n  - {name: rules, url: \"http://127.0.0.1:1\", Token_File: /t}\n",
	} {
		p := filepath.Join(t.TempDir(), "fleet.yaml")
		require.NoError(t, os.WriteFile(p, []byte(y), 0o600))
		_, err := ReadFleet(p)
		if err == nil {
			t.Errorf("%s: a fleet file naming token_file was accepted", name)
		}
	}
}
