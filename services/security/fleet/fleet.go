// Package fleet is the validation of the fleet ledger: an
// archive event from any service is checked field by field BEFORE anything
// is written, and a replay of an archive already booked is compared with the
// booked row. Both are pure functions of their inputs (and the clock given),
// so every rule has a table test and a fuzz target.
package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/craig/retention/kernel/archive"
)

// Typed event types: the archive events the fleet ledger books.
const (
	RulesArchived    = "rules.evaluations_archived"
	SecurityArchived = "security.archive_completed"
)

// Bounds of a booked archive.
const (
	// MaxRecordCount is the largest archive an event may describe: the
	// archive engine's largest batch.
	MaxRecordCount = archive.MaxBatchSize
	// MaxHotWindowDays is the longest hot window (ten years), as the
	// archive settings bound it.
	MaxHotWindowDays = archive.MaxHotWindowDays
	// ClockSkew is how far in the future an archived_at may lie: the
	// producer's clock may run ahead of security's.
	ClockSkew = 5 * time.Minute
)

// Source is what the fleet ledger accepts from one producer.
type Source struct {
	// SourceService is the payload's source_service.
	SourceService string
	// Service is the producer's store key segment:
	// retention-archives/<Service>/<table>/….
	Service string
	// Tables is the producer's vocabulary of archived tables: its
	// registered TableSpecs (archive.Producer), never a list typed here.
	Tables []string
}

// Registry is the fleet ledger's vocabulary: for each archive event type,
// the producer it must come from and the tables it may name. It is built
// from the producers' own registrations (security.FleetRegistry), so a
// table a producer adds is accepted without an edit of security.
type Registry struct {
	byEvent map[string]Source
}

// NewRegistry builds the vocabulary of the given producers.
func NewRegistry(producers ...archive.Producer) Registry {
	r := Registry{byEvent: make(map[string]Source, len(producers))}
	for _, p := range producers {
		r.byEvent[p.EventType] = Source{SourceService: p.SourceService, Service: p.Service, Tables: slices.Clone(p.Tables)}
	}
	return r
}

// SourceOf returns the source an archive event type must come from.
func (r Registry) SourceOf(eventType string) (Source, bool) {
	src, ok := r.byEvent[eventType]
	return src, ok
}

// Sources are the source_service of every producer, sorted.
func (r Registry) Sources() []string {
	var out []string
	for _, src := range r.byEvent {
		if !slices.Contains(out, src.SourceService) {
			out = append(out, src.SourceService)
		}
	}
	slices.Sort(out)
	return out
}

// Typed reports whether the fleet ledger books events of this type.
func (r Registry) Typed(eventType string) bool {
	_, ok := r.SourceOf(eventType)
	return ok
}

// Reasons of a refusal: the label values of archive_event_refused_total
// (a fixed set, so a forger cannot grow the metric's cardinality).
const (
	ReasonMalformed     = "malformed"
	ReasonEventType     = "event_type"
	ReasonSource        = "source_service"
	ReasonTable         = "table"
	ReasonArchiveID     = "archive_id"
	ReasonKeyPrefix     = "key_prefix"
	ReasonSHA256        = "data_sha256"
	ReasonRecordCount   = "record_count"
	ReasonRecordRange   = "record_range"
	ReasonTimestamps    = "timestamps"
	ReasonHotWindow     = "hot_window_days"
	ReasonStoreIdentity = "store_identity"
	ReasonArchivedBy    = "archived_by"
	ReasonSignature     = "signature"
	// ReasonStale: a lifecycle event not newer than the last one applied to
	// its archive's fleet row (a replay, a reordering); nothing changed.
	ReasonStale = "stale"
)

// Reasons are every refusal reason: the label values the fleet metric
// exports from boot, at 0.
func Reasons() []string {
	return []string{ReasonMalformed, ReasonEventType, ReasonSource, ReasonTable, ReasonArchiveID, ReasonKeyPrefix,
		ReasonSHA256, ReasonRecordCount, ReasonRecordRange, ReasonTimestamps, ReasonHotWindow, ReasonStoreIdentity,
		ReasonArchivedBy, ReasonSignature, ReasonStale}
}

