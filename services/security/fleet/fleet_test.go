package fleet_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/archive"
	"github.com/craig/retention/services/rules"
	"github.com/craig/retention/services/security"
	"github.com/craig/retention/services/security/fleet"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// reg is the vocabulary security serves: derived from the producers'
// registrations, as in production.
var reg = security.FleetRegistry()

const archiveID = "0193f1d2-7c4e-7a10-8e2b-5f6a7b8c9d10"

// valid is a rules.evaluations_archived payload every rule accepts.
func valid() map[string]any {
	return map[string]any{
		"source_service": "craig-rules", "archive_id": archiveID, "table": "rule_evaluations",
		"data_key":        "retention-archives/rules/rule_evaluations/2026/12/01/" + archiveID + ".ndjson",
		"manifest_key":    "retention-archives/rules/rule_evaluations/2026/12/01/" + archiveID + ".manifest.json",
		"data_sha256":     strings.Repeat("ab", 32),
		"record_count":    120,
		"store_endpoint":  "http://127.0.0.1:7070",
		"store_bucket":    "craig-archive",
		"first_record_id": "0190a8a0-0000-7000-8000-000000000001",
		"last_record_id":  "0190a8a0-0000-7000-8000-000000000078",
		"first_record_at": "2026-08-01T10:00:00.123456Z",
		"last_record_at":  "2026-08-02T10:00:00Z",
		"hot_window_days": 90,
		"archived_at":     "2026-12-01T11:59:00Z",
		"archived_by":     "system:retention",
	}
}

