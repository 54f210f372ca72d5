package craigctl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/spf13/cobra"
)

// tableName is what a table argument may be.
var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// maxLine bounds one NDJSON line of a range fetch (a row of the largest
// archive batch the engine writes is far below it).
const maxLine = 64 << 20

type fetchFlags struct {
	id, from, to, out string
	// strict fails a range fetch (exit 1, nothing written to --out) that
	// purged archives overlapped: the file would not hold every row.
	strict bool
}

func newFetchCmd(o *options) *cobra.Command {
	var f fetchFlags
	c := &cobra.Command{
		Use:   "fetch TABLE (--id ID | --from T --to T) [--out FILE]",
		Short: "Fetch an archived (or still hot) row by id, or every archived row of [from, to) as NDJSON, each object verified",
		Args:  exactArgs(1, "TABLE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !tableName.MatchString(args[0]) {
				return usageErr("TABLE %q: a table name", args[0])
			}
			switch {
			case f.id != "" && (f.from != "" || f.to != ""):
				return usageErr("--id or --from/--to, not both")
			case f.id != "":
				return o.fetchOne(cmd, args[0], f)
			case f.from != "" && f.to != "":
				return o.fetchRange(cmd, args[0], f)
			default:
				return usageErr("--id ID, or both --from and --to")
			}
		},
	}
	c.Flags().StringVar(&f.id, "id", "", "the row's id")
	c.Flags().StringVar(&f.from, "from", "", "range start (RFC 3339 or a date), inclusive, on the table's age column")
	c.Flags().StringVar(&f.to, "to", "", "range end, exclusive")
	c.Flags().StringVarP(&f.out, "out", "o", "", "write to FILE (written whole or not at all) instead of stdout")
	c.Flags().BoolVar(&f.strict, "strict", false, "a range fetch fails (exit 1) when purged archives overlapped the range: rows are missing")
	return c
}

// fetched is the answer for one row.
type fetched struct {
	Source    string          `json:"source"`
	ArchiveID *string         `json:"archive_id"`
	Row       json.RawMessage `json:"row"`
}

func (o *options) fetchOne(cmd *cobra.Command, table string, f fetchFlags) error {
	id, err := parseUUID("--id", f.id)
	if err != nil {
		return err
	}
	cl, err := o.target()
	if err != nil {
		return err
	}
	var ans fetched
	raw, err := cl.do(cmd.Context(), http.MethodGet, "/admin/archive/rows/"+url.PathEscape(table)+"/"+id.String(), nil, nil, &ans)
	if err != nil {
		return err
	}
	out := raw
	if !o.json {
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, ans.Row, "", "  "); err != nil {
			return fmt.Errorf("the row is not JSON: %w", err)
		}
		out = pretty.Bytes()
		where := "the hot table"
		if ans.ArchiveID != nil {
			where = "archive " + *ans.ArchiveID + " (verified against its ledger sha256)"
		}
		_, _ = fmt.Fprintf(o.io.Err, "%s %s: from %s\n", table, id, where)
	}
	return o.writeOut(f.out, func(w io.Writer) (int, error) {
		_, err := fmt.Fprintf(w, "%s\n", out)
		return 1, err
	})
}

func (o *options) fetchRange(cmd *cobra.Command, table string, f fetchFlags) error {
	from, err := parseTime("from", f.from)
	if err != nil {
		return err
	}
	to, err := parseTime("to", f.to)
	if err != nil {
		return err
	}
	if !from.Before(to) {
		return usageErr("--from must be before --to")
	}
	cl, err := o.target()
	if err != nil {
		return err
	}
	q := url.Values{"from": {from.Format(time.RFC3339Nano)}, "to": {to.Format(time.RFC3339Nano)}}
	sp := o.spinner("fetching "+table, "rows")
	var sum *rangeSummary
	err = o.writeOut(f.out, func(w io.Writer) (int, error) {
		var rows int
		err := cl.stream(cmd.Context(), "/admin/archive/rows/"+url.PathEscape(table), q, func(r io.Reader) error {
			var err error
			rows, sum, err = copyRows(w, r, sp)
			return err
		})
		if err == nil && f.strict && !sum.Complete {
			err = fmt.Errorf("--strict: %d purged archive(s) overlapped the range; their rows are gone", len(sum.Purged))
		}
		return rows, err
	})
	sp.done()
	if sum != nil {
		o.reportRange(table, *sum)
	}
	return err
}