// ErrRefused is wrapped by every Refusal.
var ErrRefused = errors.New("fleet: archive event refused")

// Refusal is a validation failure: Reason is the metric label, Rule says in
// words which rule the event broke (it names fields, never their secrets:
// events carry none).
type Refusal struct {
	Reason string
	Rule   string
}

func (r *Refusal) Error() string { return fmt.Sprintf("%v (%s): %s", ErrRefused, r.Reason, r.Rule) }

// Unwrap makes errors.Is(err, ErrRefused) hold.
func (r *Refusal) Unwrap() error { return ErrRefused }

func refuse(reason, format string, args ...any) error {
	return &Refusal{Reason: reason, Rule: fmt.Sprintf(format, args...)}
}

// Record is one booked archive: the fleet ledger row's facts.
type Record struct {
	ArchiveID     uuid.UUID
	SourceService string
	Table         string
	DataKey       string
	ManifestKey   string
	DataSHA256    string
	RecordCount   int
	StoreEndpoint string
	StoreBucket   string
	FirstRecordID uuid.UUID
	LastRecordID  uuid.UUID
	FirstRecordAt time.Time
	LastRecordAt  time.Time
	HotWindowDays int
	ArchivedAt    time.Time
	ArchivedBy    string
}

// payload is the wire form of an archive event (archive.ArchivedEvent):
// every field required, nothing else allowed.
type payload struct {
	SourceService *string `json:"source_service"`
	ArchiveID     *string `json:"archive_id"`
	Table         *string `json:"table"`
	DataKey       *string `json:"data_key"`
	ManifestKey   *string `json:"manifest_key"`
	DataSHA256    *string `json:"data_sha256"`
	RecordCount   *int64  `json:"record_count"`
	StoreEndpoint *string `json:"store_endpoint"`
	StoreBucket   *string `json:"store_bucket"`
	FirstRecordID *string `json:"first_record_id"`
	LastRecordID  *string `json:"last_record_id"`
	FirstRecordAt *string `json:"first_record_at"`
	LastRecordAt  *string `json:"last_record_at"`
	HotWindowDays *int64  `json:"hot_window_days"`
	ArchivedAt    *string `json:"archived_at"`
	ArchivedBy    *string `json:"archived_by"`
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Validate checks an archive event of eventType against every rule of the fleet ledger
// at time now and returns the record to book; a *Refusal otherwise. It
// writes nothing and reads nothing but its arguments and the registry.
func (r Registry) Validate(eventType string, body []byte, now time.Time) (Record, error) {
	src, ok := r.SourceOf(eventType)
	if !ok {
		return Record{}, refuse(ReasonEventType, "event type %q is not an archive event the fleet ledger books", eventType)
	}
	p, err := decode(body)
	if err != nil {
		return Record{}, err
	}
	rec, err := p.record()
	if err != nil {
		return Record{}, err
	}
	for _, check := range []func(Source, Record, time.Time) error{checkSource, checkKeys, checkCounts, checkTimes, checkIdentity} {
		if err := check(src, rec, now); err != nil {
			return Record{}, err
		}
	}
	return rec, nil
}

// Parse converts an archive event's payload into its record, checking only
// that it decodes (every field present, ids and times well-formed, counts in
// range): for the archives a service books itself, in-process, whose facts
// need no trust. Inbound events go through Validate.
func Parse(body []byte) (Record, error) {
	p, err := decode(body)
	if err != nil {
		return Record{}, err
	}
	return p.record()
}

// decode parses the payload strictly: one JSON object, known fields only,
// every field present.
func decode(body []byte) (payload, error) {
	var p payload
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return payload{}, refuse(ReasonMalformed, "payload does not decode: %v", err)
	}
	if dec.More() {
		return payload{}, refuse(ReasonMalformed, "payload holds more than one JSON value")
	}
	var missing []string
	for name, present := range map[string]bool{
		"source_service": p.SourceService != nil, "archive_id": p.ArchiveID != nil, "table": p.Table != nil,
		"data_key": p.DataKey != nil, "manifest_key": p.ManifestKey != nil, "data_sha256": p.DataSHA256 != nil,
		"record_count": p.RecordCount != nil, "store_endpoint": p.StoreEndpoint != nil, "store_bucket": p.StoreBucket != nil,
		"first_record_id": p.FirstRecordID != nil, "last_record_id": p.LastRecordID != nil,
		"first_record_at": p.FirstRecordAt != nil, "last_record_at": p.LastRecordAt != nil,
		"hot_window_days": p.HotWindowDays != nil, "archived_at": p.ArchivedAt != nil, "archived_by": p.ArchivedBy != nil,
	} {
		if !present {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return payload{}, refuse(ReasonMalformed, "payload lacks %s", strings.Join(missing, ", "))
	}
	return p, nil
}

// record converts the decoded payload, refusing ids and times that do not
// parse.
func (p payload) record() (Record, error) {
	rec := Record{
		SourceService: *p.SourceService, Table: *p.Table, DataKey: *p.DataKey, ManifestKey: *p.ManifestKey,
		DataSHA256: *p.DataSHA256, StoreEndpoint: *p.StoreEndpoint, StoreBucket: *p.StoreBucket, ArchivedBy: *p.ArchivedBy,
	}
	var err error
	if rec.ArchiveID, err = parseID(*p.ArchiveID); err != nil {
		return Record{}, refuse(ReasonArchiveID, "archive_id: %v", err)
	}
	if rec.FirstRecordID, err = parseID(*p.FirstRecordID); err != nil {
		return Record{}, refuse(ReasonRecordRange, "first_record_id: %v", err)
	}
	if rec.LastRecordID, err = parseID(*p.LastRecordID); err != nil {
		return Record{}, refuse(ReasonRecordRange, "last_record_id: %v", err)
	}
	for _, f := range []struct {
		name string
		raw  string
		dst  *time.Time
	}{{"first_record_at", *p.FirstRecordAt, &rec.FirstRecordAt}, {"last_record_at", *p.LastRecordAt, &rec.LastRecordAt}, {"archived_at", *p.ArchivedAt, &rec.ArchivedAt}} {
		if *f.dst, err = time.Parse(time.RFC3339Nano, f.raw); err != nil {
			return Record{}, refuse(ReasonTimestamps, "%s %q is not an RFC 3339 time", f.name, f.raw)
		}
		// The ledger keeps microseconds (timestamptz): compare what is kept.
		*f.dst = f.dst.Truncate(time.Microsecond)
	}
	if *p.RecordCount < 1 || *p.RecordCount > MaxRecordCount {
		return Record{}, refuse(ReasonRecordCount, "record_count %d outside 1..%d", *p.RecordCount, MaxRecordCount)
	}
	if *p.HotWindowDays < 1 || *p.HotWindowDays > MaxHotWindowDays {
		return Record{}, refuse(ReasonHotWindow, "hot_window_days %d outside 1..%d", *p.HotWindowDays, MaxHotWindowDays)
	}
	rec.RecordCount, rec.HotWindowDays = int(*p.RecordCount), int(*p.HotWindowDays)
	return rec, nil
}

// parseID accepts only the canonical lower-case hyphenated form, so one
// archive has one spelling.
func parseID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, err
	}
	if id.String() != s {
		return uuid.Nil, fmt.Errorf("%q is not in canonical form", s)
	}
	if id == uuid.Nil {
		return uuid.Nil, errors.New("the nil uuid")
	}
	return id, nil
}

