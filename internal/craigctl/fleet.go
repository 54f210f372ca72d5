package craigctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

// inboxMarginDays is how much longer a consumer's inbox window must be
// than a producer's outbox window, and how much shorter a producer's
// replay clamp than a consumer's inbox window: the margin each service
// enforces on its own windows (settings.MinInboxMarginDays, ADR-022),
// here across services.
const inboxMarginDays = 1

// maxFleetFile bounds fleet.yaml.
const maxFleetFile = 1 << 20

// fleetFile is fleet.yaml: the services and where their admin APIs are.
type fleetFile struct {
	Services []fleetService `yaml:"services"`
}

type fleetService struct {
	Name string `yaml:"name"`
	URL  string `yaml:"url"`
	// TokenFile is this service's token (default: --token-file or
	// $CRAIG_TOKEN; none when neither, for a loopback service without keys).
	TokenFile string `yaml:"token_file"`
}

// Windows is a service's answer of GET /admin/retention.
type Windows struct {
	Service                  string         `json:"service"`
	EventOutboxRetentionDays int            `json:"event_outbox_retention_days"`
	EventInboxRetentionDays  int            `json:"event_inbox_retention_days"`
	ReplayMaxAgeDays         int            `json:"replay_max_age_days"`
	Tables                   map[string]int `json:"tables"`
	// Archive is present for an archiving service.
	Archive *struct {
		SubjectKeyFingerprint string `json:"subject_key_fingerprint"`
		// SubjectKinds are the kinds its tables declare (nil from a
		// service that does not say: it is asked anyway).
		SubjectKinds []string `json:"subject_kinds"`
	} `json:"archive,omitempty"`
}

// Violation is one broken fleet rule.
type Violation struct {
	Rule     string `json:"rule"`
	Producer string `json:"producer"`
	Consumer string `json:"consumer"`
	Detail   string `json:"detail"`
}

// Fleet-check rules.
const (
	RuleInboxOutlivesOutbox = "inbox_outlives_outbox"
	RuleReplayWithinInbox   = "replay_within_inbox"
	// RuleSubjectHoldEverywhere: a subject hold active on one archiving
	// service is active on every archiving service of the fleet (a
	// subpoena about a case reaches every service's archives).
	RuleSubjectHoldEverywhere = "subject_hold_everywhere"
	// RuleSubjectKeySame: every archiving service hashes subjects with the
	// fleet's one key (else their subject holds cannot be compared, and a
	// hold placed by hash on one would name nothing on another).
	RuleSubjectKeySame = "subject_key_same"
)

func newFleetCmd(o *options) *cobra.Command {
	var path string
	check := &cobra.Command{
		Use:   "check --config fleet.yaml",
		Short: "Check the fleet: every inbox outlives every outbox, no replay reaches past an inbox, every subject hold, court order and schedule version is on every archiving service",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return usageErr("--config fleet.yaml is required")
			}
			ff, err := readFleet(path)
			if err != nil {
				return err
			}
			ws, err := o.fetchWindows(cmd.Context(), ff)
			if err != nil {
				return err
			}
			holds, err := o.fetchHolds(cmd.Context(), ff, ws)
			if err != nil {
				return err
			}
			orders, err := o.fetchOrders(cmd.Context(), ff, ws)
			if err != nil {
				return err
			}
			versions, err := o.fetchSchedules(cmd.Context(), ff, ws)
			if err != nil {
				return err
			}
			vs := append(CheckFleet(ws), CheckSubjectKeys(ws)...)
			vs = append(vs, CheckCourtOrders(orders)...)
			vs = append(vs, CheckScheduleVersions(versions)...)
			return o.reportFleet(ws, append(vs, CheckSubjectHolds(holds)...))
		},
	}
	check.Flags().StringVar(&path, "config", "", "the fleet file: services: [{name, url, token_file?}]")
	return group("fleet", "Checks across every service of the fleet", check)
}

