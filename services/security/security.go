// Package security wires the security service into the shared service binary. It
// runs the transport sweep only; its audit tables are archive-then-prune
// (never swept) and arrive with the archive engine.
package security

import (
	"github.com/craig/retention/kernel/app"
	"github.com/craig/retention/kernel/settings"
)

// Name is the service name (environment prefix CRAIG_SECURITY__).
const Name = "security"

// Settings are the security service's settings.
type Settings struct {
	settings.Transport `koanf:",squash"`
}

// DefaultSettings returns the security defaults.
func DefaultSettings() Settings {
	return Settings{Transport: settings.DefaultTransport(app.DefaultDatabaseURL(Name))}
}

// Spec is the security service for the shared binary.
func Spec() app.Spec[Settings] {
	return app.Spec[Settings]{
		Name:      Name,
		Defaults:  DefaultSettings(),
		Transport: func(s Settings) settings.Transport { return s.Transport },
	}
}
