package subject_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/craig/retention/kernel/subject"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	t.Parallel()
	good := []struct{ in, want string }{
		{"case:17", "case:17"},
		{"CASE:17", "case:17"},
		{"Case:017", "case:17"},
		{"case:0", "case:0"},
		{"case:000", "case:0"},
		{"person:42", "person:42"},
		{"person:" + strings.Repeat("9", subject.MaxDigits), "person:" + strings.Repeat("9", subject.MaxDigits)},
		{"case:" + strings.Repeat("0", 40) + "17", "case:17"}, // as the database's retention_subject reads it
	}
	for _, c := range good {
		s, err := subject.Parse(c.in)
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, s.String(), c.in)
		require.True(t, subject.IsCanonical(c.want))
	}
	bad := []string{
		"", "case", "case:", ":17", "case17", "case-17", "case: 17", " case:17", "case:17 ", "case:+17", "case:-17",
		"case:1.5", "case:1e3", "case:١٧", "case:１７", "household:17", "case:17:1", "cаse:17", // Cyrillic а
		"case:" + strings.Repeat("1", subject.MaxDigits+1), "case:\x0017",
	}
	for _, in := range bad {
		_, err := subject.Parse(in)
		require.ErrorIs(t, err, subject.ErrInvalid, "%q", in)
		if len(in) > 6 {
			require.NotContains(t, err.Error(), in[5:], "the error repeats the input")
		}
	}
	require.False(t, subject.IsCanonical("case:017"))
	require.False(t, subject.IsCanonical("CASE:17"))
}

func TestKeyHashAndSecrecy(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdef-secret")
	k, err := subject.NewKey(secret)
	require.NoError(t, err)
	other, err := subject.NewKey([]byte("another key of at least thirty-two bytes"))
	require.NoError(t, err)
	a, _ := subject.Parse("case:17")
	a2, _ := subject.Parse("CASE:0017")
	b, _ := subject.Parse("case:171")
	p, _ := subject.Parse("person:17")
	require.Len(t, k.Hash(a), subject.HashSize)
	require.Equal(t, k.Hash(a), k.Hash(a2), "two spellings of one case hash alike")
	require.NotEqual(t, k.Hash(a), k.Hash(b))
	require.NotEqual(t, k.Hash(a), k.Hash(p), "case:17 and person:17 are different subjects")
	require.NotEqual(t, k.Hash(a), other.Hash(a), "the hash is keyed")
	require.Equal(t, [][]byte{k.Hash(a), k.Hash(b), k.Hash(p), k.Hash(a)}, k.HashAll([]subject.Subject{a, b, p, a2}), "HashAll is Hash of each, in order")
	require.Empty(t, k.HashAll(nil))

	for _, out := range []string{fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s", k, k, k, k)} {
		require.NotContains(t, out, "secret")
		require.NotContains(t, out, "0123456789")
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", slog.Any("key", k))
	require.NotContains(t, buf.String(), "0123456789")

	_, err = subject.NewKey([]byte("short"))
	require.ErrorIs(t, err, subject.ErrKey)
	require.False(t, subject.Key{}.Valid())

	h, err := subject.ParseHex(subject.Hex(k.Hash(a)))
	require.NoError(t, err)
	require.Equal(t, k.Hash(a), h)
	for _, in := range []string{"", "zz", subject.Hex(k.Hash(a))[:10]} {
		_, err := subject.ParseHex(in)
		require.ErrorIs(t, err, subject.ErrInvalid)
	}
}

func TestLoadKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "subject.key")
	content := "k3y-material-that-is-long-enough-to-be-used\n"
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	k, err := subject.LoadKey(path)
	require.NoError(t, err)
	direct, _ := subject.NewKey([]byte(strings.TrimSpace(content)))
	s, _ := subject.Parse("case:1")
	require.Equal(t, direct.Hash(s), k.Hash(s), "the trailing newline is not key material")

	short := filepath.Join(dir, "short.key")
	require.NoError(t, os.WriteFile(short, []byte("tiny-secret\n"), 0o600))
	_, err = subject.LoadKey(short)
	require.ErrorIs(t, err, subject.ErrKey)
	require.Contains(t, err.Error(), short)
	require.NotContains(t, err.Error(), "tiny-secret")
	_, err = subject.LoadKey(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, subject.ErrKey)
	_, err = subject.LoadKey(dir)
	require.ErrorIs(t, err, subject.ErrKey, "a directory")
	_, err = subject.LoadKey("/dev/zero")
	require.ErrorIs(t, err, subject.ErrKey, "a device is never read")
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"case:17", "person:0042", "CASE:1", "case:", "x:1", "case:١"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := subject.Parse(in)
		if err != nil {
			return
		}
		again, err := subject.Parse(s.String())
		if err != nil || again != s || !subject.IsCanonical(s.String()) {
			t.Fatalf("%q parsed to %q, which does not parse back to itself", in, s)
		}
	})
}
