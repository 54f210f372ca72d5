// Package archive is the archive-then-prune engine (ADR-058): rows of an audit-class table older than the hot window are
// written to the object store as NDJSON plus a manifest with no-overwrite
// puts, and only then deleted by id in ONE transaction that also writes the
// service's ledger row.
//
// The order is the safety argument: a row is deleted only after its bytes
// are durably in the store under a name no one can overwrite, and the delete
// and the ledger row commit together or not at all. A crash between the puts
// and the commit leaves orphan objects and every row in place; the next pass
// re-archives those rows under a new archive id.
//
// Archived tables must be insert-only: the engine archives the version
// it selected and deletes by id, so an UPDATE in between would be lost.
package archive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/craig/retention/kernel/prune"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Row is one selected row: its id, its age-column timestamp and its to_jsonb
// text exactly as PostgreSQL rendered it.
type Row struct {
	ID uuid.UUID
	// At is the age column clamped into years 1..9999 (what manifests and
	// ledgers record: JSON cannot carry infinity or a BC date; the row's
	// document keeps the exact value).
	At time.Time
	// Key is the age column as the database's text ('-infinity', BC dates
	// included): the exact cursor position. Empty means At is exact.
	Key string
	// Doc is the row's to_jsonb text; empty when Withheld.
	Doc string
	// Size is the row's NDJSON line in bytes (Doc plus the newline); 0
	// means len(Doc)+1.
	Size int64
	// Withheld is true when the selection stopped at MaxBytes before this
	// row: it would cross the cap, so its document was not sent (Size
	// says how big it is; above MaxBytes alone it is quarantined).
	Withheld bool
}

// lineBytes is the row's NDJSON line length.
func (r Row) lineBytes() int64 {
	if r.Size > 0 {
		return r.Size
	}
	return int64(len(r.Doc)) + 1
}

// Cursor is the (age, id) keyset position after which a selection continues.
type Cursor struct {
	// At is the position's age, clamped like Row.At.
	At time.Time
	// Key is the exact position as the database's text of the age column
	// ('-infinity' for Start); a selection compares against Key::timestamptz.
	Key string
	ID  uuid.UUID
}

// Start is the cursor before every row: '-infinity' and the nil uuid, so a
// row dated -infinity (or BC) is selected like any other.
var Start = Cursor{At: time.Unix(-62135596800, 0).UTC(), Key: "-infinity"}

// SelectParams are the bound parameters of a batch selection.
type SelectParams struct {
	HotWindowDays int32
	After         Cursor
	Limit         int32
	// MaxBytes is max_batch_bytes: the selection returns the documents of
	// rows whose NDJSON fits within it, in order, and the first row that
	// does not fit as Withheld (no document), so the engine never holds
	// more than MaxBytes of one batch's documents.
	MaxBytes int64
}

// SelectFunc is a table's sqlc-generated batch select: up to Limit rows
// older than the hot window by the database clock, after the cursor, ordered
// by (age, id), cut at MaxBytes (see SelectParams).
type SelectFunc func(ctx context.Context, db prune.DB, p SelectParams) ([]Row, error)

// DeleteFunc is a table's sqlc-generated delete-by-ids; it re-checks the
// hot-window predicate and returns the rows it deleted.
type DeleteFunc func(ctx context.Context, tx pgx.Tx, hotWindowDays int32, ids []uuid.UUID) (int64, error)

// TableSpec is one archived table.
type TableSpec struct {
	// Table is the table name (also the metric label and key segment).
	Table string
	// AgeColumn is the timestamp the hot window applies to.
	AgeColumn string
	// Select is the batch selection.
	Select SelectFunc
	// Delete is the delete-by-ids.
	Delete DeleteFunc
	// HotWindowDays is this table's own hot window (its settings key
	// archive.hot_window.<table>_days defaults to it); 0: the service's
	// archive.hot_window_days.
	HotWindowDays int
	// RetentionDays is the default of the table's retention schedule
	// (archive.retention.<table>_days): days after an archive's newest
	// record that it becomes purgeable; 0: no date, never purgeable until
	// the records officer sets one (the default a records schedule needs).
	RetentionDays int
	// Subjects are what the table's rows are about (cases, people): each
	// archive is indexed by them in its own transaction, and the subject
	// API and holds find the table's rows, hot and archived, through them.
	// None: the table is about no subject.
	Subjects []Subject
}

// hotWindow is the hot window a table is archived by: its own, else the
// engine's.
func (s TableSpec) hotWindow(engineDays int) int {
	if s.HotWindowDays > 0 {
		return s.HotWindowDays
	}
	return engineDays
}

// BookkeepFunc records an archive inside the delete's transaction (the
// service's ledger row, its event). An error rolls the delete back.
type BookkeepFunc func(ctx context.Context, tx pgx.Tx, m Manifest, archivedBy string) error

// SystemActor attributes scheduled passes.
const SystemActor = "system:retention"

// Error kinds a pass reports. Match them with errors.Is.
var (
	// ErrAlreadyRunning: another pass holds the archive lease.
	ErrAlreadyRunning = errors.New("archive: a pass is already running")
	// ErrStore: the object store failed; nothing was deleted.
	ErrStore = errors.New("archive: object store")
	// ErrDB: the database failed or disagreed (rows affected ≠ selected).
	ErrDB = errors.New("archive: database")
	// ErrBookkeep: the service's bookkeeping failed; the delete rolled back.
	ErrBookkeep = errors.New("archive: bookkeeping")
	// ErrConfig: the engine or a table spec is misconfigured.
	ErrConfig = errors.New("archive: configuration")
	// ErrDisabled: the archiver is not enabled (consent).
	ErrDisabled = errors.New("archive: disabled")
)

// Error is a failure of one table in a pass.
type Error struct {
	Kind  error // one of the Err* kinds above
	Table string
	Err   error
}

func (e *Error) Error() string {
	if e.Table == "" {
		return fmt.Sprintf("%v: %v", e.Kind, e.Err)
	}
	return fmt.Sprintf("%v: table %s: %v", e.Kind, e.Table, e.Err)
}

// Unwrap exposes both the kind and the cause to errors.Is/As.
func (e *Error) Unwrap() []error { return []error{e.Kind, e.Err} }

func fail(kind error, table string, err error) error {
	return &Error{Kind: kind, Table: table, Err: err}
}
