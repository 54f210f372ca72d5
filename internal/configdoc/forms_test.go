package configdoc_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/services/exchange"
	"github.com/craig/retention/services/financial"
	"github.com/craig/retention/services/rules"
	"github.com/craig/retention/services/security"
)

// TestEveryKeyInBothForms: every key of the
// configuration reference, written in YAML nested (archive: {enabled: ...})
// and dotted (archive.enabled: ...), loads to the same settings or fails with
// the same error; a changed value applies; one key written both ways is
// refused.
func TestEveryKeyInBothForms(t *testing.T) {
	t.Parallel()
	t.Run(exchange.Name, func(t *testing.T) {
		t.Parallel()
		bothForms(t, exchange.Name, exchange.DefaultSettings(), exchange.Spec().DerivedKeys())
	})
	t.Run(financial.Name, func(t *testing.T) {
		t.Parallel()
		bothForms(t, financial.Name, financial.DefaultSettings(), financial.Spec().DerivedKeys())
	})
	t.Run(rules.Name, func(t *testing.T) {
		t.Parallel()
		bothForms(t, rules.Name, rules.DefaultSettings(), rules.Spec().DerivedKeys())
	})
	t.Run(security.Name, func(t *testing.T) {
		t.Parallel()
		bothForms(t, security.Name, security.DefaultSettings(), security.Spec().DerivedKeys())
	})
}

// changed is a value of field f's type other than its default, as YAML text.
func changed(f settings.Field) string {
	switch f.Type {
	case "boolean":
		if f.Default == "true" {
			return "false"
		}
		return "true"
	case "integer":
		n, err := strconv.ParseInt(f.Default, 10, 64)
		if err != nil || n > 1 {
			return strconv.FormatInt(n-1, 10)
		}
		return strconv.FormatInt(n+1, 10)
	case "duration":
		return "1h3m"
	default:
		return "changed-value"
	}
}

// bothForms checks every key of a service, its settings fields' and the
// keys its tables derive (their windows, hot windows and schedules).
func bothForms[T any](t *testing.T, service string, defaults T, derived []settings.Derived) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	load := func(path string) (T, error) {
		return settings.LoadDerived(service, defaults, derived, settings.Source{ConfigPath: path, Environ: []string{}})
	}
	base, err := load(write("empty.yaml", ""))
	require.NoError(t, err)
	applied, nested := 0, 0
	for i, f := range append(settings.Fields(defaults), settings.DerivedFields(derived)...) {
		segs := strings.Split(f.Key, ".")
		if len(segs) == 1 {
			continue
		}
		nested++
		v := changed(f)
		var b strings.Builder
		for d, s := range segs {
			fmt.Fprintf(&b, "%s%s:", strings.Repeat("  ", d), s)
			if d == len(segs)-1 {
				fmt.Fprintf(&b, " %q", v)
			}
			b.WriteString("\n")
		}
		nestedCfg, nestedErr := load(write(fmt.Sprintf("n%d.yaml", i), b.String()))
		dotted := fmt.Sprintf("%s: %q\n", f.Key, v)
		dottedCfg, dottedErr := load(write(fmt.Sprintf("d%d.yaml", i), dotted))
		if nestedErr != nil {
			require.Error(t, dottedErr, "key %s: the nested form failed (%v), the dotted form loaded", f.Key, nestedErr)
			require.Equal(t, nestedErr.Error(), dottedErr.Error(), "key %s", f.Key)
			continue
		}
		require.NoError(t, dottedErr, "key %s", f.Key)
		require.Equal(t, nestedCfg, dottedCfg, "key %s: the dotted form %q does not mean the nested form", f.Key, dotted)
		if !reflect.DeepEqual(nestedCfg, base) {
			applied++
		}
		_, err = load(write(fmt.Sprintf("b%d.yaml", i), b.String()+dotted))
		require.ErrorContains(t, err, "set twice", "key %s written in both forms", f.Key)
	}
	require.Positive(t, nested, "%s has nested keys", service)
	require.Greater(t, applied, nested/2, "%s: most changed values apply (%d of %d)", service, applied, nested)
}