func body(t *testing.T, m map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

func with(k string, v any) func(map[string]any) {
	return func(m map[string]any) { m[k] = v }
}

func TestValidateAcceptsTheContract(t *testing.T) {
	t.Parallel()
	rec, err := reg.Validate(fleet.RulesArchived, body(t, valid()), now)
	require.NoError(t, err)
	require.Equal(t, uuid.MustParse(archiveID), rec.ArchiveID)
	require.Equal(t, "craig-rules", rec.SourceService)
	require.Equal(t, 120, rec.RecordCount)
	require.Equal(t, 90, rec.HotWindowDays)
	require.True(t, rec.FirstRecordAt.Equal(time.Date(2026, 8, 1, 10, 0, 0, 123456000, time.UTC)))

	sec := valid()
	sec["source_service"], sec["table"] = "craig-security", "dead_letter_audit"
	sec["data_key"] = "retention-archives/security/dead_letter_audit/2026/12/01/" + archiveID + ".ndjson"
	sec["manifest_key"] = "retention-archives/security/dead_letter_audit/2026/12/01/" + archiveID + ".manifest.json"
	_, err = reg.Validate(fleet.SecurityArchived, body(t, sec), now)
	require.NoError(t, err)
	// Edges that are allowed: archived_at just inside the skew, one record,
	// first = last, the window's bounds.
	for _, edit := range []func(map[string]any){
		with("archived_at", now.Add(fleet.ClockSkew).Format(time.RFC3339Nano)),
		with("record_count", 1), with("record_count", fleet.MaxRecordCount),
		with("hot_window_days", 1), with("hot_window_days", fleet.MaxHotWindowDays),
		with("last_record_id", "0190a8a0-0000-7000-8000-000000000001"),
		with("last_record_at", "2026-08-01T10:00:00.123456Z"),
	} {
		m := valid()
		edit(m)
		_, err := reg.Validate(fleet.RulesArchived, body(t, m), now)
		require.NoError(t, err, "%v", m)
	}
}

// TestValidateRefusesForgeries: each forged event is refused with the
// reason of the rule it breaks (the metric label) before anything could be
// written.
func TestValidateRefusesForgeries(t *testing.T) {
	t.Parallel()
	otherID := "0193f1d2-7c4e-7a10-8e2b-5f6a7b8c9d11"
	tests := []struct {
		name      string
		eventType string
		edit      func(map[string]any)
		raw       string
		reason    string
	}{
		{name: "source of another service", edit: with("source_service", "craig-security"), reason: fleet.ReasonSource},
		{name: "unknown source", edit: with("source_service", "craig-evil"), reason: fleet.ReasonSource},
		{name: "security event claiming rules", eventType: fleet.SecurityArchived, reason: fleet.ReasonSource},
		{name: "table outside the vocabulary", edit: with("table", "audit_log"), reason: fleet.ReasonTable},
		{name: "table injection", edit: with("table", "rule_evaluations; DROP TABLE archive_records"), reason: fleet.ReasonTable},
		{name: "data key under another service", edit: with("data_key", "retention-archives/security/rule_evaluations/2026/12/01/"+archiveID+".ndjson"), reason: fleet.ReasonKeyPrefix},
		{name: "data key outside the prefix", edit: with("data_key", "other/"+archiveID+".ndjson"), reason: fleet.ReasonKeyPrefix},
		{name: "data key traversal", edit: with("data_key", "retention-archives/rules/rule_evaluations/../../security/x/2026/12/01/"+archiveID+".ndjson"), reason: fleet.ReasonKeyPrefix},
		{name: "manifest key naming another archive", edit: with("manifest_key", "retention-archives/rules/rule_evaluations/2026/12/01/"+otherID+".manifest.json"), reason: fleet.ReasonKeyPrefix},
		{name: "keys swapped", edit: func(m map[string]any) { m["data_key"], m["manifest_key"] = m["manifest_key"], m["data_key"] }, reason: fleet.ReasonKeyPrefix},
		{name: "sha256 upper case", edit: with("data_sha256", strings.Repeat("AB", 32)), reason: fleet.ReasonSHA256},
		{name: "sha256 short", edit: with("data_sha256", strings.Repeat("a", 63)), reason: fleet.ReasonSHA256},
		{name: "zero records", edit: with("record_count", 0), reason: fleet.ReasonRecordCount},
		{name: "negative records", edit: with("record_count", -5), reason: fleet.ReasonRecordCount},
		{name: "too many records", edit: with("record_count", fleet.MaxRecordCount+1), reason: fleet.ReasonRecordCount},
		{name: "fractional count", edit: with("record_count", 1.5), reason: fleet.ReasonMalformed},
		{name: "inverted id range", edit: func(m map[string]any) {
			m["first_record_id"], m["last_record_id"] = m["last_record_id"], m["first_record_id"]
		}, reason: fleet.ReasonRecordRange},
		{name: "nil record id", edit: with("first_record_id", uuid.Nil.String()), reason: fleet.ReasonRecordRange},
		{name: "non-canonical archive id", edit: with("archive_id", strings.ToUpper(archiveID)), reason: fleet.ReasonArchiveID},
		{name: "first after last", edit: with("first_record_at", "2026-08-03T00:00:00Z"), reason: fleet.ReasonTimestamps},
		{name: "last after archived", edit: with("last_record_at", "2026-12-01T11:59:01Z"), reason: fleet.ReasonTimestamps},
		{name: "archived in the future", edit: with("archived_at", now.Add(fleet.ClockSkew+time.Second).Format(time.RFC3339Nano)), reason: fleet.ReasonTimestamps},
		{name: "time not RFC 3339", edit: with("archived_at", "yesterday"), reason: fleet.ReasonTimestamps},
		{name: "hot window zero", edit: with("hot_window_days", 0), reason: fleet.ReasonHotWindow},
		{name: "hot window too long", edit: with("hot_window_days", fleet.MaxHotWindowDays+1), reason: fleet.ReasonHotWindow},
		{name: "empty endpoint", edit: with("store_endpoint", ""), reason: fleet.ReasonStoreIdentity},
		{name: "blank bucket", edit: with("store_bucket", "  "), reason: fleet.ReasonStoreIdentity},
		{name: "empty actor", edit: with("archived_by", ""), reason: fleet.ReasonArchivedBy},
		{name: "missing field", edit: func(m map[string]any) { delete(m, "data_sha256") }, reason: fleet.ReasonMalformed},
		{name: "unknown field", edit: with("purged_at", "2026-12-01T00:00:00Z"), reason: fleet.ReasonMalformed},
		{name: "wrong type", edit: with("record_count", "120"), reason: fleet.ReasonMalformed},
		{name: "not an object", raw: `[1, 2]`, reason: fleet.ReasonMalformed},
		{name: "two values", raw: `{} {}`, reason: fleet.ReasonMalformed},
		{name: "not an archive event type", eventType: "rules.evaluated", reason: fleet.ReasonEventType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := valid()
			if tt.edit != nil {
				tt.edit(m)
			}
			b := []byte(tt.raw)
			if tt.raw == "" {
				b = body(t, m)
			}
			et := tt.eventType
			if et == "" {
				et = fleet.RulesArchived
			}
			_, err := reg.Validate(et, b, now)
			require.ErrorIs(t, err, fleet.ErrRefused)
			var r *fleet.Refusal
			require.ErrorAs(t, err, &r)
			require.Equal(t, tt.reason, r.Reason, r.Rule)
			require.NotEmpty(t, r.Rule)
		})
	}
}

