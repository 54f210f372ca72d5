package craigctl

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
)

// RuleScheduleSame: every archiving service has the same records schedule
// version in force (ADR-073): a case's rows on two services fall due under
// one law, and a schedule approved on one and not another destroys one
// service's copy of a case years before the other's.
const RuleScheduleSame = "schedule_version_same"

// fetchSchedules reads the version in force on each archiving service ("":
// none); a service that serves no schedule API (404, 503) is left out.
func (o *options) fetchSchedules(ctx context.Context, ff fleetFile, ws []Windows) (map[string]string, error) {
	cls, err := o.fleetClients(ff)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i, cl := range cls {
		if ws[i].Archive == nil {
			continue
		}
		var st scheduleState
		_, err := cl.do(ctx, http.MethodGet, "/admin/retention/schedule", nil, nil, &st)
		var ae *APIError
		if errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusServiceUnavailable) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s schedule: %w", cl.service, err)
		}
		out[cl.service] = ""
		if st.InForce != nil {
			out[cl.service] = st.InForce.Version
		}
	}
	return out, nil
}

// CheckScheduleVersions reports each archiving service whose schedule
// version in force differs from the first one's (by service name).
func CheckScheduleVersions(versions map[string]string) []Violation {
	services := make([]string, 0, len(versions))
	for svc := range versions {
		services = append(services, svc)
	}
	slices.Sort(services)
	var vs []Violation
	for _, svc := range services[min(1, len(services)):] {
		first, a, b := services[0], versions[services[0]], versions[svc]
		if a == b {
			continue
		}
		vs = append(vs, Violation{Rule: RuleScheduleSame, Producer: first, Consumer: svc,
			Detail: fmt.Sprintf("%s has schedule version %s in force and %s has %s: propose and approve the fleet's one version on both (craigctl schedule propose --fleet)",
				first, shownVersion(a), svc, shownVersion(b))})
	}
	return vs
}

func shownVersion(v string) string {
	if v == "" {
		return "none"
	}
	return fmt.Sprintf("%q", v)
}
