package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/archiveread"
	"github.com/craig/retention/kernel/auth"
	"github.com/craig/retention/kernel/settings"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
	"github.com/jackc/pgx/v5/pgxpool"
)

// subjectKeyBindTimeout bounds the key's check against the database at
// boot (one short statement).
const subjectKeyBindTimeout = 30 * time.Second

// subjectKey loads the service's subject key (validated with the settings;
// the zero Key when none is configured) and checks it against the one the
// database's subject index was built with (archive.BindSubjectKey): a
// different key is refused, since every subject hold would then cover
// nothing. It also marks for re-indexing the archives of a table whose
// subject declaration changed (archive.SyncSubjectDeclarations). The error names the key and its environment variable, never the
// key.
func (r *runtime[T]) subjectKey(ctx context.Context, pool *pgxpool.Pool, as archive.Settings) (subject.Key, error) {
	knob := settings.EnvVar(r.spec.Name, "archive.subject_key_file")
	key, err := as.SubjectKey()
	if err != nil {
		return key, fmt.Errorf("archive.subject_key_file (env %s): %w", knob, err)
	}
	bctx, cancel := context.WithTimeout(ctx, subjectKeyBindTimeout)
	defer cancel()
	if err := archive.BindSubjectKey(bctx, pool, key); err != nil {
		return subject.Key{}, fmt.Errorf("archive.subject_key_file (env %s): %w: put the fleet's key back (every subject hold would cover nothing)", knob, err)
	}
	marked, err := archive.SyncSubjectDeclarations(bctx, pool, archiveTables(r.spec, r.cfg))
	if err != nil {
		return subject.Key{}, err
	}
	for table, n := range marked {
		r.logger.WarnContext(ctx, "a table's subjects changed: its archives must be indexed again; subject holds are refused until they are",
			slog.String("table", table), slog.Int64("archives", n), slog.String("run", r.spec.Name+" archive index-subjects"))
	}
	return key, nil
}

// subjectTableNames are the archived tables that declare subjects.
func subjectTableNames(specs []archive.TableSpec) []string {
	out := []string{}
	for _, s := range specs {
		if len(s.Subjects) > 0 {
			out = append(out, s.Table)
		}
	}
	return out
}

// subjectRows streams every row of a subject, hot and archived, in every
// table of the service (archiveread.Reader.Subject). A malformed subject
// is 400; a subject with no rows is an empty stream with its summary.
// Nothing here logs the path: it names the subject in clear.
func (a *ArchiveAPI) subjectRows(w http.ResponseWriter, r *http.Request, p auth.Principal) {
	if a.unreadable(w) {
		return
	}
	s, err := subject.Parse(r.PathValue("subject"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "subject: "+err.Error(), nil)
		return
	}
	if !a.declared(w, s) {
		return
	}
	rd, ok := a.reader(w, r, p)
	if !ok {
		return
	}
	cw := &countingWriter{w: w}
	_, err = rd.Subject(r.Context(), cw, s, p.Subject)
	switch {
	case err == nil:
	case cw.n > 0:
		a.Logger.ErrorContext(r.Context(), "subject read stopped", slog.Any("error", err))
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "internal"})
	case errors.Is(err, archiveread.ErrNoSubjectKey), errors.Is(err, archiveread.ErrOrderRef):
		a.fail(w, r, err)
	case errors.Is(err, archiveread.ErrCorrupt):
		writeJSON(w, http.StatusConflict, corruptBody(err))
	case errors.Is(err, archiveread.ErrUnreadable):
		writeJSON(w, http.StatusBadGateway, unreadableBody(err))
	case errors.Is(err, context.Canceled):
		writeError(w, http.StatusServiceUnavailable, "cancelled", "the request was cancelled", nil)
	default:
		a.Logger.ErrorContext(r.Context(), "subject read failed", slog.Any("error", err))
		writeError(w, http.StatusInternalServerError, "internal", "the call failed; see the service log", nil)
	}
}

// DefaultIndexLimit is the archives one `archive index-subjects` call
// indexes unless told: each is one object read and one short transaction.
const DefaultIndexLimit = 1000

// MaxIndexLimit bounds --limit.
const MaxIndexLimit = 100_000

// indexSubjectsCmd is `<svc> archive index-subjects [--limit N] [--json]`:
// the resumable backfill of the subject index (archives booked before it
// existed or while no key was configured). It needs the store and the key,
// not the archiver's consent: it only reads objects and writes the index.
type indexSubjectsCmd[T any] struct {
	limit  int
	asJSON bool
	actor  string
}

