package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/craig/retention/kernel/prune"
	"github.com/google/uuid"
)

// Format is the manifest's format tag.
const Format = "ndjson/v1"

// Column is one column of an archived table's schema, as information_schema
// reports it.
type Column struct {
	Name             string  `json:"name"`
	DataType         string  `json:"data_type"`
	IsNullable       bool    `json:"is_nullable"`
	CharMaxLen       *int32  `json:"char_max_len"`
	NumericPrecision *int32  `json:"numeric_precision"`
	Default          *string `json:"default"`
}

// Manifest describes one archive object. It is written after the data and is
// the object-completeness marker; the database commit is the prune's truth.
type Manifest struct {
	Format        string    `json:"format"`
	ArchiveID     uuid.UUID `json:"archive_id"`
	Service       string    `json:"service"`
	Table         string    `json:"table"`
	RecordCount   int       `json:"record_count"`
	DataKey       string    `json:"data_key"`
	ManifestKey   string    `json:"manifest_key"`
	DataSHA256    string    `json:"data_sha256"`
	Endpoint      string    `json:"endpoint"`
	Bucket        string    `json:"bucket"`
	FirstRecordID uuid.UUID `json:"first_record_id"`
	LastRecordID  uuid.UUID `json:"last_record_id"`
	FirstRecordAt time.Time `json:"first_record_at"`
	LastRecordAt  time.Time `json:"last_record_at"`
	HotWindowDays int       `json:"hot_window_days"`
	ArchivedAt    time.Time `json:"archived_at"`
	ArchivedBy    string    `json:"archived_by"`
	Columns       []Column  `json:"columns"`
	Fingerprint   string    `json:"fingerprint"`
}

// EncodeNDJSON renders rows as NDJSON: each row's to_jsonb text verbatim
// (never decoded and re-encoded, so numerics round-trip exactly) followed by
// "\n".
func EncodeNDJSON(rows []Row) []byte {
	n := 0
	for _, r := range rows {
		n += len(r.Doc) + 1
	}
	var b bytes.Buffer
	b.Grow(n)
	for _, r := range rows {
		b.WriteString(r.Doc)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// SHA256Hex is the lower-case hex sha256 of data.
func SHA256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Fingerprint is the sha256 over the full column tuples (name, type,
// nullability, lengths, precision, default), in order: any change to any
// attribute of any column changes it.
func Fingerprint(cols []Column) string {
	b, err := json.Marshal(cols)
	if err != nil {
		// Column holds only strings, bools and ints: Marshal cannot fail.
		panic(fmt.Sprintf("archive: fingerprint: %v", err))
	}
	return SHA256Hex(b)
}

// Range computes the manifest's record range: MIN/MAX of the ids and of the
// timestamps, never the first and last positions (a batch pages by age, and
// under concurrent writers id order can differ from age order).
func Range(rows []Row) (firstID, lastID uuid.UUID, firstAt, lastAt time.Time) {
	for i, r := range rows {
		if i == 0 || bytes.Compare(r.ID[:], firstID[:]) < 0 {
			firstID = r.ID
		}
		if i == 0 || bytes.Compare(r.ID[:], lastID[:]) > 0 {
			lastID = r.ID
		}
		if i == 0 || r.At.Before(firstAt) {
			firstAt = r.At
		}
		if i == 0 || r.At.After(lastAt) {
			lastAt = r.At
		}
	}
	return firstID, lastID, firstAt, lastAt
}

// columnsSQL reads an archived table's column schema. It is the one catalog
// query the kernel builds itself (for any table); the table name is a bound
// parameter.
const columnsSQL = `SELECT column_name::text, data_type::text, is_nullable = 'YES',
       character_maximum_length::int, numeric_precision::int, column_default::text
FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = $1
ORDER BY ordinal_position`

// TableColumns returns the column schema of table in the current schema.
func TableColumns(ctx context.Context, db prune.DB, table string) ([]Column, error) {
	rows, err := db.Query(ctx, columnsSQL, table)
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	defer rows.Close()
	var cols []Column
	for rows.Next() {
		var c Column
		if err := rows.Scan(&c.Name, &c.DataType, &c.IsNullable, &c.CharMaxLen, &c.NumericPrecision, &c.Default); err != nil {
			return nil, fmt.Errorf("columns of %s: %w", table, err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("columns of %s: table not found in the current schema", table)
	}
	return cols, nil
}
