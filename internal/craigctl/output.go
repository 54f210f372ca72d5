package craigctl

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

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
		s[i] = fmt.Sprint(c)
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
