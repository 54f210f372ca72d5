package migrations_test

import (
	"slices"
	"testing"

	"github.com/craig/retention/migrations"
)

// TestArchivingServicesGetTheArchiveSet: the kernel's archive_ledger set
// comes after the service's own set (rules' own 00001 created the table
// first; the set adopts it), and only archiving services get it.
func TestArchivingServicesGetTheArchiveSet(t *testing.T) {
	t.Parallel()
	for service, want := range map[string][]string{
		"rules":     {"transport", "rules", "archive"},
		"exchange":  {"transport", "exchange"},
		"financial": {"transport", "financial"},
		"security":  {"transport", "security", "archive"},
	} {
		sets, err := migrations.ForService(service)
		if err != nil {
			t.Fatalf("%s: %v", service, err)
		}
		var got []string
		for _, s := range sets {
			got = append(got, s.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: sets %v, want %v", service, got, want)
		}
	}
	if _, err := migrations.ForService("nope"); err == nil {
		t.Error("an unknown service must be refused")
	}
}