func TestDivergence(t *testing.T) {
	t.Parallel()
	booked, err := reg.Validate(fleet.RulesArchived, body(t, valid()), now)
	require.NoError(t, err)
	require.Empty(t, fleet.Divergence(booked, booked), "an identical replay")
	same := booked
	same.ArchivedAt = booked.ArchivedAt.In(time.FixedZone("x", 3600))
	require.Empty(t, fleet.Divergence(booked, same), "the same instant in another zone")
	tests := []struct {
		edit func(*fleet.Record)
		want []string
	}{
		{func(r *fleet.Record) { r.ManifestKey += "x" }, []string{"manifest_key"}},
		{func(r *fleet.Record) { r.DataSHA256 = strings.Repeat("cd", 32); r.RecordCount++ }, []string{"data_sha256", "record_count"}},
		{func(r *fleet.Record) { r.ArchivedAt = r.ArchivedAt.Add(time.Microsecond) }, []string{"archived_at"}},
		{func(r *fleet.Record) { r.StoreBucket = "other"; r.ArchivedBy = "cli:eve" }, []string{"store_bucket", "archived_by"}},
		{func(r *fleet.Record) { r.FirstRecordID = uuid.Max }, []string{"first_record_id"}},
		{func(r *fleet.Record) { r.HotWindowDays = 30; r.Table = "x" }, []string{"table", "hot_window_days"}},
	}
	for _, tt := range tests {
		r := booked
		tt.edit(&r)
		require.Equal(t, tt.want, fleet.Divergence(booked, r))
	}
}

// FuzzValidate: no payload makes Validate panic, and whatever it accepts
// obeys every rule (so a forger who finds a gap finds it here first).
func FuzzValidate(f *testing.F) {
	v := valid()
	b, _ := json.Marshal(v)
	f.Add(fleet.RulesArchived, b)
	f.Add(fleet.SecurityArchived, b)
	f.Add(fleet.RulesArchived, []byte(`{"record_count": 1e400}`))
	f.Add("x", []byte(`null`))
	f.Fuzz(func(t *testing.T, eventType string, payload []byte) {
		rec, err := reg.Validate(eventType, payload, now)
		if err != nil {
			var r *fleet.Refusal
			if !errors.As(err, &r) || r.Reason == "" {
				t.Fatalf("an error that is not a refusal: %v", err)
			}
			return
		}
		src, ok := reg.SourceOf(eventType)
		switch {
		case !ok || rec.SourceService != src.SourceService:
			t.Fatalf("accepted a foreign source: %+v", rec)
		case rec.RecordCount < 1 || rec.RecordCount > fleet.MaxRecordCount:
			t.Fatalf("accepted count %d", rec.RecordCount)
		case !strings.HasPrefix(rec.DataKey, "retention-archives/"+src.Service+"/"+rec.Table+"/"),
			!strings.HasPrefix(rec.ManifestKey, "retention-archives/"+src.Service+"/"+rec.Table+"/"),
			!strings.Contains(rec.DataKey, rec.ArchiveID.String()), strings.Contains(rec.DataKey, ".."):
			t.Fatalf("accepted keys %q %q", rec.DataKey, rec.ManifestKey)
		case rec.ArchivedAt.After(now.Add(fleet.ClockSkew)), rec.FirstRecordAt.After(rec.LastRecordAt):
			t.Fatalf("accepted times %+v", rec)
		}
	})
}

