package craigctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"

	"github.com/spf13/cobra"

	"github.com/craig/retention/kernel/subject"
)

func newSubjectCmd(o *options) *cobra.Command {
	return group("subject", "Everything about one case or person, across tables, archives and services; court orders (seal, expunge)",
		newSubjectFetchCmd(o), newSubjectSealCmd(o, false), newSubjectSealCmd(o, true), newSubjectExpungeCmd(o), newSubjectApproveExpungeCmd(o),
		newSubjectEventCmd(o))
}

func newSubjectFetchCmd(o *options) *cobra.Command {
	var out, fleetPath string
	c := &cobra.Command{
		Use:   "fetch SUBJECT (--service SVC | --fleet fleet.yaml) [--out FILE]",
		Short: "Fetch every row about a subject (case:17, person:4), hot and archived, each archive verified, as NDJSON",
		Long: `Fetch every row whose declared subject is SUBJECT (case:<digits> or
person:<digits>) from one service (--service) or from every service of a
fleet file (--fleet), hot and archived, each archive verified against its
ledger before any of its rows is sent. Each line is
{"table", "source": "hot"|"archive", "archive_id", "row"} (row verbatim),
with "service" first under --fleet. --out writes the file whole or not at
all. The summary of each service (tables, archives read, rows, purged
archives) goes to stderr. Every read is announced by the service that
answers it, with the subject's keyed hash and the caller.`,
		Args: exactArgs(1, "SUBJECT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := subject.Parse(args[0])
			if err != nil {
				return usageErr("SUBJECT: %w", err)
			}
			if fleetPath != "" && o.service != "" {
				return usageErr("--service or --fleet, not both")
			}
			targets, err := o.subjectTargets(fleetPath)
			if err != nil {
				return err
			}
			return o.fetchSubject(cmd.Context(), s, targets, fleetPath != "", out)
		},
	}
	c.Flags().StringVarP(&out, "out", "o", "", "write to FILE (written whole or not at all) instead of stdout")
	c.Flags().StringVar(&fleetPath, "fleet", "", "fetch from every service of this fleet file: services: [{name, url, token_file?}]")
	return c
}

// subjectTargets are the clients a subject call goes to: --service's, or
// every service of the fleet file.
func (o *options) subjectTargets(fleetPath string) ([]*client, error) {
	if fleetPath == "" {
		cl, err := o.target()
		if err != nil {
			return nil, err
		}
		return []*client{cl}, nil
	}
	ff, err := readFleet(fleetPath)
	if err != nil {
		return nil, err
	}
	return o.fleetClients(ff)
}

// fleetClients are a client per service of a fleet file, each with its own
// token file or the default token.
func (o *options) fleetClients(ff fleetFile) ([]*client, error) {
	out := make([]*client, 0, len(ff.Services))
	for _, s := range ff.Services {
		token, err := o.token()
		if s.TokenFile != "" {
			token, err = readToken(s.TokenFile)
		}
		if err != nil {
			return nil, err
		}
		base, _ := parseBase(s.URL) // checked by readFleet
		cl, err := o.client(s.Name, base, token)
		if err != nil {
			return nil, err
		}
		out = append(out, cl)
	}
	return out, nil
}

// subjectSummary is a subject stream's closing line.
type subjectSummary struct {
	Tables         []string `json:"tables"`
	ArchivesRead   int      `json:"archives_read"`
	Rows           int      `json:"rows"`
	PurgedArchives int      `json:"purged_archives"`
	// Disposed are the executed disposition batches that destroyed rows
	// of the subject on the records schedule (ADR-073).
	Disposed []struct {
		DispositionID string `json:"disposition_id"`
		ExecutedAt    string `json:"executed_at"`
		Item          string `json:"item"`
		Authority     string `json:"authority"`
		Table         string `json:"table"`
		Rows          int64  `json:"rows"`
	} `json:"disposed"`
	raw json.RawMessage
}