func (c *indexSubjectsCmd[T]) define(fs *flag.FlagSet) {
	fs.IntVar(&c.limit, "limit", DefaultIndexLimit, fmt.Sprintf("most archives this call indexes (1..%d)", MaxIndexLimit))
	fs.BoolVar(&c.asJSON, "json", false, "print the report as one JSON object")
	fs.StringVar(&c.actor, "actor", defaultActor(), "who runs the backfill (recorded on any hold change as cli:<actor>)")
}

func (c *indexSubjectsCmd[T]) check() error {
	if c.limit < 1 || c.limit > MaxIndexLimit || strings.TrimSpace(c.actor) == "" {
		return fmt.Errorf("--limit must be between 1 and %d and --actor non-empty (got %d, %q)", MaxIndexLimit, c.limit, c.actor)
	}
	return nil
}

func (c *indexSubjectsCmd[T]) run(ctx context.Context, rt *runtime[T]) (int, error) {
	as, _ := rt.archiveSettings()
	key, err := as.SubjectKey()
	if err != nil {
		return ExitFail, err
	}
	if !key.Valid() {
		fmt.Fprintf(rt.stderr, "%s archive index-subjects: refused: set archive.subject_key_file (env %s)\n", rt.spec.Name, settings.EnvVar(rt.spec.Name, "archive.subject_key_file"))
		return ExitDisabled, nil
	}
	if as.Store.URL == "" {
		fmt.Fprintf(rt.stderr, "%s archive index-subjects: refused: set archive.store.url (env %s)\n", rt.spec.Name, settings.EnvVar(rt.spec.Name, "archive.store.url"))
		return ExitDisabled, nil
	}
	pool, err := rt.pool(ctx)
	if err != nil {
		return ExitFail, err
	}
	defer pool.Close()
	if key, err = rt.subjectKey(ctx, pool, as); err != nil {
		return ExitFail, err
	}
	bctx, cancel := context.WithTimeout(ctx, archive.BootTimeout)
	st, err := store.Open(bctx, as.Store.URL, store.WithRequestTimeout(as.Store.RequestTimeout))
	cancel()
	if err != nil {
		return ExitFail, fmt.Errorf("open the store (archive.store.url, env %s): %w", settings.EnvVar(rt.spec.Name, "archive.store.url"), err)
	}
	defer func() { _ = st.Close() }()
	reader := archiveread.New(pool, st, rt.spec.Name, archiveTables(rt.spec, rt.cfg)).WithSubjectKey(key)
	rep, changed, err := reader.IndexSubjects(ctx, c.limit, CLIActor(c.actor))
	if len(changed) > 0 {
		rt.logger.InfoContext(ctx, "subject index backfill changed the hold state of archives", slog.Int("archives", len(changed)))
	}
	if err != nil {
		return ExitFail, err
	}
	if rep.Indexed+rep.Purged > 0 {
		rt.logger.InfoContext(ctx, "subject index backfilled", slog.Int("indexed", rep.Indexed), slog.Int("purged_marked", rep.Purged), slog.Bool("more", rep.More))
	}
	return c.report(ctx, rt, rep)
}

// report prints a backfill's outcome: exit 1 when an archive was left
// unindexed.
func (c *indexSubjectsCmd[T]) report(ctx context.Context, rt *runtime[T], rep archiveread.BackfillReport) (int, error) {
	for _, id := range rep.Failed {
		rt.logger.ErrorContext(ctx, "archive left unindexed: its object is unreadable or matches no version of its ledger sha256; restore it and run again",
			slog.String("archive_id", id.String()))
	}
	code := ExitOK
	if len(rep.Failed) > 0 {
		code = ExitFail
	}
	if c.asJSON {
		if err := json.NewEncoder(rt.stdout).Encode(rep); err != nil {
			return ExitFail, err
		}
		return code, nil
	}
	fmt.Fprintf(rt.stdout, "indexed: %d archives (%d purged, marked)\nmore: %v\n", rep.Indexed, rep.Purged, rep.More)
	if len(rep.Failed) > 0 {
		fmt.Fprintf(rt.stdout, "failed: %d archive(s) left unindexed (see the log)\n", len(rep.Failed))
	}
	return code, nil
}