// readFleet reads and checks fleet.yaml (unknown keys refused).
func readFleet(path string) (fleetFile, error) {
	var ff fleetFile
	fi, err := os.Stat(path)
	if err != nil {
		return ff, usageErr("--config: %w", err)
	}
	if fi.Size() > maxFleetFile {
		return ff, usageErr("--config %s: larger than %d bytes", path, maxFleetFile)
	}
	b, err := os.ReadFile(path) //nolint:gosec // the operator names the file
	if err != nil {
		return ff, usageErr("--config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&ff); err != nil && !errors.Is(err, io.EOF) {
		return ff, usageErr("--config %s: %w", path, err)
	}
	if len(ff.Services) == 0 {
		return ff, usageErr("--config %s: no services (services: [{name, url}])", path)
	}
	seen := map[string]bool{}
	for i, s := range ff.Services {
		switch {
		case !serviceName.MatchString(s.Name):
			return ff, usageErr("--config %s: services[%d].name %q: a service name", path, i, s.Name)
		case seen[s.Name]:
			return ff, usageErr("--config %s: service %s is listed twice", path, s.Name)
		}
		if _, err := parseBase(s.URL); err != nil {
			return ff, usageErr("--config %s: services[%d].url: %w", path, i, err)
		}
		seen[s.Name] = true
	}
	return ff, nil
}

// fetchWindows reads every service's Windows; a service that cannot be
// read fails the check (an unchecked fleet is not a passing one).
func (o *options) fetchWindows(ctx context.Context, ff fleetFile) ([]Windows, error) {
	cls, err := o.fleetClients(ff)
	if err != nil {
		return nil, err
	}
	var out []Windows
	for i, cl := range cls {
		s, base := ff.Services[i], cl.base
		var w Windows
		if _, err := cl.do(ctx, http.MethodGet, "/admin/retention", nil, nil, &w); err != nil {
			return nil, fmt.Errorf("%s (%s): %w", s.Name, base, err)
		}
		if w.Service != s.Name {
			return nil, fmt.Errorf("%s (%s) answers as service %q: fleet.yaml points at the wrong service", s.Name, base, w.Service)
		}
		out = append(out, w)
	}
	return out, nil
}

// CheckFleet applies the cross-service window rules of ADR-022 to every
// producer/consumer pair (every service publishes to the exchange and every
// service's inbox dedups what it consumes, so every pair counts):
//
//   - a consumer's event_inbox_retention_days ≥ a producer's
//     event_outbox_retention_days + 1: the dedup record outlives every
//     replayable outbox row;
//   - a producer's replay_max_age_days ≤ a consumer's
//     event_inbox_retention_days − 1: no replay reaches events whose dedup
//     records are gone.
//
// A window of 0 (that sweep off: kept forever) satisfies both sides.
func CheckFleet(ws []Windows) []Violation {
	var vs []Violation
	for _, p := range ws {
		for _, c := range ws {
			if c.EventInboxRetentionDays == 0 {
				continue
			}
			if p.EventOutboxRetentionDays > 0 && c.EventInboxRetentionDays < p.EventOutboxRetentionDays+inboxMarginDays {
				vs = append(vs, Violation{Rule: RuleInboxOutlivesOutbox, Producer: p.Service, Consumer: c.Service,
					Detail: fmt.Sprintf("%s event_inbox_retention_days=%d < %s event_outbox_retention_days=%d + %d",
						c.Service, c.EventInboxRetentionDays, p.Service, p.EventOutboxRetentionDays, inboxMarginDays)})
			}
			if p.ReplayMaxAgeDays > c.EventInboxRetentionDays-inboxMarginDays {
				vs = append(vs, Violation{Rule: RuleReplayWithinInbox, Producer: p.Service, Consumer: c.Service,
					Detail: fmt.Sprintf("%s replay_max_age_days=%d > %s event_inbox_retention_days=%d - %d",
						p.Service, p.ReplayMaxAgeDays, c.Service, c.EventInboxRetentionDays, inboxMarginDays)})
			}
		}
	}
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].Rule < vs[j].Rule })
	return vs
}

