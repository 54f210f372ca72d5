// Package archiveread answers for an archived row after its hot window
// ("cold, not gone", ADR-063): by id, the hot table first, then the local
// ledger's candidate archives (id ranges), whose object is verified against
// the ledger's sha256 before any line of it is served. Every read is
// attributed and announced (<service>.archive_read) for security's audit
// trail.
package archiveread

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/kernel/internal/queries"
	"github.com/craig/retention/kernel/outbox"
	"github.com/craig/retention/kernel/store"
	"github.com/craig/retention/kernel/subject"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sentinels a caller maps to answers.
var (
	ErrUnknownTable = errors.New("archiveread: not an archived table of this service")
	ErrNotFound     = errors.New("archiveread: no such row, hot or archived")
	ErrCorrupt      = errors.New("archiveread: the archive does not match its ledger hash")
)

// PurgedError says the row's archive was purged (the row is gone by the
// retention schedule).
type PurgedError struct {
	ArchiveID uuid.UUID
	PurgedAt  time.Time
}

func (e *PurgedError) Error() string {
	return fmt.Sprintf("archiveread: archive %s was purged at %s", e.ArchiveID, e.PurgedAt.Format(time.RFC3339))
}

// Reader reads one service's archived tables.
type Reader struct {
	pool    *pgxpool.Pool
	store   *store.Store
	service string
	tables  map[string]archive.TableSpec
	now     func() time.Time
	// key hashes subjects (WithSubjectKey); zero: no subject reads.
	key subject.Key
	// orderRef is the court order of a sealed-access read
	// (WithSealedAccess); "" for every other read, which leaves sealed
	// subjects' rows out.
	orderRef string
}

// WithClock returns a copy of the reader whose orphan GC measures ages from
// now (tests; the default is time.Now).
func (r *Reader) WithClock(now func() time.Time) *Reader {
	c := *r
	c.now = now
	return &c
}

// New returns a reader over the service's archived tables.
func New(pool *pgxpool.Pool, st *store.Store, service string, specs []archive.TableSpec) *Reader {
	tables := make(map[string]archive.TableSpec, len(specs))
	for _, s := range specs {
		tables[s.Table] = s
	}
	return &Reader{pool: pool, store: st, service: service, tables: tables, now: time.Now}
}

// Found is a row and where it came from.
type Found struct {
	Source    string          `json:"source"` // "hot" or "archive"
	ArchiveID *uuid.UUID      `json:"archive_id,omitempty"`
	Row       json.RawMessage `json:"row"`
}

// Row returns the row of table with id, for actor: from the hot table, or
// from the one archive (of the ledger's candidates) that holds it after its
// object verified. The read is announced in the same transaction it is
// answered from.
func (r *Reader) Row(ctx context.Context, table string, id uuid.UUID, actor string) (Found, error) {
	spec, ok := r.tables[table]
	if !ok {
		return Found{}, fmt.Errorf("%w: %q", ErrUnknownTable, table)
	}
	var doc string
	// The table name is one of the service's own specs, quoted: never input.
	err := r.pool.QueryRow(ctx, "SELECT to_jsonb(t)::text FROM "+pgx.Identifier{spec.Table}.Sanitize()+" AS t WHERE t.id = $1", id).Scan(&doc)
	var f Found
	switch {
	case err == nil:
		f = Found{Source: "hot", Row: json.RawMessage(doc)}
	case !errors.Is(err, pgx.ErrNoRows):
		return Found{}, fmt.Errorf("read %s %s: %w", table, id, err)
	default:
		if f, err = r.fromArchives(ctx, table, id); err != nil {
			return Found{}, err
		}
	}
	if err := r.hideSealed(ctx, spec, id, f); err != nil {
		return Found{}, err
	}
	return f, r.announce(ctx, table, id, actor, f)
}

// hideSealed answers ErrNotFound for a row of a sealed subject, exactly as
// for a row that does not exist (nothing is announced).
func (r *Reader) hideSealed(ctx context.Context, spec archive.TableSpec, id uuid.UUID, f Found) error {
	set, err := r.sealedSet(ctx, r.pool)
	if err != nil {
		return err
	}
	sealed, err := r.sealedOrds(ctx, r.pool, spec, []string{string(f.Row)}, set)
	if err != nil {
		return err
	}
	if sealed[1] {
		return fmt.Errorf("%w: %s %s", ErrNotFound, spec.Table, id)
	}
	return nil
}