func TestValidateLifecycle(t *testing.T) {
	t.Parallel()
	at := now.Add(-time.Minute).Format(time.RFC3339Nano)
	c, err := fleet.ValidateLifecycle("rules.archive_retention_set", []byte(`{"actor":"ops:carol","at":"`+at+`","archive_id":"`+archiveID+`","retention_until":"2033-01-31","table":"rule_evaluations"}`), now)
	require.NoError(t, err)
	require.Equal(t, "craig-rules", c.SourceService)
	require.Equal(t, uuid.MustParse(archiveID), c.ArchiveID)
	require.Equal(t, "2033-01-31", c.RetentionUntil.Format(time.DateOnly))
	c, err = fleet.ValidateLifecycle("security.archive_hold_placed", []byte(`{"actor":"ops:carol","at":"`+at+`","legal_hold":{"`+archiveID+`":true},"title":"t"}`), now)
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID]bool{uuid.MustParse(archiveID): true}, c.LegalHold)
	c, err = fleet.ValidateLifecycle("rules.archive_purged", []byte(`{"actor":"ops:alice","at":"`+at+`","archive_ids":["`+archiveID+`"]}`), now)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{uuid.MustParse(archiveID)}, c.Purged)
	next, order := uuid.New(), uuid.New()
	otherID := uuid.NewString()
	c, err = fleet.ValidateLifecycle("rules.archive_superseded", []byte(`{"actor":"ops:alice","approver":"ops:bob","at":"`+at+`","archive_ids":["`+archiveID+
		`"],"expunge_id":"`+order.String()+`","superseded_by":{"`+archiveID+`":"`+next.String()+`"},"commitment":"ab"}`), now)
	require.NoError(t, err)
	require.Equal(t, fleet.KindSuperseded, c.Kind)
	require.Equal(t, "ops:bob", c.PurgedBy, "the approval destroyed it")
	require.Equal(t, order, c.ExpungeID)
	require.Equal(t, map[uuid.UUID]*uuid.UUID{uuid.MustParse(archiveID): &next}, c.SupersededBy)

	for name, tt := range map[string]struct{ eventType, body, reason string }{
		"superseded without its order": {"rules.archive_superseded", `{"actor":"a","at":"` + at + `","archive_ids":["` + archiveID + `"],"superseded_by":{"` + archiveID + `":null}}`, fleet.ReasonArchiveID},
		"superseded without lineage":   {"rules.archive_superseded", `{"actor":"a","at":"` + at + `","archive_ids":["` + archiveID + `"],"expunge_id":"` + archiveID + `","superseded_by":{}}`, fleet.ReasonRecordCount},
		"superseded, lineage of another": {"rules.archive_superseded", `{"actor":"a","at":"` + at + `","archive_ids":["` + archiveID + `"],"expunge_id":"` + archiveID +
			`","superseded_by":{"` + uuid.NewString() + `":null}}`, fleet.ReasonArchiveID},
		"superseded by itself": {"rules.archive_superseded", `{"actor":"a","at":"` + at + `","archive_ids":["` + archiveID + `"],"expunge_id":"` + archiveID +
			`","superseded_by":{"` + archiveID + `":"` + archiveID + `"}}`, fleet.ReasonArchiveID},
		"superseded in a cycle": {"rules.archive_superseded", `{"actor":"a","at":"` + at + `","archive_ids":["` + archiveID + `","` + otherID + `"],"expunge_id":"` + archiveID +
			`","superseded_by":{"` + archiveID + `":"` + otherID + `","` + otherID + `":"` + archiveID + `"}}`, fleet.ReasonArchiveID},
		"superseded named twice": {"rules.archive_superseded", `{"actor":"a","at":"` + at + `","archive_ids":["` + archiveID + `","` + archiveID + `"],"expunge_id":"` + archiveID +
			`","superseded_by":{"` + archiveID + `":null,"` + otherID + `":null}}`, fleet.ReasonArchiveID},
		"unknown source": {"evil.archive_purged", `{}`, fleet.ReasonEventType},
		"not lifecycle":  {"rules.archive_read", `{}`, fleet.ReasonEventType},
		"no actor":       {"rules.archive_purged", `{"at":"` + at + `","archive_ids":[]}`, fleet.ReasonArchivedBy},
		"future":         {"rules.archive_purged", `{"actor":"a","at":"` + now.Add(time.Hour).Format(time.RFC3339) + `"}`, fleet.ReasonTimestamps},
		"bad id":         {"rules.archive_purged", `{"actor":"a","at":"` + at + `","archive_ids":["x"]}`, fleet.ReasonArchiveID},
		"bad date":       {"rules.archive_retention_set", `{"actor":"a","at":"` + at + `","archive_id":"` + archiveID + `","retention_until":"31/01/2033"}`, fleet.ReasonTimestamps},
		"bad hold id":    {"rules.archive_hold_released", `{"actor":"a","at":"` + at + `","legal_hold":{"nope":false}}`, fleet.ReasonArchiveID},
		"not json":       {"rules.archive_purged", `[`, fleet.ReasonMalformed},
	} {
		_, err := fleet.ValidateLifecycle(tt.eventType, []byte(tt.body), now)
		var r *fleet.Refusal
		require.True(t, errors.As(err, &r), name)
		require.Equal(t, tt.reason, r.Reason, name)
	}
}