func (o *options) reportFleet(ws []Windows, vs []Violation) error {
	if vs == nil {
		vs = []Violation{}
	}
	raw, err := json.Marshal(map[string]any{"ok": len(vs) == 0, "services": ws, "violations": vs})
	if err != nil {
		return err
	}
	if err := o.show(raw, func(w io.Writer) {
		row(w, "SERVICE", "OUTBOX_DAYS", "INBOX_DAYS", "REPLAY_MAX_AGE_DAYS")
		for _, s := range ws {
			row(w, s.Service, s.EventOutboxRetentionDays, s.EventInboxRetentionDays, s.ReplayMaxAgeDays)
		}
		for _, v := range vs {
			row(w, "VIOLATION "+v.Rule+": "+v.Detail)
		}
		if len(vs) == 0 {
			row(w, fmt.Sprintf("ok: %d service(s), every inbox outlives every outbox and no replay reaches past an inbox", len(ws)))
		}
	}); err != nil {
		return err
	}
	if len(vs) > 0 {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("%d fleet window violation(s)", len(vs))}
	}
	return nil
}

// fetchHolds reads the holds of every archiving service of the fleet
// (service → holds): those whose /admin/retention has an "archive"
// section. An archiving service that answers 404 (its archive API not
// served) has no holds, and counts as such: a subject hold anywhere else
// is then reported one-sided, never skipped. Any other failure fails the
// check.
func (o *options) fetchHolds(ctx context.Context, ff fleetFile, ws []Windows) (map[string][]hold, error) {
	cls, err := o.fleetClients(ff)
	if err != nil {
		return nil, err
	}
	out := map[string][]hold{}
	for i, cl := range cls {
		if ws[i].Archive == nil {
			continue // archives nothing
		}
		var ans struct {
			Holds []hold `json:"holds"`
		}
		_, err := cl.do(ctx, http.MethodGet, "/admin/archive/holds", nil, nil, &ans)
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			out[cl.service] = nil // archive API not served: no hold can be placed there, so any subject hold elsewhere is one-sided
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s holds: %w", cl.service, err)
		}
		out[cl.service] = ans.Holds
	}
	return out, nil
}

// CheckSubjectHolds reports every subject (by its keyed hash: the services
// share one subject key) held by an active hold on some archiving services
// and not on others.
func CheckSubjectHolds(holds map[string][]hold) []Violation {
	heldOn := map[string]map[string]bool{} // hash → services
	for svc, hs := range holds {
		for _, h := range hs {
			if !h.Active {
				continue
			}
			for _, hash := range h.SubjectHashes {
				if heldOn[hash] == nil {
					heldOn[hash] = map[string]bool{}
				}
				heldOn[hash][svc] = true
			}
		}
	}
	services := make([]string, 0, len(holds))
	for svc := range holds {
		services = append(services, svc)
	}
	sort.Strings(services)
	hashes := make([]string, 0, len(heldOn))
	for h := range heldOn {
		hashes = append(hashes, h)
	}
	sort.Strings(hashes)
	var vs []Violation
	for _, hash := range hashes {
		var with, without []string
		for _, svc := range services {
			if heldOn[hash][svc] {
				with = append(with, svc)
			} else {
				without = append(without, svc)
			}
		}
		for _, svc := range without {
			vs = append(vs, Violation{Rule: RuleSubjectHoldEverywhere, Producer: with[0], Consumer: svc,
				Detail: fmt.Sprintf("a subject (keyed hash %s…) is held on %v and not on %s: place the hold there too (same --subject)", hash[:min(12, len(hash))], with, svc)})
		}
	}
	return vs
}

// CheckSubjectKeys reports archiving services whose subject keys differ
// (by fingerprint) or that have none while another has one.
func CheckSubjectKeys(ws []Windows) []Violation {
	var first *Windows
	var vs []Violation
	for i := range ws {
		w := &ws[i]
		if w.Archive == nil {
			continue
		}
		if first == nil {
			first = w
			continue
		}
		a, b := first.Archive.SubjectKeyFingerprint, w.Archive.SubjectKeyFingerprint
		if a == b {
			continue
		}
		detail := fmt.Sprintf("%s and %s hash subjects with different keys (fingerprints %q, %q): set the fleet's one archive.subject_key_file on both", first.Service, w.Service, a, b)
		if a == "" || b == "" {
			detail = fmt.Sprintf("%s has a subject key and %s has none (fingerprints %q, %q): set the fleet's one archive.subject_key_file on both", first.Service, w.Service, a, b)
		}
		vs = append(vs, Violation{Rule: RuleSubjectKeySame, Producer: first.Service, Consumer: w.Service, Detail: detail})
	}
	return vs
}