// fromArchives looks for id in the ledger's candidate archives of table.
func (r *Reader) fromArchives(ctx context.Context, table string, id uuid.UUID) (Found, error) {
	cands, err := queries.New(r.pool).ArchiveCandidates(ctx, queries.ArchiveCandidatesParams{TableName: table, RecordID: pgtype.UUID{Bytes: id, Valid: true}})
	if err != nil {
		return Found{}, fmt.Errorf("ledger candidates of %s %s: %w", table, id, err)
	}
	var purged *PurgedError
	for _, c := range cands {
		aid := uuid.UUID(c.ArchiveID.Bytes)
		if c.PurgedAt.Valid {
			purged = &PurgedError{ArchiveID: aid, PurgedAt: c.PurgedAt.Time}
			continue
		}
		data, err := r.readData(ctx, aid, c.DataKey, c.DataSha256)
		if err != nil {
			return Found{}, err
		}
		if line, ok := findLine(data, id); ok {
			return Found{Source: "archive", ArchiveID: &aid, Row: line}, nil
		}
	}
	if purged != nil {
		return Found{}, purged
	}
	return Found{}, fmt.Errorf("%w: %s %s", ErrNotFound, table, id)
}

// findLine returns the NDJSON line whose id is id.
func findLine(data []byte, id uuid.UUID) (json.RawMessage, bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for sc.Scan() {
		if got, err := lineID(sc.Bytes()); err == nil && got == id {
			return append(json.RawMessage(nil), sc.Bytes()...), true
		}
	}
	return nil, false
}

// idPrefix is how to_jsonb renders a row whose shortest key is id (jsonb
// orders keys by length, then bytes): {"id": "<uuid>", ….
var idPrefix = []byte(`{"id": "`)

// lineID is an NDJSON line's id. The archive engine writes to_jsonb text,
// which starts with the id for every table keyed by id, so that prefix is
// read directly (a 1,000-line object is scanned in a fraction of the time a
// decode of every line takes); any other line is decoded. Either way the
// object's sha256 was checked against the ledger first, so a line is what
// the engine wrote.
func lineID(line []byte) (uuid.UUID, error) {
	const n = len(`{"id": "`) + 36
	if bytes.HasPrefix(line, idPrefix) && len(line) > n && line[n] == '"' {
		if id, err := uuid.ParseBytes(line[len(idPrefix):n]); err == nil {
			return id, nil
		}
	}
	var v struct {
		ID *uuid.UUID `json:"id"`
	}
	if err := json.Unmarshal(line, &v); err != nil {
		return uuid.Nil, err
	}
	if v.ID == nil {
		return uuid.Nil, errors.New("no id")
	}
	return *v.ID, nil
}

// announce stages <service>.archive_read: who read which row, from where.
func (r *Reader) announce(ctx context.Context, table string, id uuid.UUID, actor string, f Found) error {
	detail := map[string]any{"actor": actor, "table": table, "id": id, "source": f.Source,
		"archive_ids": []uuid.UUID{}, "at": time.Now().UTC().Format(time.RFC3339Nano)}
	if f.ArchiveID != nil {
		detail["archive_ids"] = []uuid.UUID{*f.ArchiveID}
	}
	return r.stage(ctx, detail)
}

// stage stages <service>.archive_read with detail.
func (r *Reader) stage(ctx context.Context, detail map[string]any) error {
	payload, err := json.Marshal(r.accessDetail(detail))
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		_, err := outbox.Stage(ctx, tx, outbox.Envelope{EventType: r.service + ".archive_read", Payload: payload})
		return err
	})
}

// CorruptError is an archive none of whose stored versions matches its
// ledger hash (or whose data is gone): it wraps ErrCorrupt and names the
// archive, so every answer about it can.
type CorruptError struct {
	ArchiveID uuid.UUID
	Key       string
	Err       error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("archiveread: archive %s (%s): %v", e.ArchiveID, e.Key, e.Err)
}

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// readData returns an archive's data as its ledger hashed it: the current
// version when it matches, else the newest older version that does (an
// overwrite or a delete marker on the current pointer does not make a held
// archive unreadable; verify restores it as current). No matching version
// at all is a *CorruptError naming the archive.
func (r *Reader) readData(ctx context.Context, aid uuid.UUID, key, sha string) ([]byte, error) {
	f, err := r.store.GetMatching(ctx, key, store.SHA256Matches(sha))
	switch {
	case errors.Is(err, store.ErrUnreadable):
		return nil, &UnreadableError{ArchiveID: aid, Key: key, Err: err}
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrNoMatchingVersion):
		return nil, &CorruptError{ArchiveID: aid, Key: key, Err: err}
	case err != nil:
		return nil, fmt.Errorf("archive %s: %w", aid, err)
	}
	return f.Data, nil
}

// ErrUnreadable is wrapped by UnreadableError.
var ErrUnreadable = errors.New("archiveread: the store could not give the archive's bytes whole")

// UnreadableError is an archive the store answered for but whose bytes it
// could not give whole, and no other version of which matches: damaged on
// the store's disk, or a connection cut mid-body (try again; if it stays,
// restore from the bucket's versions or a replica).
type UnreadableError struct {
	ArchiveID uuid.UUID
	Key       string
	Err       error
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("archiveread: archive %s (%s): %v", e.ArchiveID, e.Key, e.Err)
}

// Unwrap makes errors.Is(err, ErrUnreadable) true.
func (e *UnreadableError) Unwrap() []error { return []error{ErrUnreadable, e.Err} }
