package console

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"

	"gopkg.in/yaml.v3"
)

// maxFleetFile bounds the fleet file.
const maxFleetFile = 1 << 20

// Service is one service of the fleet: its name and admin API base URL.
type Service struct {
	Name string `yaml:"name"`
	URL  string `yaml:"url"`
}

var serviceName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// ReadFleet reads a fleet file (the craigctl format). A token_file is
// refused: the console calls with the signed-in person's token only.
func ReadFleet(path string) ([]Service, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxFleetFile {
		return nil, fmt.Errorf("larger than %d bytes", maxFleetFile)
	}
	b, err := os.ReadFile(path) //nolint:gosec // the operator names the file
	if err != nil {
		return nil, err
	}
	var ff struct {
		Services []Service `yaml:"services"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&ff); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w (the console holds no service credentials: a token_file is refused)", err)
	}
	var more any
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document: the fleet file is one")
	}
	if len(ff.Services) == 0 {
		return nil, errors.New("no services (services: [{name, url}])")
	}
	seen := map[string]bool{}
	for i, s := range ff.Services {
		u, err := url.Parse(s.URL)
		switch {
		case !serviceName.MatchString(s.Name):
			return nil, fmt.Errorf("services[%d].name %q: a service name", i, s.Name)
		case seen[s.Name]:
			return nil, fmt.Errorf("service %s is listed twice", s.Name)
		case err != nil || u.Host == "" || u.User != nil || !httpsOrLoopback(u):
			return nil, fmt.Errorf("services[%d].url %q: https, or http on a loopback address only (each call carries a person's token)", i, s.URL)
		}
		seen[s.Name] = true
	}
	return ff.Services, nil
}
