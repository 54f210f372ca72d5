package craigctl

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
)

// decimal is an integer flag read strictly in base 10, the way the services
// read their settings: pflag's own int flags parse with base 0, so "030"
// would be octal 24 (a parser that reads a leading zero as octal) and
// "0x1e" 30. A leading zero is refused, never guessed at.
type decimal struct {
	v   *int
	set bool
}

var decimalDigits = regexp.MustCompile(`^(0|[1-9][0-9]{0,8})$`)

func (d *decimal) String() string {
	if d.v == nil || !d.set {
		return ""
	}
	return strconv.Itoa(*d.v)
}

func (d *decimal) Set(s string) error {
	if !decimalDigits.MatchString(s) {
		return fmt.Errorf("%q is not a decimal number (digits only, no leading zero)", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return err
	}
	*d.v, d.set = n, true
	return nil
}

func (*decimal) Type() string { return "N" }

// parseUUID reads an id argument.
func parseUUID(what, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		return uuid.Nil, usageErr("%s %q: not a uuid (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", what, s)
	}
	return id, nil
}

// parseTime reads an RFC 3339 time or a date (midnight UTC).
func parseTime(flag, s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.Parse(time.DateOnly, s); err == nil {
		return d, nil
	}
	return time.Time{}, usageErr("--%s %q: an RFC 3339 time (2026-01-02T15:04:05Z) or a date (2026-01-02)", flag, s)
}

// exactArgs is cobra.ExactArgs as a usage error.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErr("expected %s, got %d argument(s)", names, len(args))
		}
		return nil
	}
}
