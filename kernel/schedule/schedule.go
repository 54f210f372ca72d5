// Package schedule is a records schedule as an agency writes it (ADR-073):
// a versioned document of items, each naming a series (an archived table),
// the case classification it applies to, the clocks that start its
// retention, the period, what happens when it runs out, and the legal
// authority that allows it. Parse reads and validates one; Nearer compares
// a proposed version with the one in force.
package schedule

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Limits of a document's fields: a version or an item code is a short
// label, an authority a citation (a statute and a date, a schedule's code
// and its approval), a document a schedule of a few hundred items.
const (
	MaxVersion   = 64
	MaxItemID    = 64
	MaxText      = 500
	MaxItems     = 1000
	MaxDocument  = 1 << 20
	maxPeriodNum = 1000 // years, months, weeks or days: a thousand years is not a records period
)

// Clock is what starts an item's retention.
type Clock string

// The clocks: the row's own age column, and the closure of the row's case.
const (
	ClockRecord     Clock = "record"
	ClockCaseClosed Clock = "case.closed"
)

// Action is what happens to a row when its retention runs out.
type Action string

// The actions: listed for a records officer's review (the default), or
// destroyed by the scheduled worker when records.auto_destroy allows it.
const (
	ActionReview  Action = "review"
	ActionDestroy Action = "destroy"
)

// Permanent is the retain value of an item whose rows are never due.
const Permanent = "permanent"

// Document is one version of a service's records schedule.
type Document struct {
	Version string `json:"version" yaml:"version"`
	Items   []Item `json:"items" yaml:"items"`
}

// Item is one line of the schedule.
type Item struct {
	ID     string `json:"id" yaml:"id"`
	Series string `json:"series" yaml:"series"`
	// When narrows the item to rows whose case closed with a
	// classification; it takes precedence over its series' item without
	// one.
	When *When `json:"when,omitempty" yaml:"when"`
	// Starts are the clocks; several mean whichever is later.
	Starts Starts `json:"starts" yaml:"starts"`
	// Retain is an ISO-8601 period (P10Y, P18M, P6W, P30D) or permanent.
	Retain    string `json:"retain" yaml:"retain"`
	Action    Action `json:"action" yaml:"action"`
	Authority string `json:"authority" yaml:"authority"`
}

// When is an item's condition on the row's case.
type When struct {
	Classification string `json:"classification" yaml:"classification"`
}

// Starts are an item's clocks: written as one (starts: record) or a list.
type Starts []Clock

// UnmarshalYAML reads a clock or a list of clocks.
func (s *Starts) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*s = Starts{Clock(n.Value)}
		return nil
	}
	var list []Clock
	if err := n.Decode(&list); err != nil {
		return err
	}
	*s = list
	return nil
}

// Has is whether c is among the clocks.
func (s Starts) Has(c Clock) bool {
	for _, x := range s {
		if x == c {
			return true
		}
	}
	return false
}

// ActionOrDefault is the item's action, review when none is written.
func (it Item) ActionOrDefault() Action {
	if it.Action == "" {
		return ActionReview
	}
	return it.Action
}

// Period is a retention period: calendar months and days (a year is twelve
// months, a week seven days), or permanent (never due).
type Period struct {
	Months, Days int
	Permanent    bool
}

var periodRE = regexp.MustCompile(`^P(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)W)?(?:(\d+)D)?$`)

// ParsePeriod reads an ISO-8601 period of years, months, weeks and days,
// or permanent. A time part (PT…) is refused: a records period is counted
// in days.
func ParsePeriod(s string) (Period, error) {
	if s == Permanent {
		return Period{Permanent: true}, nil
	}
	m := periodRE.FindStringSubmatch(s)
	if m == nil || s == "P" {
		return Period{}, fmt.Errorf("%q is not an ISO-8601 period of years, months, weeks and days (P10Y, P18M, P6W, P30D) or %q", s, Permanent)
	}
	var n [4]int
	for i, g := range m[1:] {
		if g == "" {
			continue
		}
		v, err := strconv.Atoi(g)
		if err != nil || v > maxPeriodNum {
			return Period{}, fmt.Errorf("%q: %s is more than %d", s, g, maxPeriodNum)
		}
		n[i] = v
	}
	p := Period{Months: n[0]*12 + n[1], Days: n[2]*7 + n[3]}
	if p.Months == 0 && p.Days == 0 {
		return Period{}, fmt.Errorf("%q is no time at all: a record kept for no time is not a schedule", s)
	}
	return p, nil
}

