package archive_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
)

// TestSubjectKeyFileProblems: a subject key file that is missing, too
// short or not a file is a problem naming the key and saying why (a
// missing file said "at least 32 bytes: <nil>"), never the key's content.
func TestSubjectKeyFileProblems(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(short, []byte("SHORT-SECRET"), 0o600))
	for name, tc := range map[string]struct{ path, want string }{
		"missing":   {filepath.Join(dir, "absent"), "no such file"},
		"too short": {short, "12 bytes, at least 32"},
		"directory": {dir, "not a regular file"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := archive.DefaultSettings()
			s.SubjectKeyFile = tc.path
			var reason string
			for _, p := range s.Problems() {
				if p.Key == "archive.subject_key_file" {
					reason = p.Reason
				}
			}
			require.Contains(t, reason, tc.want)
			require.NotContains(t, reason, "<nil>")
			require.False(t, strings.Contains(reason, "SHORT-SECRET"), "the key's content is never in a message")
		})
	}
}