func checkSource(src Source, rec Record, _ time.Time) error {
	if rec.SourceService != src.SourceService {
		return refuse(ReasonSource, "source_service %q does not match the event type's service %q", rec.SourceService, src.SourceService)
	}
	if !slices.Contains(src.Tables, rec.Table) {
		return refuse(ReasonTable, "table %q is not in %s's vocabulary %v", rec.Table, src.SourceService, src.Tables)
	}
	return nil
}

// checkKeys: both keys are the store's canonical archive keys of this
// service, table and archive id:
// retention-archives/<service>/<table>/YYYY/MM/DD/<archive_id>.ndjson and
// .manifest.json.
func checkKeys(src Source, rec Record, _ time.Time) error {
	dir := regexp.QuoteMeta("retention-archives/"+src.Service+"/"+rec.Table+"/") + `\d{4}/\d{2}/\d{2}/` + regexp.QuoteMeta(rec.ArchiveID.String())
	for _, k := range []struct{ name, key, suffix string }{{"data_key", rec.DataKey, ".ndjson"}, {"manifest_key", rec.ManifestKey, ".manifest.json"}} {
		if !regexp.MustCompile(`^` + dir + regexp.QuoteMeta(k.suffix) + `$`).MatchString(k.key) {
			return refuse(ReasonKeyPrefix, "%s %q is not retention-archives/%s/%s/YYYY/MM/DD/%s%s", k.name, k.key, src.Service, rec.Table, rec.ArchiveID, k.suffix)
		}
	}
	if !sha256Hex.MatchString(rec.DataSHA256) {
		return refuse(ReasonSHA256, "data_sha256 is not 64 lower-case hex digits")
	}
	return nil
}

