package craigctl

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
)

// show prints an answer: the API's JSON with --json, else human.
func (o *options) show(raw json.RawMessage, human func(w io.Writer)) error {
	if o.json {
		_, err := fmt.Fprintf(o.io.Out, "%s\n", raw)
		return err
	}
	tw := tabwriter.NewWriter(o.io.Out, 0, 4, 2, ' ', 0)
	human(tw)
	return tw.Flush()
}

// row writes one tab-separated table row.
func row(w io.Writer, cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = sanitize(fmt.Sprint(c))
	}
	_, _ = fmt.Fprintln(w, strings.Join(s, "\t"))
}

// orDash shows an absent value as "-".
func orDash[T any](p *T) any {
	if p == nil {
		return "-"
	}
	return *p
}

// group is a command that only holds subcommands: without one (or with an
// unknown one) it is a usage error.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErr("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return usageErr("%s needs a subcommand", cmd.CommandPath())
		}}
	c.AddCommand(subs...)
	return c
}

// sanitize makes server text safe to print on a terminal: control and
// format characters (an ESC that starts an escape sequence, a carriage
// return that overwrites a line, a bidi override) are shown escaped, as Go
// quotes them, instead of being interpreted by the terminal.
func sanitize(s string) string {
	if strings.IndexFunc(s, unsafeRune) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unsafeRune(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	return r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError)
}
