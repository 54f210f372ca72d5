package settings

import "strings"

// Undocumented returns the keys of T (with their environment variables for
// service) that a configuration reference text does not mention. A service
// pins docs/configuration.md with it, so a new key cannot ship undocumented.
func Undocumented[T any](service, reference string) []string {
	var missing []string
	envPrefix := EnvPrefix(service)
	genericPrefix := "CRAIG_<SVC>__"
	for _, key := range Keys[T]() {
		if !strings.Contains(reference, "`"+key+"`") {
			missing = append(missing, key)
			continue
		}
		suffix := strings.TrimPrefix(EnvVar(service, key), envPrefix)
		if !strings.Contains(reference, envPrefix+suffix) && !strings.Contains(reference, genericPrefix+suffix) {
			missing = append(missing, EnvVar(service, key))
		}
	}
	return missing
}