// String is the period as ISO-8601 (months and days).
func (p Period) String() string {
	if p.Permanent {
		return Permanent
	}
	var b strings.Builder
	b.WriteString("P")
	if p.Months > 0 {
		fmt.Fprintf(&b, "%dM", p.Months)
	}
	if p.Days > 0 {
		fmt.Fprintf(&b, "%dD", p.Days)
	}
	return b.String()
}

// Series is what a service tells the schedule about one of its archived
// tables.
type Series struct {
	Table string
	// RetentionDays is the table's archive.retention.<table>_days: the
	// schedule that holds while none is approved (0: never due).
	RetentionDays int
}

// Problem is one thing wrong with a document: the item (its index and
// code; -1 for the document itself), the field, and what is wrong.
type Problem struct {
	Item    int    `json:"item"`
	ID      string `json:"id,omitempty"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

// InvalidError is a document refused, with every problem found.
type InvalidError struct {
	Problems []Problem
}

func (e *InvalidError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		where := "the schedule"
		if p.Item >= 0 {
			where = fmt.Sprintf("items[%d]", p.Item)
			if p.ID != "" {
				where += " (" + p.ID + ")"
			}
		}
		parts[i] = where + ": " + p.Field + ": " + p.Message
	}
	return "schedule: " + strings.Join(parts, "; ")
}

// ErrInvalid is wrapped by every InvalidError.
var ErrInvalid = errors.New("schedule: invalid document")

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// Parse reads a schedule document (YAML, or JSON, which YAML reads too),
// strictly (an unknown or repeated key is refused), and validates it for
// a service archiving series. Action defaults to review.
func Parse(raw []byte, series []Series) (Document, error) {
	var d Document
	if len(raw) > MaxDocument {
		return d, &InvalidError{Problems: []Problem{{Item: -1, Field: "document", Message: fmt.Sprintf("larger than %d bytes", MaxDocument)}}}
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&d); err != nil {
		return d, &InvalidError{Problems: []Problem{{Item: -1, Field: "document", Message: err.Error()}}}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return d, &InvalidError{Problems: []Problem{{Item: -1, Field: "document", Message: "one document only"}}}
	}
	for i := range d.Items {
		if d.Items[i].Action == "" {
			d.Items[i].Action = ActionReview
		}
	}
	return d, d.Validate(series)
}

// classKey is a classification compared on its normalized form (trimmed,
// case-folded): "Unsubstantiated " and "unsubstantiated" are one.
func classKey(w *When) string {
	if w == nil {
		return ""
	}
	return strings.ToLower(strings.TrimSpace(w.Classification))
}

// checkText refuses empty text, text longer than limit, surrounding white
// space and control characters.
func checkText(s string, limit int) string {
	switch {
	case s == "":
		return "required"
	case !utf8.ValidString(s):
		return "not UTF-8"
	case utf8.RuneCountInString(s) > limit:
		return fmt.Sprintf("longer than %d characters", limit)
	case strings.TrimSpace(s) != s:
		return "surrounding white space"
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return "a control character"
	}
	return ""
}

// Validate checks the document for a service archiving series: every field
// well formed, every item's series one of them, no two items that can
// match the same row, and every series covered by an item without when.
func (d Document) Validate(series []Series) error {
	v := validation{own: map[string]bool{}, ids: map[string]int{}, matches: map[[2]string]int{}}
	if m := checkText(d.Version, MaxVersion); m != "" {
		v.add(-1, "", "version", m)
	}
	if len(d.Items) == 0 {
		v.add(-1, "", "items", "no items: a schedule names one for every archived table")
	}
	if len(d.Items) > MaxItems {
		v.add(-1, "", "items", fmt.Sprintf("more than %d", MaxItems))
	}
	for _, s := range series {
		v.own[s.Table] = true
	}
	for i, it := range d.Items {
		v.identity(d, i, it)
		v.clocks(i, it)
		v.terms(i, it)
	}
	for _, s := range series {
		if _, ok := v.matches[[2]string{s.Table, ""}]; !ok {
			v.add(-1, "", "items", fmt.Sprintf("no item without when covers %s: every archived table needs one", s.Table))
		}
	}
	if len(v.problems) > 0 {
		return &InvalidError{Problems: v.problems}
	}
	return nil
}

// validation collects a document's problems.
type validation struct {
	problems []Problem
	own      map[string]bool
	ids      map[string]int    // an item code, case-folded → its item
	matches  map[[2]string]int // series, classification → its item
}

func (v *validation) add(i int, id, field, msg string) {
	v.problems = append(v.problems, Problem{Item: i, ID: id, Field: field, Message: msg})
}

// identity checks an item's code, series and condition, and that no
// earlier item matches the same rows.
func (v *validation) identity(d Document, i int, it Item) {
	if m := checkText(it.ID, MaxItemID); m != "" {
		v.add(i, it.ID, "id", m)
	} else if j, dup := v.ids[strings.ToLower(it.ID)]; dup {
		v.add(i, it.ID, "id", fmt.Sprintf("items[%d] has the same code", j))
	} else {
		v.ids[strings.ToLower(it.ID)] = i
	}
	if !v.own[it.Series] {
		v.add(i, it.ID, "series", fmt.Sprintf("%q is not an archived table of this service (%s)", it.Series, strings.Join(slices.Sorted(maps.Keys(v.own)), ", ")))
	}
	if it.When != nil {
		if m := checkText(it.When.Classification, MaxText); m != "" {
			v.add(i, it.ID, "when.classification", m)
		}
	}
	key := [2]string{it.Series, classKey(it.When)}
	if j, dup := v.matches[key]; dup {
		cond := "without when"
		if it.When != nil {
			cond = fmt.Sprintf("with classification %q", it.When.Classification)
		}
		v.add(i, it.ID, "when", fmt.Sprintf("items[%d] (%s) matches the same rows: series %s %s", j, d.Items[j].ID, it.Series, cond))
	} else {
		v.matches[key] = i
	}
}

// clocks checks an item's starts.
func (v *validation) clocks(i int, it Item) {
	if len(it.Starts) == 0 {
		v.add(i, it.ID, "starts", fmt.Sprintf("required: %q, %q or both", ClockRecord, ClockCaseClosed))
	}
	seen := map[Clock]bool{}
	for _, c := range it.Starts {
		switch {
		case c != ClockRecord && c != ClockCaseClosed:
			v.add(i, it.ID, "starts", fmt.Sprintf("%q is not a clock (%q, %q)", c, ClockRecord, ClockCaseClosed))
		case seen[c]:
			v.add(i, it.ID, "starts", fmt.Sprintf("%q twice", c))
		}
		seen[c] = true
	}
}

// terms checks an item's period, action and authority.
func (v *validation) terms(i int, it Item) {
	p, err := ParsePeriod(it.Retain)
	if err != nil {
		v.add(i, it.ID, "retain", err.Error())
	}
	switch it.Action {
	case ActionReview, ActionDestroy:
	default:
		v.add(i, it.ID, "action", fmt.Sprintf("%q is not %q or %q", it.Action, ActionReview, ActionDestroy))
	}
	if err == nil && p.Permanent && it.Action == ActionDestroy {
		v.add(i, it.ID, "action", "destroy with retain permanent: nothing would ever be destroyed")
	}
	if m := checkText(it.Authority, MaxText); m != "" {
		v.add(i, it.ID, "authority", m+": every item cites the law or schedule that allows it")
	}
}
