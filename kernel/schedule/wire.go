package schedule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/craig/retention/kernel/jsonstrict"
	"github.com/craig/retention/kernel/subject"
)

// IsCaseEvent is true for the event types that move a case's clock.
func IsCaseEvent(eventType string) bool {
	return eventType == EventClosed || eventType == EventReopened || eventType == EventMerged
}

// CaseEventTypes are the routing keys a service binds to receive them.
func CaseEventTypes() []string { return []string{EventClosed, EventReopened, EventMerged} }

// wireEvent is a case event's payload as a producer publishes it (ADR-073):
// case.closed {case_id, closed_at, classification}, case.reopened
// {case_id, reopened_at}, case.merged {case_id, into_case_id, merged_at}.
// A case id is a JSON number or a string of digits.
type wireEvent struct {
	CaseID         json.RawMessage `json:"case_id"`
	ClosedAt       *time.Time      `json:"closed_at"`
	Classification *string         `json:"classification"`
	ReopenedAt     *time.Time      `json:"reopened_at"`
	IntoCaseID     json.RawMessage `json:"into_case_id"`
	MergedAt       *time.Time      `json:"merged_at"`
}

// DecodeEvent reads a received case event's payload; an error wraps
// ErrBadEvent and never repeats a case number.
func DecodeEvent(eventType string, payload []byte) (Event, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadEvent, fmt.Sprintf(format, args...))
	}
	if !IsCaseEvent(eventType) {
		return Event{}, bad("type %q is not %s, %s or %s", eventType, EventClosed, EventReopened, EventMerged)
	}
	var w wireEvent
	if err := jsonstrict.CheckKeys(payload, &w); err != nil {
		return Event{}, bad("payload: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Event{}, bad("payload: not a %s object (%s)", eventType, strings.SplitN(err.Error(), ":", 2)[0])
	}
	c, err := caseOf("case_id", w.CaseID)
	if err != nil {
		return Event{}, err
	}
	e := Event{Type: eventType, Case: c}
	field, at := map[string]*time.Time{EventClosed: w.ClosedAt, EventReopened: w.ReopenedAt, EventMerged: w.MergedAt}, ""
	switch eventType {
	case EventClosed:
		at = "closed_at"
		if w.Classification == nil {
			return Event{}, bad("classification is required (the case's classification at closure)")
		}
		e.Classification = *w.Classification
	case EventReopened:
		at = "reopened_at"
	case EventMerged:
		at = "merged_at"
		if e.Into, err = caseOf("into_case_id", w.IntoCaseID); err != nil {
			return Event{}, err
		}
	}
	if field[eventType] == nil {
		return Event{}, bad("%s is required", at)
	}
	e.At = field[eventType].UTC()
	for name, set := range map[string]bool{
		"closed_at": w.ClosedAt != nil && at != "closed_at", "reopened_at": w.ReopenedAt != nil && at != "reopened_at",
		"merged_at": w.MergedAt != nil && at != "merged_at", "classification": w.Classification != nil && eventType != EventClosed,
		"into_case_id": w.IntoCaseID != nil && eventType != EventMerged,
	} {
		if set {
			return Event{}, bad("%s is not a field of %s", name, eventType)
		}
	}
	return e, nil
}

// caseOf reads a case id: a JSON number of digits or a string of digits.
func caseOf(name string, raw json.RawMessage) (subject.Subject, error) {
	v := strings.TrimSpace(string(raw))
	if v == "" || v == "null" {
		return subject.Subject{}, fmt.Errorf("%w: %s is required", ErrBadEvent, name)
	}
	if v[0] == '"' {
		if err := json.Unmarshal(raw, &v); err != nil {
			return subject.Subject{}, fmt.Errorf("%w: %s is not a string", ErrBadEvent, name)
		}
	}
	s, err := subject.Parse(string(subject.Case) + ":" + v)
	if err != nil {
		return subject.Subject{}, fmt.Errorf("%w: %s: %w", ErrBadEvent, name, err)
	}
	return s, nil
}