// FuzzValidateLifecycle: no payload makes it panic; what it accepts names
// a known source and only canonical ids.
func FuzzValidateLifecycle(f *testing.F) {
	f.Add("rules.archive_purged", []byte(`{"actor":"a","at":"2026-12-01T11:00:00Z","archive_ids":["`+archiveID+`"]}`))
	f.Add("security.archive_hold_placed", []byte(`{"actor":"a","at":"2026-12-01T11:00:00Z","legal_hold":{"`+archiveID+`":true}}`))
	f.Fuzz(func(t *testing.T, eventType string, payload []byte) {
		c, err := fleet.ValidateLifecycle(eventType, payload, now)
		if err != nil {
			var r *fleet.Refusal
			if !errors.As(err, &r) {
				t.Fatalf("not a refusal: %v", err)
			}
			return
		}
		if c.SourceService != "craig-rules" && c.SourceService != "craig-security" {
			t.Fatalf("accepted source %q", c.SourceService)
		}
		for _, id := range c.Purged {
			if id == uuid.Nil {
				t.Fatal("accepted the nil id")
			}
		}
	})
}

// TestRegistryIsTheProducersRegistrations: the vocabulary is derived from
// each producer's registration, so every table a producer registers is
// accepted (a table added to rules needs no edit of security), and a table
// it does not register, or another producer's, is refused.
func TestRegistryIsTheProducersRegistrations(t *testing.T) {
	t.Parallel()
	producers := []archive.Producer{rules.Producer(), security.Producer()}
	for _, p := range producers {
		require.NotEmpty(t, p.Tables, p.Service)
		src, ok := reg.SourceOf(p.EventType)
		require.True(t, ok, p.EventType)
		require.Equal(t, p.Tables, src.Tables)
		for _, table := range p.Tables {
			m := valid()
			m["source_service"], m["table"] = p.SourceService, table
			m["data_key"] = "retention-archives/" + p.Service + "/" + table + "/2026/12/01/" + archiveID + ".ndjson"
			m["manifest_key"] = "retention-archives/" + p.Service + "/" + table + "/2026/12/01/" + archiveID + ".manifest.json"
			_, err := reg.Validate(p.EventType, body(t, m), now)
			require.NoError(t, err, "%s.%s", p.Service, table)

			for _, other := range producers {
				if other.EventType == p.EventType {
					continue
				}
				_, err := reg.Validate(other.EventType, body(t, m), now)
				require.ErrorIs(t, err, fleet.ErrRefused, "%s's table %s under %s", p.Service, table, other.EventType)
			}
		}
		m := valid()
		m["source_service"], m["table"] = p.SourceService, p.Tables[0]+"_x"
		m["data_key"] = "retention-archives/" + p.Service + "/" + p.Tables[0] + "_x/2026/12/01/" + archiveID + ".ndjson"
		m["manifest_key"] = "retention-archives/" + p.Service + "/" + p.Tables[0] + "_x/2026/12/01/" + archiveID + ".manifest.json"
		_, err := reg.Validate(p.EventType, body(t, m), now)
		var r *fleet.Refusal
		require.ErrorAs(t, err, &r)
		require.Equal(t, fleet.ReasonTable, r.Reason)
	}
}
