package schedule

import (
	"fmt"
	"slices"
)

// Implicit is the schedule that holds while no version is approved: for
// each series, archive.retention.<table>_days after the record, or
// permanent without one (an archive with no date is never purgeable).
func Implicit(series []Series) Document {
	d := Document{Version: "(settings)"}
	for _, s := range series {
		retain := Permanent
		if s.RetentionDays > 0 {
			retain = fmt.Sprintf("P%dD", s.RetentionDays)
		}
		d.Items = append(d.Items, Item{ID: s.Table, Series: s.Table, Starts: Starts{ClockRecord}, Retain: retain, Action: ActionReview,
			Authority: "archive.retention." + s.Table + "_days"})
	}
	return d
}

// covering is the item of d that governs a row of series whose case
// closed with classification key class: the item with that classification,
// else the series' item without one.
func (d Document) covering(series, class string) (Item, bool) {
	var fallback *Item
	for i, it := range d.Items {
		if it.Series != series {
			continue
		}
		switch k := classKey(it.When); {
		case k == class && class != "":
			return it, true
		case k == "":
			fallback = &d.Items[i]
		}
	}
	if fallback == nil {
		return Item{}, false
	}
	return *fallback, true
}

// NearerSeries are the series some row of which could fall due earlier
// under next than under current: for every classification either names
// (and none), the item next applies against the one current applies. An
// item is nearer when the current one is permanent and it is not, when it
// drops a clock the current one waits for, or when its period is shorter
// in months or in days (a month is not a fixed number of days, so either
// counts). It errs towards nearer: a version it names needs archive:purge
// on its approval.
func NearerSeries(current, next Document) []string {
	var out []string
	for _, s := range seriesOf(current, next) {
		classes := map[string]bool{"": true}
		for _, d := range []Document{current, next} {
			for _, it := range d.Items {
				if it.Series == s {
					classes[classKey(it.When)] = true
				}
			}
		}
		for class := range classes {
			n, okN := next.covering(s, class)
			c, okC := current.covering(s, class)
			if okN && (!okC || nearer(n, c)) {
				out = append(out, s)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

func seriesOf(docs ...Document) []string {
	var out []string
	for _, d := range docs {
		for _, it := range d.Items {
			if !slices.Contains(out, it.Series) {
				out = append(out, it.Series)
			}
		}
	}
	return out
}

// nearer reports whether item n can make a row due earlier than item c.
func nearer(n, c Item) bool {
	np, errN := ParsePeriod(n.Retain)
	cp, errC := ParsePeriod(c.Retain)
	switch {
	case errN != nil || errC != nil:
		return true // not a valid pair: never approved without the purge scope
	case np.Permanent:
		return false
	case cp.Permanent:
		return true
	}
	for _, clock := range c.Starts {
		if !slices.Contains(n.Starts, clock) {
			return true
		}
	}
	return np.Months < cp.Months || np.Days < cp.Days
}