func checkCounts(_ Source, rec Record, _ time.Time) error {
	if bytes.Compare(rec.FirstRecordID[:], rec.LastRecordID[:]) > 0 {
		return refuse(ReasonRecordRange, "first_record_id %s is after last_record_id %s", rec.FirstRecordID, rec.LastRecordID)
	}
	return nil
}

func checkTimes(_ Source, rec Record, now time.Time) error {
	switch {
	case rec.FirstRecordAt.After(rec.LastRecordAt):
		return refuse(ReasonTimestamps, "first_record_at is after last_record_at")
	case rec.LastRecordAt.After(rec.ArchivedAt):
		return refuse(ReasonTimestamps, "last_record_at is after archived_at")
	case rec.ArchivedAt.After(now.Add(ClockSkew)):
		return refuse(ReasonTimestamps, "archived_at is more than %s in the future", ClockSkew)
	}
	return nil
}

func checkIdentity(_ Source, rec Record, _ time.Time) error {
	if strings.TrimSpace(rec.StoreEndpoint) == "" || strings.TrimSpace(rec.StoreBucket) == "" {
		return refuse(ReasonStoreIdentity, "store_endpoint and store_bucket must be non-empty")
	}
	if strings.TrimSpace(rec.ArchivedBy) == "" {
		return refuse(ReasonArchivedBy, "archived_by must be non-empty")
	}
	return nil
}

// Divergence lists the fields in which a replayed record differs from the
// booked one (manifest_key included; times compared as instants), in a
// stable order; none means an identical replay.
func Divergence(booked, replay Record) []string {
	var out []string
	add := func(name string, differs bool) {
		if differs {
			out = append(out, name)
		}
	}
	add("source_service", booked.SourceService != replay.SourceService)
	add("table", booked.Table != replay.Table)
	add("data_key", booked.DataKey != replay.DataKey)
	add("manifest_key", booked.ManifestKey != replay.ManifestKey)
	add("data_sha256", booked.DataSHA256 != replay.DataSHA256)
	add("record_count", booked.RecordCount != replay.RecordCount)
	add("store_endpoint", booked.StoreEndpoint != replay.StoreEndpoint)
	add("store_bucket", booked.StoreBucket != replay.StoreBucket)
	add("first_record_id", booked.FirstRecordID != replay.FirstRecordID)
	add("last_record_id", booked.LastRecordID != replay.LastRecordID)
	add("first_record_at", !booked.FirstRecordAt.Equal(replay.FirstRecordAt))
	add("last_record_at", !booked.LastRecordAt.Equal(replay.LastRecordAt))
	add("hot_window_days", booked.HotWindowDays != replay.HotWindowDays)
	add("archived_at", !booked.ArchivedAt.Equal(replay.ArchivedAt))
	add("archived_by", booked.ArchivedBy != replay.ArchivedBy)
	return out
}