// rangeSummary is a range stream's last line (the service's RangeSummary).
type rangeSummary struct {
	ArchivedRows int  `json:"archived_rows"`
	HotRows      int  `json:"hot_rows"`
	Complete     bool `json:"complete"`
	Purged       []struct {
		ArchiveID     string    `json:"archive_id"`
		FirstRecordAt time.Time `json:"first_record_at"`
		LastRecordAt  time.Time `json:"last_record_at"`
		RecordCount   int       `json:"record_count"`
		PurgedAt      time.Time `json:"purged_at"`
	} `json:"purged_archives"`
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	raw  json.RawMessage
}

// reportRange tells (stderr) what a range fetch holds and what it cannot.
func (o *options) reportRange(table string, s rangeSummary) {
	if o.json {
		_, _ = fmt.Fprintf(o.io.Err, "%s\n", s.raw)
		return
	}
	_, _ = fmt.Fprintf(o.io.Err, "%d row(s) of %s in [%s, %s): %d from archives (verified), %d still in the hot table (marked {\"hot\": ...})\n",
		s.ArchivedRows+s.HotRows, table, s.From.UTC().Format(time.RFC3339), s.To.UTC().Format(time.RFC3339), s.ArchivedRows, s.HotRows)
	for _, p := range s.Purged {
		_, _ = fmt.Fprintf(o.io.Err, "MISSING: archive %s (%d record(s), %s .. %s) was purged at %s\n", p.ArchiveID, p.RecordCount,
			p.FirstRecordAt.UTC().Format(time.RFC3339), p.LastRecordAt.UTC().Format(time.RFC3339), p.PurgedAt.UTC().Format(time.RFC3339))
	}
}

// errStreamStopped: the service ended a stream with an error line.
var errStreamStopped = errors.New("the service stopped the stream")

// errStreamCut: the stream ended without its summary line.
var errStreamCut = errors.New("the stream ended without its summary line: it was cut short")

// copyRows copies a range stream's rows (copyStream) and reads its
// summary.
func copyRows(w io.Writer, r io.Reader, sp *progress) (int, *rangeSummary, error) {
	n, raw, err := copyStream(w, r, sp, nil)
	if err != nil {
		return n, nil, err
	}
	sum := &rangeSummary{raw: raw}
	if err := json.Unmarshal(raw, sum); err != nil {
		return n, nil, fmt.Errorf("the stream's summary: %w", err)
	}
	return n, sum, nil
}

// copyStream copies NDJSON rows (each through edit, when given) until the
// service's summary line, whose raw value it returns (the last line; a
// stream without one was cut short), or its error line ({"error": …} or
// {"summary": …} alone, which a row, having an id or a table, never is).
func copyStream(w io.Writer, r io.Reader, sp *progress, edit func([]byte) []byte) (int, json.RawMessage, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	n := 0
	for sc.Scan() {
		line := sc.Bytes()
		var ctl map[string]json.RawMessage
		if json.Unmarshal(line, &ctl) == nil && len(ctl) == 1 {
			if ctl["error"] != nil {
				return n, nil, fmt.Errorf("%w after %d row(s): %s", errStreamStopped, n, sanitize(string(ctl["error"])))
			}
			if raw := ctl["summary"]; raw != nil {
				return n, raw, nil
			}
		}
		if edit != nil {
			line = edit(line)
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return n, nil, err
		}
		n++
		sp.add(1)
	}
	if err := sc.Err(); err != nil {
		return n, nil, err
	}
	return n, nil, fmt.Errorf("%w after %d row(s)", errStreamCut, n)
}

// writeOut runs write on stdout, or on a temporary file renamed to path
// only when it succeeded: a fetch for a hearing is whole or absent.
func (o *options) writeOut(path string, write func(io.Writer) (int, error)) error {
	if path == "" {
		_, err := write(o.io.Out)
		return err
	}
	if _, err := os.Lstat(path); err == nil {
		return usageErr("--out %s exists: name a new file (a fetch never overwrites one)", path)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".craigctl-fetch-*")
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	_, err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("nothing written to %s: %w", path, err)
	}
	// A hard link publishes the file only if the name is still free (a
	// concurrent fetch to the same name loses, it never replaces).
	if err := os.Link(tmp.Name(), path); err != nil {
		return fmt.Errorf("nothing written to %s: %w", path, err)
	}
	return nil
}