// fetchSubject streams the subject's rows of each target into one output
// (named by service with named), then tells each service's summary.
func (o *options) fetchSubject(ctx context.Context, s subject.Subject, targets []*client, named bool, out string) error {
	path := "/admin/subjects/" + url.PathEscape(s.String()) + "/rows"
	sums := map[string]*subjectSummary{}
	skipped := []string{}
	if named { // a fleet: only the services that archive serve subject reads
		var err error
		if targets, skipped, err = archiving(ctx, targets, s.Kind()); err != nil {
			return err
		}
	}
	sp := o.spinner("fetching "+s.String(), "rows")
	err := o.writeOut(out, func(w io.Writer) (int, error) {
		total := 0
		for _, cl := range targets {
			var sum *subjectSummary
			err := cl.stream(ctx, path, nil, func(r io.Reader) error {
				var err error
				var n int
				n, sum, err = copySubjectRows(w, r, cl.service, named, sp)
				total += n
				return err
			})
			if err != nil {
				return total, fmt.Errorf("%s: %w", cl.service, err)
			}
			sums[cl.service] = sum
		}
		return total, nil
	})
	sp.done()
	for _, cl := range targets {
		if sum := sums[cl.service]; sum != nil {
			o.reportSubject(cl.service, s, *sum)
		}
	}
	for _, svc := range skipped {
		_, _ = fmt.Fprintf(o.io.Err, "%s: serves no subject reads (it archives nothing)\n", svc)
	}
	return err
}

// copySubjectRows copies a subject stream's lines (with "service" first
// when named) until its summary line.
func copySubjectRows(w io.Writer, r io.Reader, service string, named bool, sp *progress) (int, *subjectSummary, error) {
	var edit func([]byte) []byte
	if named {
		prefix := []byte(`{"service":` + quote(service) + `,`)
		edit = func(line []byte) []byte {
			if len(line) > 1 && line[0] == '{' {
				return append(append([]byte{}, prefix...), line[1:]...)
			}
			return line
		}
	}
	n, raw, err := copyStream(w, r, sp, edit)
	if err != nil {
		return n, nil, err
	}
	sum := &subjectSummary{raw: raw}
	if err := json.Unmarshal(raw, sum); err != nil {
		return n, nil, fmt.Errorf("the stream's summary: %w", err)
	}
	return n, sum, nil
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// reportSubject tells (stderr) what a service answered for a subject.
func (o *options) reportSubject(service string, s subject.Subject, sum subjectSummary) {
	if o.json {
		_, _ = fmt.Fprintf(o.io.Err, "{\"service\":%s,\"summary\":%s}\n", quote(service), sum.raw)
		return
	}
	_, _ = fmt.Fprintf(o.io.Err, "%s: %d row(s) of %s in %v, %d archive(s) read (verified)\n", service, sum.Rows, s, sum.Tables, sum.ArchivesRead)
	if sum.PurgedArchives > 0 {
		_, _ = fmt.Fprintf(o.io.Err, "%s: MISSING: %d purged archive(s) held %s; their rows are gone\n", service, sum.PurgedArchives, s)
	}
	for _, d := range sum.Disposed {
		_, _ = fmt.Fprintf(o.io.Err, "%s: DISPOSED: %d row(s) of %s of %s destroyed on %s by disposition %s under item %s (%s)\n",
			service, d.Rows, d.Table, s, d.ExecutedAt, d.DispositionID, d.Item, d.Authority)
	}
}

// archiving splits a fleet's clients into the services that archive (their
// /admin/retention has an "archive" section) and the names of those that
// do not (or declare no subject of kind, when kind is not ""). A service
// that cannot be asked fails the call: a 404 from an
// archiving service (its API not served, a wrong URL) must not pass for
// "archives nothing", which would make a partial file look whole.
func archiving(ctx context.Context, cls []*client, kind subject.Kind) ([]*client, []string, error) {
	var out []*client
	var none []string
	for _, cl := range cls {
		var w Windows
		if _, err := cl.do(ctx, http.MethodGet, "/admin/retention", nil, nil, &w); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", cl.service, err)
		}
		undeclared := kind != "" && w.Archive != nil && w.Archive.SubjectKinds != nil && !slices.Contains(w.Archive.SubjectKinds, string(kind))
		if w.Archive == nil || undeclared { // no table there is about such a subject
			none = append(none, cl.service)
			continue
		}
		out = append(out, cl)
	}
	return out, none, nil
}
